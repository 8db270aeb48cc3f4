// The interface between sparse_input.cc (layout, checks, threads) and the
// kernels that multiply a transposed Q8_0 weight by inputs with few nonzero
// columns: the scalar reference (sparse_input_ref.cc) and one file per ISA
// (sparse_input_avx2.cc, sparse_input_avx512.cc). Plain data and function
// pointers only (docs/KERNELS.md, "ODR rule").
//
// Arithmetic (the dense Q8_0 contract of matmul_kernels.h, column-wise):
// the input is quantized per block of 32 as matmul quantizes it (hq, dx);
// for each block g with a listed input, in increasing g, output j gets
//     isum = sum over the block's listed inputs i of hq[i] * q[i][j]  (exact)
//     acc  = fma(float(isum), fl(d[g][j] * dx[g]), acc)
// from acc = +0. A block whose hq are all zero adds exactly nothing, so the
// result is bit-identical to matmul() of the original matrix on the same
// input. Values are stored as u = q + 128 (VPDPBUSD's unsigned operand), so
// a kernel forms isum as sum(hq * u) - 128 * sum(hq); the listed inputs of
// a block come in groups of 4 (the last padded with a repeat of its first
// input and hq = 0), each group's four hq packed in one int32 for a broadcast.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tessera::kernels {

// Tokens per call at most (the model runs larger batches densely).
constexpr int64_t kSparseInputMaxTokens = 4;
// Output columns per chunk (a chunk's float outputs stay in L1).
constexpr int64_t kSparseInputChunk = 1024;

struct SparseInputArgs {
  const uint8_t* u = nullptr;    // [in][stride]: u[i * stride + j] = W[j, i]'s value + 128
  const uint16_t* d = nullptr;   // [in / 32][stride] fp16: W[j, block g]'s scale
  int64_t stride = 0;            // a multiple of 64 (>= out)
  // Blocks with a listed input, ascending: block blocks[b] has groups
  // [gstart[b], gstart[b + 1]) of 4 inputs rows[4 * group + r].
  const int32_t* blocks = nullptr;
  const int32_t* gstart = nullptr;
  const int32_t* rows = nullptr;
  int64_t n_blocks = 0, n_groups = 0;
  // hq4[t * n_groups + group]: token t's 4 quantized values of the group's
  // inputs, byte r for input r (int8); hsum[t * n_blocks + b] = 128 * the
  // sum of token t's values over block b's inputs.
  const int32_t* hq4 = nullptr;
  const int32_t* hsum = nullptr;
  const float* dx = nullptr;     // [n_tokens][dx_stride]: token t's scale of block g
  int64_t dx_stride = 0;
  int64_t n_tokens = 0;          // 1..kSparseInputMaxTokens
  float* y = nullptr;            // [n_tokens][y_stride]
  int64_t y_stride = 0;
};

// Writes y[t][j] for j in [j0, j1): j0 a multiple of 64, j1 - j0 <= kSparseInputChunk
// and a multiple of 64 (the last chunk may end at `out`, which the caller
// rounds up: y then needs j1 columns; the driver passes its own buffer).
using SparseInputFn = void (*)(const SparseInputArgs& a, int64_t j0, int64_t j1);

struct SparseInputKernels {
  const char* name;
  SparseInputFn run;
};

const SparseInputKernels& sparse_input_kernels_ref();
const SparseInputKernels& sparse_input_kernels_avx2();
const SparseInputKernels& sparse_input_kernels_avx512();

}  // namespace tessera::kernels
