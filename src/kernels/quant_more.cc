#include "kernels/quant_more.h"

#include <algorithm>
#include <cmath>
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

// ---- writers -------------------------------------------------------------------

int clamp_round(float v, int lo, int hi) {
  if (!(v == v)) return lo;  // NaN (callers give finite weights; this keeps the cast defined)
  return static_cast<int>(std::nearbyint(std::clamp(v, static_cast<float>(lo), static_cast<float>(hi))));
}

void put_nibbles(uint8_t* qs, const int* q) {
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>((q[j] & 15) | ((q[j + 16] & 15) << 4));
}

void put_fifth_bits(uint8_t* qh, const int* q) {
  uint32_t h = 0;
  for (int j = 0; j < kQK; ++j) h |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
  std::memcpy(qh, &h, 4);
}

// Q4_1 / Q5_1: the block's range on levels 0..kMax, w = d q + min.
template <class Block, int kMax>
void quant_affine32(const float* x, Block* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    const float lo = *std::min_element(x, x + kQK), hi = *std::max_element(x, x + kQK);
    b[i].d = f32_to_fp16((hi - lo) / kMax);
    b[i].m = f32_to_fp16(lo);
    const float d = fp16_to_f32(b[i].d), m = fp16_to_f32(b[i].m);
    int q[kQK];
    for (int j = 0; j < kQK; ++j) q[j] = d != 0.0f ? clamp_round((x[j] - m) / d, 0, kMax) : 0;
    put_nibbles(b[i].qs, q);
    if constexpr (kMax == 31) put_fifth_bits(b[i].qh, q);
  }
}

// Q5_0: Q4_0's rule on 32 levels: the value of largest magnitude maps to -16.
void quant_q5_0(const float* x, BlockQ5_0* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float max = 0.0f;
    for (int j = 0; j < kQK; ++j) max = std::fabs(x[j]) > std::fabs(max) ? x[j] : max;
    b[i].d = f32_to_fp16(max / -16.0f);
    const float d = fp16_to_f32(b[i].d);
    int q[kQK];
    for (int j = 0; j < kQK; ++j) q[j] = d != 0.0f ? clamp_round(x[j] / d, -16, 15) + 16 : 16;
    put_nibbles(b[i].qs, q);
    put_fifth_bits(b[i].qh, q);
  }
}

// The level of `levels` (16 entries) nearest v, and the squared error.
int nearest_of(const int8_t* levels, float d, float v, float* err) {
  int best = 0;
  float be = INFINITY;
  for (int k = 0; k < 16; ++k) {
    const float e = (v - d * static_cast<float>(levels[k])) * (v - d * static_cast<float>(levels[k]));
    if (e < be) be = e, best = k;
  }
  *err = be;
  return best;
}

// Squared error of n values on the grid levels * d, their levels in q.
float grid_error(const int8_t* levels, float d, const float* x, int n, int* q) {
  float total = 0.0f;
  for (int j = 0; j < n; ++j) {
    float e;
    q[j] = nearest_of(levels, d, x[j], &e);
    total += e;
  }
  return total;
}

// The scale of a 32-value block on the IQ4 grid: the largest-magnitude
// value mapped to either end of the grid, times 1, 0.95, ... 0.75; the
// candidate with the least squared error.
float iq4_block_scale(const float* x) {
  float max = 0.0f;
  for (int j = 0; j < kQK; ++j) max = std::fabs(x[j]) > std::fabs(max) ? x[j] : max;
  if (max == 0.0f) return 0.0f;
  float best = max / static_cast<float>(kIQ4Values[0]), best_err = INFINITY;
  int q[kQK];
  for (const float end : {static_cast<float>(kIQ4Values[0]), static_cast<float>(kIQ4Values[15])}) {
    for (int k = 0; k < 6; ++k) {
      const float d = max / end * (1.0f - 0.05f * static_cast<float>(k));
      const float e = grid_error(kIQ4Values, d, x, kQK, q);
      if (e < best_err) best_err = e, best = d;
    }
  }
  return best;
}

