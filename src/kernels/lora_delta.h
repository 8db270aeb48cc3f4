// The two products of a LoRA delta, y += s * B (A x), for the tokens of one
// adapter pair (Punica's kernels on the CPU: a prefill segment of one
// adapter is SGMV, a decode token per adapter is BGMV; both are a call of
// n tokens here, n = 1 for the latter):
//
//   shrink: ax[i][k] = scale * sum_j A[k, j] * x[row(i), j]     k < rank
//   expand: y[row(i), o] += sum_k ax[i][k] * B[k, o]           o < out
//
// A is [rank][in] and B [rank][out] (B transposed from the usual [out][rank],
// so that expand is an axpy along out per rank). row(i) = rows[i], or i
// when rows is null: the tokens of one adapter may be scattered over the
// batch. Dispatches on `isa` to the scalar reference (Isa::kScalar) or the
// vector kernels (lora_delta_avx2.cc, lora_delta_avx512.cc); each output is
// computed the same way whatever the other tokens of the call (arithmetic in
// kernels/lora_delta_kernels.h). Runs on the calling thread; no allocation.
#pragma once

#include <cstdint>

#include "core/cpu.h"

namespace tessera::kernels {

// ax: [n][rank]. Rows of x hold at least `in` values, x_stride apart.
void lora_shrink(const float* a, int64_t rank, int64_t in, float scale, const float* x, int64_t x_stride,
                 const int32_t* rows, int64_t n, float* ax, Isa isa);

// ax: [n][rank]. Rows of y hold at least `out` values, y_stride apart; the
// rows of one call must be distinct.
void lora_expand(const float* b, int64_t rank, int64_t out, const float* ax, float* y, int64_t y_stride,
                 const int32_t* rows, int64_t n, Isa isa);

}  // namespace tessera::kernels
