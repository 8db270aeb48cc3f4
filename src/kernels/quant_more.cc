#include "kernels/quant_more.h"

#include <cstring>

#include "core/error.h"
#include "core/fp16.h"
#include "kernels/block_values.h"
#include "kernels/blocks.h"

namespace tessera::kernels {
namespace {

// Q4_1 / Q5_1: w = d * q + m.
template <class Block, bool kFifth>
void dequant_affine32(const Block* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = fp16_to_f32(b[i].d), m = fp16_to_f32(b[i].m);
    for (int j = 0; j < kQK; ++j) {
      int q = nibble32(b[i].qs, j);
      if constexpr (kFifth) q = q5_value(b[i].qh, b[i].qs, j);
      y[j] = static_cast<float>(q) * d + m;
    }
  }
}

void dequant_q5_0(const BlockQ5_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = fp16_to_f32(b[i].d);
    for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(q5_value(b[i].qh, b[i].qs, j) - 16) * d;
  }
}

void dequant_q2_k(const BlockQ2_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_f32(b[i].d), dmin = fp16_to_f32(b[i].dmin);
    for (int s = 0; s < 16; ++s) {
      const float dl = d * static_cast<float>(b[i].scales[s] & 15);
      const float ml = dmin * static_cast<float>(b[i].scales[s] >> 4);
      for (int v = 16 * s; v < 16 * s + 16; ++v) *y++ = dl * static_cast<float>(two_bit_value(b[i].qs, v)) - ml;
    }
  }
}

void dequant_iq4_nl(const BlockIQ4_NL* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = fp16_to_f32(b[i].d);
    for (int j = 0; j < kQK; ++j) y[j] = d * static_cast<float>(kIQ4Values[nibble32(b[i].qs, j)]);
  }
}

void dequant_iq4_xs(const BlockIQ4_XS* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_f32(b[i].d);
    for (int s = 0; s < 8; ++s) {
      const float dl = d * static_cast<float>(iq4_xs_scale(b[i], s));
      for (int v = 32 * s; v < 32 * s + 32; ++v) *y++ = dl * static_cast<float>(iq4_xs_value(b[i], v));
    }
  }
}

void dequant_mxfp4(const BlockMXFP4* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = e8m0_half(b[i].e);
    for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(kMXFP4Values[nibble32(b[i].qs, j)]) * d;
  }
}

void dequant_tq1_0(const BlockTQ1_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK_K) {
    const float d = fp16_to_f32(b[i].d);
    for (int v = 0; v < kQK_K; ++v) y[v] = static_cast<float>(tq1_0_value(b[i], v)) * d;
  }
}

void dequant_tq2_0(const BlockTQ2_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK_K) {
    const float d = fp16_to_f32(b[i].d);
    for (int v = 0; v < kQK_K; ++v) y[v] = static_cast<float>(two_bit_value(b[i].qs, v) - 1) * d;
  }
}

}  // namespace

bool dequantizes_more(DType t) {
  switch (t) {
    case DType::kQ4_1: case DType::kQ5_0: case DType::kQ5_1: case DType::kQ2_K: case DType::kIQ4_NL:
    case DType::kIQ4_XS: case DType::kMXFP4: case DType::kTQ1_0: case DType::kTQ2_0:
      return true;
    default:
      return false;
  }
}

void dequantize_more(DType t, const void* src, float* dst, int64_t nb) {
  switch (t) {
    case DType::kQ4_1: return dequant_affine32<BlockQ4_1, false>(static_cast<const BlockQ4_1*>(src), dst, nb);
    case DType::kQ5_0: return dequant_q5_0(static_cast<const BlockQ5_0*>(src), dst, nb);
    case DType::kQ5_1: return dequant_affine32<BlockQ5_1, true>(static_cast<const BlockQ5_1*>(src), dst, nb);
    case DType::kQ2_K: return dequant_q2_k(static_cast<const BlockQ2_K*>(src), dst, nb);
    case DType::kIQ4_NL: return dequant_iq4_nl(static_cast<const BlockIQ4_NL*>(src), dst, nb);
    case DType::kIQ4_XS: return dequant_iq4_xs(static_cast<const BlockIQ4_XS*>(src), dst, nb);
    case DType::kMXFP4: return dequant_mxfp4(static_cast<const BlockMXFP4*>(src), dst, nb);
    case DType::kTQ1_0: return dequant_tq1_0(static_cast<const BlockTQ1_0*>(src), dst, nb);
    case DType::kTQ2_0: return dequant_tq2_0(static_cast<const BlockTQ2_0*>(src), dst, nb);
    default: fail(ErrorCode::kInvalidArgument, "cannot dequantize type {}", dtype_name(t));
  }
}

}  // namespace tessera::kernels
