// Dequantization of the block types added for issue 35 (the rest of what
// llama-quantize writes: Q4_1, Q5_0, Q5_1, Q2_K, IQ4_NL, IQ4_XS, MXFP4,
// TQ1_0, TQ2_0), kept apart from quant.cc's original types. Internal to
// quant.cc; the public entry points are in kernels/quant.h.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace tessera::kernels {

// Whether dequantize_more() handles the type.
bool dequantizes_more(DType t);

// dst[0..nb * block) = the values of nb blocks of type t at src, each
// computed in float32 in the order of the format's reference dequantizer
// (so bit-identical to it, and to tests/reference/dequant_ref.py).
void dequantize_more(DType t, const void* src, float* dst, int64_t nb);

// Whether quantize_more() writes the type (every type dequantize_more reads).
bool quantizes_more(DType t);

// Stores nb blocks of type t at dst from src, rounding to nearest. Each
// block's parameters are chosen first (a small search over the scale for
// the non-uniform grids IQ4_NL / IQ4_XS / MXFP4, least squared error), then
// every value takes the level nearest it under the parameters as stored
// (fp16 rounded), so the file decodes as close to src as its scales allow.
void quantize_more(DType t, const float* src, void* dst, int64_t nb);

}  // namespace tessera::kernels
