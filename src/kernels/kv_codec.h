// Quantized KV tiles (--kv-type q8_0 | q4_0): how one (block, kv head) tile
// of K or V stores its values, and the scalar code that writes and reads
// them. Included by attention.cc and by every per-ISA attention file, so all
// functions have internal linkage (docs/KERNELS.md, "ODR rule"); they are
// plain integer and single-multiply float code, so every ISA's compilation
// gives the same bits.
//
// Each token's head vector (head_dim values) is quantized in blocks of
// kv_quant_block(head_dim) consecutive features (32, or the whole head when
// head_dim is not a multiple of 32), rounded exactly as ggml's Q8_0 / Q4_0
// reference quantizers round (kernels/quant.h): value = q * d, d an fp16
// scale per block, q in [-127, 127] (q8_0) or nibble - 8 in [-8, 7] (q4_0).
// A tile is its values, then its scales (fp16):
//   K (feature-major, as the float tiles): q8_0 int8 [head_dim][block_size],
//     q4_0 [head_dim][block_size / 2] bytes (key j in byte j / 2, low nibble
//     for even j); scales [head_dim / qb][block_size].
//   V (key-major): q8_0 int8 [block_size][head_dim], q4_0 [block_size]
//     [head_dim / 2] bytes (feature d in byte d / 2, low nibble for even d);
//     scales [block_size][head_dim / qb].
// Non-finite inputs quantize to 0 (never undefined behaviour).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/fp16.h"
#include "kernels/attention_kernels.h"

