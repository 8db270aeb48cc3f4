// Conversion between f32 and the stored types, as ggml defines them. These
// are the reference semantics every kernel is tested against.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace tessera::kernels {

// Whether dequantize_row / quantize_row handle the type.
bool can_dequantize(DType type);
bool can_quantize(DType type);

// dst[0..n) = the values of the first n elements stored at src.
// n must be a multiple of the type's block size.
void dequantize_row(DType type, const void* src, float* dst, int64_t n);

// Stores n values in `type` at dst (row_bytes(type, n) bytes), rounding as
// ggml's reference quantizers do, so files we write read back in llama.cpp
// as we intend.
void quantize_row(DType type, const float* src, void* dst, int64_t n);

}  // namespace tessera::kernels
