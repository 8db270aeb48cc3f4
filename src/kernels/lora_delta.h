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
//
// A and B may be stored compact (--lora-type): many adapters in one decode
// step read each token's adapter whole, so their bytes are the step's cost.
#pragma once

#include <cstdint>

#include "core/cpu.h"

namespace tessera::kernels {

// How the rows of A and B are stored: F32; F16 (IEEE half); Q8_0 (ggml's
// blocks of 32 consecutive values of a row, BlockQ8_0: an fp16 scale d and
// 32 int8 q, value d * q; rows whose length is a multiple of 32 only).
enum class LoraWeightType : uint8_t { kF32, kF16, kQ8_0 };

const char* lora_weight_type_name(LoraWeightType t);  // "f32", "f16", "q8_0"
// Whether rows of n values can be stored in t.
bool lora_row_fits(LoraWeightType t, int64_t n);
// Bytes of a row of n values in t (lora_row_fits(t, n)).
int64_t lora_row_bytes(LoraWeightType t, int64_t n);
// A row of n values into t (Q8_0 rounded as ggml's reference quantizer
// does) and back (the values it stands for, exactly).
void lora_pack_row(LoraWeightType t, const float* src, int64_t n, void* dst);
void lora_unpack_row(LoraWeightType t, const void* src, int64_t n, float* dst);

// ax: [n][rank]. Rows of x hold at least `in` values, x_stride apart.
// a: [rank][in] in `type`.
void lora_shrink(const void* a, int64_t rank, int64_t in, float scale, const float* x, int64_t x_stride,
                 const int32_t* rows, int64_t n, float* ax, Isa isa, LoraWeightType type = LoraWeightType::kF32);

// ax: [n][rank]. Rows of y hold at least `out` values, y_stride apart; the
// rows of one call must be distinct. b: [rank][out] in `type`.
void lora_expand(const void* b, int64_t rank, int64_t out, const float* ax, float* y, int64_t y_stride,
                 const int32_t* rows, int64_t n, Isa isa, LoraWeightType type = LoraWeightType::kF32);

}  // namespace tessera::kernels