void quant_iq4_nl(const float* x, BlockIQ4_NL* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    b[i].d = f32_to_fp16(iq4_block_scale(x));
    int q[kQK];
    grid_error(kIQ4Values, fp16_to_f32(b[i].d), x, kQK, q);
    put_nibbles(b[i].qs, q);
  }
}

void quant_iq4_xs(const float* x, BlockIQ4_XS* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK_K) {
    float ds[8], amax = 0.0f;
    for (int s = 0; s < 8; ++s) amax = std::max(amax, std::fabs(ds[s] = iq4_block_scale(x + 32 * s)));
    b[i].d = f32_to_fp16(amax / 31.0f);
    const float d = fp16_to_f32(b[i].d);
    b[i].scales_h = 0;
    std::memset(b[i].scales_l, 0, sizeof b[i].scales_l);
    for (int s = 0; s < 8; ++s) {
      const int ls = d != 0.0f ? clamp_round(ds[s] / d, -32, 31) : 0;
      b[i].scales_l[s / 2] |= static_cast<uint8_t>(((ls + 32) & 15) << (4 * (s % 2)));
      b[i].scales_h |= static_cast<uint16_t>(((ls + 32) >> 4) << (2 * s));
      int q[kQK];
      grid_error(kIQ4Values, d * static_cast<float>(ls), x + 32 * s, kQK, q);
      put_nibbles(b[i].qs + 16 * s, q);
    }
  }
}

// Q2_K: per sub-block of 16, w = s q - m on q 0..3 over [min(0, lo), hi];
// s and m stored in 4 bits against the super-block's d and dmin.
void quant_q2_k(const float* x, BlockQ2_K* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK_K) {
    float sc[16], mn[16], smax = 0.0f, mmax = 0.0f;
    for (int s = 0; s < 16; ++s) {
      const float lo = std::min(0.0f, *std::min_element(x + 16 * s, x + 16 * s + 16));
      const float hi = *std::max_element(x + 16 * s, x + 16 * s + 16);
      sc[s] = std::max(0.0f, hi - lo) / 3.0f;
      mn[s] = -lo;
      smax = std::max(smax, sc[s]);
      mmax = std::max(mmax, mn[s]);
    }
    b[i].d = f32_to_fp16(smax / 15.0f);
    b[i].dmin = f32_to_fp16(mmax / 15.0f);
    const float d = fp16_to_f32(b[i].d), dmin = fp16_to_f32(b[i].dmin);
    std::memset(b[i].qs, 0, sizeof b[i].qs);
    for (int s = 0; s < 16; ++s) {
      const int l = d != 0.0f ? clamp_round(sc[s] / d, 0, 15) : 0;
      const int m = dmin != 0.0f ? clamp_round(mn[s] / dmin, 0, 15) : 0;
      b[i].scales[s] = static_cast<uint8_t>(l | (m << 4));
      const float dl = d * static_cast<float>(l), ml = dmin * static_cast<float>(m);
      for (int v = 16 * s; v < 16 * s + 16; ++v) {
        const int q = dl != 0.0f ? clamp_round((x[v] + ml) / dl, 0, 3) : 0;
        b[i].qs[32 * (v / 128) + v % 32] |= static_cast<uint8_t>(q << (2 * ((v % 128) / 32)));
      }
    }
  }
}

void quant_mxfp4(const float* x, BlockMXFP4* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
    // 2^(e - 127) * 6 near amax: e from the exponent of amax / 4, and the next.
    int e0 = 0;
    if (amax > 0.0f) e0 = std::clamp(static_cast<int>(std::floor(std::log2(amax))) - 2 + 127, 0, 253);
    int q[kQK], best_q[kQK] = {};
    float best_err = INFINITY;
    uint8_t best_e = 0;
    for (int e = e0; e <= e0 + 1; ++e) {
      const float err = grid_error(kMXFP4Values, e8m0_half(static_cast<uint8_t>(e)), x, kQK, q);
      if (err < best_err) best_err = err, best_e = static_cast<uint8_t>(e), std::copy(q, q + kQK, best_q);
    }
    b[i].e = best_e;
    put_nibbles(b[i].qs, best_q);
  }
}

