#include "kernels/quant.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/fp16.h"
#include "kernels/block_values.h"
#include "kernels/blocks.h"
#include "kernels/quant_more.h"

namespace tessera::kernels {
namespace {

void dequant_q4_0(const BlockQ4_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_f32(b[i].d);
    for (int j = 0; j < kQK / 2; ++j) {
      y[i * kQK + j] = static_cast<float>((b[i].qs[j] & 0x0f) - 8) * d;
      y[i * kQK + j + kQK / 2] = static_cast<float>((b[i].qs[j] >> 4) - 8) * d;
    }
  }
}

void dequant_q8_0(const BlockQ8_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_f32(b[i].d);
    for (int j = 0; j < kQK; ++j) y[i * kQK + j] = static_cast<float>(b[i].qs[j]) * d;
  }
}

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K super-block.
void q4k_scale_min(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

void dequant_q4_k(const BlockQ4_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_f32(b[i].d);
    const float dmin = fp16_to_f32(b[i].dmin);
    const uint8_t* q = b[i].qs;
    int is = 0;
    for (int j = 0; j < kQK_K; j += 64) {
      uint8_t sc, m;
      q4k_scale_min(is + 0, b[i].scales, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      q4k_scale_min(is + 1, b[i].scales, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * (q[l] & 0x0f) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * (q[l] >> 4) - m2;
      q += 32;
      is += 2;
    }
  }
}

void dequant_q5_k(const BlockQ5_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_f32(b[i].d);
    const float dmin = fp16_to_f32(b[i].dmin);
    const uint8_t* q = b[i].qs;
    for (int j = 0; j < 4; ++j) {
      uint8_t sc, m;
      q4k_scale_min(2 * j, b[i].scales, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      q4k_scale_min(2 * j + 1, b[i].scales, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * ((q[l] & 0x0f) | (((b[i].qh[l] >> (2 * j)) & 1) << 4)) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * ((q[l] >> 4) | (((b[i].qh[l] >> (2 * j + 1)) & 1) << 4)) - m2;
      q += 32;
    }
  }
}

void dequant_q3_k(const BlockQ3_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_f32(b[i].d);
    for (int s = 0; s < 16; ++s) {
      const float dl = d * static_cast<float>(q3_k_scale(b[i], s));
      for (int v = 16 * s; v < 16 * s + 16; ++v) *y++ = dl * static_cast<float>(q3_k_value(b[i], v));
    }
  }
}

void dequant_q6_k(const BlockQ6_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_f32(b[i].d);
    const uint8_t* ql = b[i].ql;
    const uint8_t* qh = b[i].qh;
    const int8_t* sc = b[i].scales;
    for (int n = 0; n < kQK_K; n += 128) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int8_t q1 = static_cast<int8_t>((ql[l] & 0xf) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int8_t q2 = static_cast<int8_t>((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int8_t q3 = static_cast<int8_t>((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int8_t q4 = static_cast<int8_t>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l + 0] = d * sc[is + 0] * q1;
        y[l + 32] = d * sc[is + 2] * q2;
        y[l + 64] = d * sc[is + 4] * q3;
        y[l + 96] = d * sc[is + 6] * q4;
      }
      y += 128;
      ql += 64;
      qh += 32;
      sc += 8;
    }
  }
}

void quant_q8_0(const float* x, BlockQ8_0* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) amax = std::fmax(amax, std::fabs(x[i * kQK + j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = f32_to_fp16(d);
    for (int j = 0; j < kQK; ++j) b[i].qs[j] = static_cast<int8_t>(std::round(x[i * kQK + j] * id));
  }
}

void quant_q4_0(const float* x, BlockQ4_0* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    // The scale maps the value of largest magnitude, sign included, to -8,
    // so the asymmetric range -8..7 is used where it helps most.
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < kQK; ++j) {
      const float v = x[i * kQK + j];
      if (amax < std::fabs(v)) {
        amax = std::fabs(v);
        max = v;
      }
    }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = f32_to_fp16(d);
    for (int j = 0; j < kQK / 2; ++j) {
      const float x0 = x[i * kQK + j] * id;
      const float x1 = x[i * kQK + kQK / 2 + j] * id;
      const int q0 = std::min(15, static_cast<int>(static_cast<int8_t>(x0 + 8.5f)));
      const int q1 = std::min(15, static_cast<int>(static_cast<int8_t>(x1 + 8.5f)));
      b[i].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

}  // namespace

bool can_dequantize(DType t) {
  switch (t) {
    case DType::kF32: case DType::kF16: case DType::kBF16: case DType::kQ8_0:
    case DType::kQ4_0: case DType::kQ4_K: case DType::kQ5_K: case DType::kQ6_K: case DType::kQ3_K:
      return true;
    default:
      return dequantizes_more(t);
  }
}

bool can_quantize(DType t) {
  switch (t) {
    case DType::kF32: case DType::kF16: case DType::kBF16: case DType::kQ8_0: case DType::kQ4_0:
      return true;
    default:
      return quantizes_more(t);
  }
}

void dequantize_row(DType t, const void* src, float* dst, int64_t n) {
  const int64_t bs = dtype_traits(t).block_size;
  TESSERA_CHECK(n % bs == 0, kInvalidArgument, "dequantize_row: {} elements is not a multiple of {}", n, bs);
  if (reinterpret_cast<uintptr_t>(src) % alignof(uint16_t) != 0) {
    // The decoders read blocks through their 2-byte-aligned structs; a file
    // whose alignment puts a tensor at an odd offset is read from a copy.
    std::vector<uint8_t> copy(row_bytes(t, n));
    std::memcpy(copy.data(), src, copy.size());
    dequantize_row(t, copy.data(), dst, n);
    return;
  }
  const int64_t nb = n / bs;
  switch (t) {
    case DType::kF32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); return;
    case DType::kF16: {
      const auto* h = static_cast<const fp16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_f32(h[i]);
      return;
    }
    case DType::kBF16: {
      const auto* h = static_cast<const bf16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(h[i]);
      return;
    }
    case DType::kQ8_0: dequant_q8_0(static_cast<const BlockQ8_0*>(src), dst, nb); return;
    case DType::kQ4_0: dequant_q4_0(static_cast<const BlockQ4_0*>(src), dst, nb); return;
    case DType::kQ4_K: dequant_q4_k(static_cast<const BlockQ4_K*>(src), dst, nb); return;
    case DType::kQ5_K: dequant_q5_k(static_cast<const BlockQ5_K*>(src), dst, nb); return;
    case DType::kQ6_K: dequant_q6_k(static_cast<const BlockQ6_K*>(src), dst, nb); return;
    case DType::kQ3_K: dequant_q3_k(static_cast<const BlockQ3_K*>(src), dst, nb); return;
    default: dequantize_more(t, src, dst, nb); return;
  }
}

void quantize_row(DType t, const float* src, void* dst, int64_t n) {
  const int64_t bs = dtype_traits(t).block_size;
  TESSERA_CHECK(n % bs == 0, kInvalidArgument, "quantize_row: {} elements is not a multiple of {}", n, bs);
  const int64_t nb = n / bs;
  switch (t) {
    case DType::kF32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); return;
    case DType::kF16: {
      auto* h = static_cast<fp16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = f32_to_fp16(src[i]);
      return;
    }
    case DType::kBF16: {
      auto* h = static_cast<bf16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = f32_to_bf16(src[i]);
      return;
    }
    case DType::kQ8_0: quant_q8_0(src, static_cast<BlockQ8_0*>(dst), nb); return;
    case DType::kQ4_0: quant_q4_0(src, static_cast<BlockQ4_0*>(dst), nb); return;
    default: quantize_more(t, src, dst, nb); return;
  }
}

}  // namespace tessera::kernels