namespace tessera::kernels {
namespace {

// Limits of the quantized tiles (kv_type_supported checks them).
constexpr int32_t kMaxKvQuantHead = 1024;
constexpr int32_t kMaxKvQuantBlockSize = 256;

inline bool kv_quantized(KvElem e) { return e == KvElem::kQ8_0 || e == KvElem::kQ4_0; }

inline int32_t kv_quant_block(int32_t head_dim) { return head_dim % 32 == 0 ? 32 : head_dim; }

// Bytes of one tile's values (the scales follow).
inline size_t kv_tile_value_bytes(KvElem e, int32_t bs, int32_t hd) {
  const size_t n = static_cast<size_t>(bs) * hd;
  switch (e) {
    case KvElem::kF32: return 4 * n;
    case KvElem::kF16: case KvElem::kBF16: return 2 * n;
    case KvElem::kQ8_0: return n;
    case KvElem::kQ4_0: return n / 2;
  }
  return 0;
}

inline size_t kv_tile_bytes_of(KvElem e, int32_t bs, int32_t hd) {
  const size_t values = kv_tile_value_bytes(e, bs, hd);
  if (!kv_quantized(e)) return values;
  return values + 2 * static_cast<size_t>(bs) * (hd / kv_quant_block(hd));
}

inline const fp16_t* kv_scales(KvElem e, const uint8_t* tile, int32_t bs, int32_t hd) {
  return reinterpret_cast<const fp16_t*>(tile + kv_tile_value_bytes(e, bs, hd));
}

// The scale of qb values x and their codes (q8: -127..127; q4: 0..15), as
// ggml's quantizers compute them.
inline void kv_quantize_block(KvElem e, const float* x, int32_t qb, fp16_t* scale, int8_t* q) {
  float amax = 0.0f, max = 0.0f;
  for (int32_t i = 0; i < qb; ++i) {
    const float a = std::fabs(x[i]);
    if (amax < a) {  // NaN never compares greater
      amax = a;
      max = x[i];
    }
  }
  if (!std::isfinite(amax)) amax = max = 0.0f;
  const float d = e == KvElem::kQ8_0 ? amax / 127.0f : max / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  *scale = f32_to_fp16(d);
  for (int32_t i = 0; i < qb; ++i) {
    const float v = x[i] * id;
    if (e == KvElem::kQ8_0) {
      // |v| <= 127 for finite x (|x| <= amax); anything else is a NaN.
      q[i] = v >= -127.5f && v <= 127.5f ? static_cast<int8_t>(std::round(v)) : 0;
    } else {
      const float u = v + 8.5f;  // in [0.5, 16.5] for finite x
      q[i] = u >= 0.0f && u < 16.5f ? static_cast<int8_t>(std::min(15, static_cast<int>(u))) : 8;
    }
  }
}

// Writes one token's head vector x[0, hd) as key `j` of a K tile (column j)
// or as row j of a V tile.
inline void kv_store_token(KvElem e, bool is_k, const float* x, int32_t bs, int32_t hd, int32_t j, uint8_t* tile) {
  const int32_t qb = kv_quant_block(hd), nb = hd / qb;
  fp16_t* scales = reinterpret_cast<fp16_t*>(tile + kv_tile_value_bytes(e, bs, hd));
  int8_t qs[kMaxKvQuantHead];
  for (int32_t b = 0; b < nb; ++b) {
    fp16_t d;
    kv_quantize_block(e, x + static_cast<size_t>(b) * qb, qb, &d, qs);
    if (is_k) {
      scales[static_cast<size_t>(b) * bs + j] = d;
      for (int32_t i = 0; i < qb; ++i) {
        const size_t f = static_cast<size_t>(b) * qb + i;  // feature
        if (e == KvElem::kQ8_0) {
          reinterpret_cast<int8_t*>(tile)[f * bs + j] = qs[i];
        } else {
          uint8_t& byte = tile[f * (bs / 2) + j / 2];
          byte = j % 2 == 0 ? static_cast<uint8_t>((byte & 0xf0) | qs[i]) : static_cast<uint8_t>((byte & 0x0f) | (qs[i] << 4));
        }
      }
    } else {
      scales[static_cast<size_t>(j) * nb + b] = d;
      for (int32_t i = 0; i < qb; ++i) {
        const size_t f = static_cast<size_t>(b) * qb + i;
        if (e == KvElem::kQ8_0) {
          reinterpret_cast<int8_t*>(tile)[static_cast<size_t>(j) * hd + f] = qs[i];
        } else {
          uint8_t& byte = tile[static_cast<size_t>(j) * (hd / 2) + f / 2];
          byte = f % 2 == 0 ? static_cast<uint8_t>((byte & 0xf0) | qs[i]) : static_cast<uint8_t>((byte & 0x0f) | (qs[i] << 4));
        }
      }
    }
  }
}

// The code of feature d of key j (K tile) or of row j (V tile), as a signed value.
inline int32_t kv_code(KvElem e, bool is_k, const uint8_t* tile, int32_t bs, int32_t hd, int32_t d, int32_t j) {
  if (e == KvElem::kQ8_0) {
    return reinterpret_cast<const int8_t*>(tile)[is_k ? static_cast<size_t>(d) * bs + j : static_cast<size_t>(j) * hd + d];
  }
  const uint8_t byte = is_k ? tile[static_cast<size_t>(d) * (bs / 2) + j / 2] : tile[static_cast<size_t>(j) * (hd / 2) + d / 2];
  const int32_t nib = (is_k ? j : d) % 2 == 0 ? byte & 0x0f : byte >> 4;
  return nib - 8;
}

// The value of feature d of key (or V row) j of a quantized tile.
inline float kv_value(KvElem e, bool is_k, const uint8_t* tile, int32_t bs, int32_t hd, int32_t d, int32_t j) {
  const int32_t qb = kv_quant_block(hd);
  const fp16_t* s = kv_scales(e, tile, bs, hd);
  const fp16_t scale = is_k ? s[static_cast<size_t>(d / qb) * bs + j] : s[static_cast<size_t>(j) * (hd / qb) + d / qb];
  return static_cast<float>(kv_code(e, is_k, tile, bs, hd, d, j)) * fp16_to_f32(scale);
}

// Keys [0, n) of a quantized K tile as f32 into dst[d * ld + j].
inline void kv_dequant_k(KvElem e, const uint8_t* tile, int32_t bs, int32_t hd, int32_t n, float* dst, size_t ld) {
  const int32_t qb = kv_quant_block(hd);
  const fp16_t* s = kv_scales(e, tile, bs, hd);
  float sc[kMaxKvQuantBlockSize];
  for (int32_t b = 0; b < hd / qb; ++b) {
    for (int32_t j = 0; j < n; ++j) sc[j] = fp16_to_f32(s[static_cast<size_t>(b) * bs + j]);
    for (int32_t d = b * qb; d < (b + 1) * qb; ++d) {
      float* row = dst + static_cast<size_t>(d) * ld;
      if (e == KvElem::kQ8_0) {
        const int8_t* q = reinterpret_cast<const int8_t*>(tile) + static_cast<size_t>(d) * bs;
        for (int32_t j = 0; j < n; ++j) row[j] = static_cast<float>(q[j]) * sc[j];
      } else {
        const uint8_t* q = tile + static_cast<size_t>(d) * (bs / 2);
        for (int32_t j = 0; j < n; ++j) {
          const int32_t nib = j % 2 == 0 ? q[j / 2] & 0x0f : q[j / 2] >> 4;
          row[j] = static_cast<float>(nib - 8) * sc[j];
        }
      }
    }
  }
}

// V rows [0, n) of a quantized V tile as f32 into dst[j * hd + d].
inline void kv_dequant_v(KvElem e, const uint8_t* tile, int32_t bs, int32_t hd, int32_t n, float* dst) {
  const int32_t qb = kv_quant_block(hd), nb = hd / qb;
  const fp16_t* s = kv_scales(e, tile, bs, hd);
  for (int32_t j = 0; j < n; ++j) {
    float* row = dst + static_cast<size_t>(j) * hd;
    for (int32_t b = 0; b < nb; ++b) {
      const float d = fp16_to_f32(s[static_cast<size_t>(j) * nb + b]);
      if (e == KvElem::kQ8_0) {
        const int8_t* q = reinterpret_cast<const int8_t*>(tile) + static_cast<size_t>(j) * hd + b * qb;
        for (int32_t i = 0; i < qb; ++i) row[b * qb + i] = static_cast<float>(q[i]) * d;
      } else {
        const uint8_t* q = tile + static_cast<size_t>(j) * (hd / 2) + (b * qb) / 2;
        for (int32_t i = 0; i < qb; i += 2) {
          row[b * qb + i] = static_cast<float>((q[i / 2] & 0x0f) - 8) * d;
          row[b * qb + i + 1] = static_cast<float>((q[i / 2] >> 4) - 8) * d;
        }
      }
    }
  }
}

}  // namespace
}  // namespace tessera::kernels