// Ternary: d = max |x|, t = round(x / d) + 1 in 0..2.
void ternary_levels(const float* x, float d, int* t) {
  for (int v = 0; v < kQK_K; ++v) t[v] = d != 0.0f ? clamp_round(x[v] / d, -1, 1) + 1 : 1;
}
float ternary_scale(const float* x) {
  float amax = 0.0f;
  for (int v = 0; v < kQK_K; ++v) amax = std::max(amax, std::fabs(x[v]));
  return amax;
}

void quant_tq2_0(const float* x, BlockTQ2_0* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK_K) {
    b[i].d = f32_to_fp16(ternary_scale(x));
    int t[kQK_K];
    ternary_levels(x, fp16_to_f32(b[i].d), t);
    std::memset(b[i].qs, 0, sizeof b[i].qs);
    for (int v = 0; v < kQK_K; ++v) b[i].qs[32 * (v / 128) + v % 32] |= static_cast<uint8_t>(t[v] << (2 * ((v % 128) / 32)));
  }
}

// TQ1_0's byte for base-3 digits t[0] (most significant) .. t[n - 1],
// padded to 5 digits: the number scaled by 256 / 243, rounded up, so that
// digit k comes back as ((byte * 3^k mod 256) * 3) >> 8.
uint8_t base3_byte(const int* t, int n, int stride) {
  int v = 0;
  for (int k = 0; k < 5; ++k) v = 3 * v + (k < n ? t[k * stride] : 0);
  return static_cast<uint8_t>((v * 256 + 242) / 243);
}

void quant_tq1_0(const float* x, BlockTQ1_0* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK_K) {
    b[i].d = f32_to_fp16(ternary_scale(x));
    int t[kQK_K];
    ternary_levels(x, fp16_to_f32(b[i].d), t);
    for (int m = 0; m < 32; ++m) b[i].qs[m] = base3_byte(t + m, 5, 32);
    for (int m = 0; m < 16; ++m) b[i].qs[32 + m] = base3_byte(t + 160 + m, 5, 16);
    for (int m = 0; m < 4; ++m) b[i].qh[m] = base3_byte(t + 240 + m, 4, 4);
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

namespace tessera::kernels {

bool quantizes_more(DType t) { return dequantizes_more(t); }

void quantize_more(DType t, const float* src, void* dst, int64_t nb) {
  switch (t) {
    case DType::kQ4_1: return quant_affine32<BlockQ4_1, 15>(src, static_cast<BlockQ4_1*>(dst), nb);
    case DType::kQ5_0: return quant_q5_0(src, static_cast<BlockQ5_0*>(dst), nb);
    case DType::kQ5_1: return quant_affine32<BlockQ5_1, 31>(src, static_cast<BlockQ5_1*>(dst), nb);
    case DType::kQ2_K: return quant_q2_k(src, static_cast<BlockQ2_K*>(dst), nb);
    case DType::kIQ4_NL: return quant_iq4_nl(src, static_cast<BlockIQ4_NL*>(dst), nb);
    case DType::kIQ4_XS: return quant_iq4_xs(src, static_cast<BlockIQ4_XS*>(dst), nb);
    case DType::kMXFP4: return quant_mxfp4(src, static_cast<BlockMXFP4*>(dst), nb);
    case DType::kTQ1_0: return quant_tq1_0(src, static_cast<BlockTQ1_0*>(dst), nb);
    case DType::kTQ2_0: return quant_tq2_0(src, static_cast<BlockTQ2_0*>(dst), nb);
    default: fail(ErrorCode::kInvalidArgument, "cannot quantize to type {}", dtype_name(t));
  }
}

}  // namespace tessera::kernels
