// The interface between qmoe.cc (checks, threads) and the QMoE kernels: the
// scalar reference (qmoe_ref.cc) and one file per ISA (qmoe_avx2.cc,
// qmoe_avx512.cc). Plain data and function pointers only (docs/KERNELS.md,
// "ODR rule").
//
// Arithmetic (kernels/qmoe.h), the same in every kernel, so they agree bit
// for bit: per row and token, two sets (even and odd codewords: two
// independent chains) of 16 lane accumulators for lo and for hi start at +0;
// the row's codeword i, starting at column c, adds x[c + j] to lane j of set
// i mod 2's lo (hi) for each bit j of its lo (hi) mask (inputs are read from
// a copy padded with 16 zeros per token); then lane j = even[j] + odd[j],
// the fixed tree, and y = fma(lo, sum_lo, hi * sum_hi).
#pragma once

#include <cstdint>

#include "kernels/qmoe.h"

namespace tessera::kernels {

struct QmoeRowsArgs {
  const QmoeView* w = nullptr;
  int64_t m = 0;            // matrix
  int64_t row_begin = 0;    // rows [row_begin, row_end) of matrix m; row_begin's codes start at
  int64_t row_end = 0;
  uint64_t code_begin = 0;  // the index of row_begin's first codeword
  const float* x = nullptr; // [n_tokens][x_stride], each row padded with >= 16 zeros past cols
  int64_t x_stride = 0;
  int64_t n_tokens = 0;
  float* y = nullptr;       // [n_tokens][y_stride], rows of matrix m
  int64_t y_stride = 0;
};

struct QmoeKernels {
  const char* name;
  void (*rows)(const QmoeRowsArgs& a);
};

const QmoeKernels& qmoe_kernels_ref();
const QmoeKernels& qmoe_kernels_avx2();
const QmoeKernels& qmoe_kernels_avx512();

// The fixed reduction tree of 16 lanes (the reference's; the vector kernels
// reproduce it with their own instructions).
inline float qmoe_tree16(const float* a) {
  float s8[8], s4[4];
  for (int i = 0; i < 8; ++i) s8[i] = a[i] + a[i + 8];
  for (int i = 0; i < 4; ++i) s4[i] = s8[i] + s8[i + 4];
  const float s2a = s4[0] + s4[2], s2b = s4[1] + s4[3];
  return s2a + s2b;
}

}  // namespace tessera::kernels
