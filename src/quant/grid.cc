#include "quant/grid.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/fp16.h"

namespace tessera::quant {

bool is_grid_type(DType type) {
  return type == DType::kQ4_0 || type == DType::kQ8_0 || type == DType::kQ4_K || type == DType::kQ3_K ||
         type == DType::kQ5_K || type == DType::kQ6_K || type == DType::kQ2_K;
}

namespace {

// A super-block grid: b-bit levels, 0..2^b - 1 (affine: w = d q - m) or
// -2^(b-1)..2^(b-1) - 1, on blocks of `block` values whose scales (and mins)
// are scale_bits-bit integers of the super-block's units.
Grid super_grid(DType type, int bits, int b, bool affine, int block, int scale_bits) {
  TESSERA_CHECK(bits == 0 || bits == b, kInvalidArgument, "{} holds {}-bit values, not {}-bit", dtype_name(type), b,
                bits);
  Grid g;
  g.type = type;
  g.bits = b;
  g.qmin = affine ? 0 : -(1 << (b - 1));
  g.qmax = affine ? (1 << b) - 1 : (1 << (b - 1)) - 1;
  g.affine = affine;
  g.block = block;
  g.super = 256;
  g.scale_bits = scale_bits;
  return g;
}

}  // namespace

Grid make_grid(DType type, int bits) {
  Grid g;
  g.type = type;
  switch (type) {
    case DType::kQ4_0:
      TESSERA_CHECK(bits == 0 || (bits >= 2 && bits <= 4), kInvalidArgument,
                    "Q4_0 holds 4-, 3- or 2-bit values, not {}-bit", bits);
      g.bits = bits == 0 ? 4 : bits;
      g.qmin = -(1 << (g.bits - 1));
      g.qmax = (1 << (g.bits - 1)) - 1;
      return g;
    case DType::kQ8_0:
      TESSERA_CHECK(bits == 0 || bits == 8, kInvalidArgument, "Q8_0 holds 8-bit values, not {}-bit", bits);
      g.bits = 8;
      g.qmin = -127;
      g.qmax = 127;
      g.signed_max = false;
      return g;
    // llama.cpp's K-quants: super-blocks of 256 values.
    case DType::kQ2_K: return super_grid(type, bits, 2, /*affine=*/true, 16, 4);
    case DType::kQ3_K: return super_grid(type, bits, 3, /*affine=*/false, 16, 6);
    case DType::kQ4_K: return super_grid(type, bits, 4, /*affine=*/true, 32, 6);
    case DType::kQ5_K: return super_grid(type, bits, 5, /*affine=*/true, 32, 6);
    case DType::kQ6_K: return super_grid(type, bits, 6, /*affine=*/false, 16, 8);
    default:
      fail(ErrorCode::kInvalidArgument,
           "tessera quantize cannot write {} blocks by this method (it writes Q2_K, Q3_K, Q4_0, Q4_K, Q5_K, Q6_K, "
           "Q8_0, F16, BF16, F32)", dtype_name(type));
  }
}

float block_scale(const Grid& g, const float* w, int64_t n, float clip) {
  TESSERA_CHECK(!g.affine, kInternal, "block_scale: {} blocks have a scale and a min", dtype_name(g.type));
  float amax = 0.0f, max = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    if (std::fabs(w[j]) > amax) {
      amax = std::fabs(w[j]);
      max = w[j];
    }
  }
  const float d = g.signed_max ? clip * max / static_cast<float>(g.qmin) : clip * amax / static_cast<float>(g.qmax);
  return fp16_to_f32(f32_to_fp16(d));
}

float search_block_scale(const Grid& g, const float* w, int64_t n, const double* h, int64_t h_stride, int steps) {
  const float base = block_scale(g, w, n);
  if (base == 0.0f) return base;
  std::vector<double> d(static_cast<size_t>(n));
  float best_scale = base;
  double best = INFINITY;
  const int sides = g.signed_max ? 2 : 1;
  for (int side = 0; side < sides; ++side) {
    // The mirror maps the extreme value to qmax: scale * qmin / -qmax.
    const float own = side == 0 ? base : fp16_to_f32(f32_to_fp16(-base * static_cast<float>(g.qmin) / static_cast<float>(g.qmax)));
    for (int k = 0; k < steps; ++k) {
      const float sc = fp16_to_f32(f32_to_fp16(own * (1.0f - 0.05f * static_cast<float>(k))));
      for (int64_t j = 0; j < n; ++j) d[static_cast<size_t>(j)] = w[j] - static_cast<double>(sc) * level(g, w[j], sc);
      double e = 0.0;
      for (int64_t i = 0; i < n; ++i) {
        if (h == nullptr) {
          e += d[static_cast<size_t>(i)] * d[static_cast<size_t>(i)];
          continue;
        }
        double t = 0.0;
        for (int64_t j = 0; j < n; ++j) t += h[i * h_stride + j] * d[static_cast<size_t>(j)];
        e += d[static_cast<size_t>(i)] * t;
      }
      if (e < best) {
        best = e;
        best_scale = sc;
      }
    }
  }
  return best_scale;
}

namespace {

// Squared error of one affine block at (d, m), each value's weighted by
// imp (null: 1).
double affine_error(const Grid& g, const float* w, const float* imp, int n, float d, float m) {
  double e = 0.0;
  for (int j = 0; j < n; ++j) {
    const double r = w[j] - (static_cast<double>(d) * level(g, w[j], d, m) - m);
    e += (imp != nullptr ? imp[j] : 1.0) * r * r;
  }
  return e;
}

// One affine block's (d, m >= 0), unquantized: the range [min(0, lo), hi]
// over the grid's steps, then a few rounds of (weighted) least squares of w
// on the levels (w = d q - m), keeping the best.
void fit_affine(const Grid& g, const float* w, const float* imp, int n, float* d_out, float* m_out) {
  float lo = 0.0f, hi = 0.0f;
  for (int j = 0; j < n; ++j) {
    lo = std::min(lo, w[j]);
    hi = std::max(hi, w[j]);
  }
  float d = (hi - lo) / static_cast<float>(g.qmax), m = -lo;
  double best = affine_error(g, w, imp, n, d, m);
  *d_out = d;
  *m_out = m;
  for (int it = 0; it < 4 && d > 0.0f; ++it) {
    double s = 0, sq = 0, sq2 = 0, sw = 0, swq = 0;
    for (int j = 0; j < n; ++j) {
      const double q = level(g, w[j], d, m), k = imp != nullptr ? imp[j] : 1.0;
      s += k;
      sq += k * q;
      sq2 += k * q * q;
      sw += k * w[j];
      swq += k * w[j] * q;
    }
    const double det = s * sq2 - sq * sq;
    if (!(det > 0.0)) break;
    double nd = (s * swq - sw * sq) / det, c = (sw - nd * sq) / s;  // w = nd q + c
    if (c > 0.0) {  // a min must be >= 0: w = nd q
      c = 0.0;
      nd = sq2 > 0.0 ? swq / sq2 : 0.0;
    }
    if (!(nd > 0.0)) break;
    d = static_cast<float>(nd);
    m = static_cast<float>(-c);
    const double e = affine_error(g, w, imp, n, d, m);
    if (e < best) {
      best = e;
      *d_out = d;
      *m_out = m;
    }
  }
}

// Squared error of one block at scale d (levels: level(g, w, d)), each
// value's weighted by imp (null: 1); the least-squares d for those levels
// in *refit (0 when every level is 0).
double scale_error(const Grid& g, const float* w, const float* imp, int n, float d, float* refit) {
  double e = 0.0, swq = 0.0, sq2 = 0.0;
  for (int j = 0; j < n; ++j) {
    const int q = level(g, w[j], d);
    const double k = imp != nullptr ? imp[j] : 1.0, r = w[j] - static_cast<double>(d) * q;
    e += k * r * r;
    swq += k * w[j] * q;
    sq2 += k * q * q;
  }
  *refit = sq2 > 0.0 ? static_cast<float>(swq / sq2) : 0.0f;
  return e;
}

// One symmetric block's d, unquantized (super_params, Q3_K).
float fit_symmetric(const Grid& g, const float* w, const float* imp, int n) {
  float max = 0.0f;
  for (int j = 0; j < n; ++j) max = std::fabs(w[j]) > std::fabs(max) ? w[j] : max;
  if (max == 0.0f) return 0.0f;
  float best_d = max / static_cast<float>(g.qmin), refit = 0.0f;
  double best = scale_error(g, w, imp, n, best_d, &refit);
  for (const int target : {g.qmin, g.qmax}) {
    for (int t = -9; t <= 9; ++t) {
      float d = max / (static_cast<float>(target) * (1.0f + 0.1f * static_cast<float>(t)));
      for (int step = 0; step < 2 && d != 0.0f; ++step, d = refit) {  // the candidate, then its refit
        const double e = scale_error(g, w, imp, n, d, &refit);
        if (e < best) {
          best = e;
          best_d = d;
        }
      }
    }
  }
  return best_d;
}

// v / unit rounded to an integer in 0..top (unit == 0: 0).
int unsigned_units(float v, float unit, int top) {
  if (unit == 0.0f) return 0;
  const float q = std::nearbyint(v / unit);
  return static_cast<int>(std::clamp(q, 0.0f, static_cast<float>(top)));
}

int six_bits(float v, float unit) { return unsigned_units(v, unit, 63); }

// An affine super-block grid's scales and mins are integers in 0..top times
// the super-block's units.
int affine_units(const Grid& g) { return (1 << g.scale_bits) - 1; }

// v / unit rounded to an integer in -s..s-1 (unit == 0: 0).
int signed_units(float v, float unit, int s) {
  if (unit == 0.0f) return 0;
  const float q = std::nearbyint(v / unit);
  return static_cast<int>(std::clamp(q, static_cast<float>(-s), static_cast<float>(s - 1)));
}

// A symmetric super-block grid's scales are signed integers in -s..s-1
// times the super-block's unit.
int scale_units(const Grid& g) { return 1 << (g.scale_bits - 1); }

// The scale of largest magnitude, sign kept (the first of equal ones).
float largest(const float* scales, int nb) {
  float top = 0.0f;
  for (int b = 0; b < nb; ++b) top = std::fabs(scales[b]) > std::fabs(top) ? scales[b] : top;
  return top;
}

// The super-block's unit D of scales stored by super_params (Q3_K, Q6_K):
// the scale of largest magnitude is -s D.
float signed_unit(const float* scales, int nb, int s) {
  const float top = largest(scales, nb);
  return top == 0.0f ? 0.0f : top / static_cast<float>(-s);
}

}  // namespace

void super_params(const Grid& g, const float* w, float* scales, float* mins, const float* importance) {
  const int nb = g.super / g.block;
  if (!g.affine) {
    for (int b = 0; b < nb; ++b) {
      scales[b] = fit_symmetric(g, w + b * g.block, importance != nullptr ? importance + b * g.block : nullptr, g.block);
    }
    const int su = scale_units(g);
    const float top = largest(scales, nb);  // stored as -su units
    float D = fp16_to_f32(f32_to_fp16(top / static_cast<float>(-su)));
    D = D == 0.0f ? 0.0f : D;  // +0: all scales then store as +0, as pack_row reads them back
    for (int b = 0; b < nb; ++b) {
      scales[b] = D * static_cast<float>(scales[b] == top ? (D == 0.0f ? 0 : -su) : signed_units(scales[b], D, su));
    }
    return;
  }
  float dmax = 0.0f, mmax = 0.0f;
  for (int b = 0; b < nb; ++b) {
    fit_affine(g, w + b * g.block, importance != nullptr ? importance + b * g.block : nullptr, g.block, &scales[b],
               &mins[b]);
    dmax = std::max(dmax, scales[b]);
    mmax = std::max(mmax, mins[b]);
  }
  // The largest d (m) is stored as `top` units: D = fp16(dmax / top).
  const int top = affine_units(g);
  const float ft = static_cast<float>(top);
  const float D = fp16_to_f32(f32_to_fp16(dmax / ft)), Dm = fp16_to_f32(f32_to_fp16(mmax / ft));
  for (int b = 0; b < nb; ++b) {
    scales[b] = D * static_cast<float>(scales[b] == dmax ? (D == 0.0f ? 0 : top) : unsigned_units(scales[b], D, top));
    mins[b] = Dm * static_cast<float>(mins[b] == mmax ? (Dm == 0.0f ? 0 : top) : unsigned_units(mins[b], Dm, top));
  }
}

std::vector<float> hessian_diagonal(std::span<const double> h, int64_t n) {
  TESSERA_CHECK(static_cast<int64_t>(h.size()) == n * n, kInternal, "hessian_diagonal: H of {} for {} inputs", h.size(), n);
  std::vector<float> d(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) d[static_cast<size_t>(i)] = static_cast<float>(h[static_cast<size_t>(i * n + i)]);
  return d;
}

void rtn_row(const Grid& g, const float* w, int64_t n, std::span<const float> chosen, int8_t* levels, float* scales,
             float* mins, const float* importance) {
  if (g.super > 0) {
    TESSERA_CHECK(chosen.empty() && (mins != nullptr) == g.affine, kInternal,
                  "rtn_row: {} fits its own scales{}", dtype_name(g.type), g.affine ? " and needs mins" : "");
    const int64_t per = g.super / g.block;
    for (int64_t s = 0; s < n / g.super; ++s) {
      super_params(g, w + s * g.super, scales + s * per, g.affine ? mins + s * per : nullptr,
                   importance != nullptr ? importance + s * g.super : nullptr);
    }
    for (int64_t i = 0; i < n; ++i) {
      levels[i] = static_cast<int8_t>(level(g, w[i], scales[i / g.block], g.affine ? mins[i / g.block] : 0.0f));
    }
    return;
  }
  for (int64_t b = 0; b < n / g.block; ++b) {
    const float* x = w + b * g.block;
    const float d = chosen.empty() ? block_scale(g, x, g.block) : chosen[static_cast<size_t>(b)];
    scales[b] = d;
    for (int j = 0; j < g.block; ++j) levels[b * g.block + j] = static_cast<int8_t>(level(g, x[j], d));
  }
}

void dequant_row(const Grid& g, const int8_t* levels, const float* scales, int64_t n, float* out, const float* mins) {
  if (g.affine) {
    for (int64_t i = 0; i < n; ++i) out[i] = scales[i / g.block] * static_cast<float>(levels[i]) - mins[i / g.block];
    return;
  }
  for (int64_t i = 0; i < n; ++i) out[i] = scales[i / g.block] * static_cast<float>(levels[i]);
}

namespace {

// Q4_K / Q5_K: fp16 D and Dmin, then 12 bytes of 6-bit scales and mins
// (llama.cpp's get_scale_min_k4) of one super-block at dst.
void pack_k4_scales(const float* sc, const float* mn, uint8_t* dst) {
  // D and Dmin: the largest of each is 63 units (super_params), exactly.
  const float D = *std::max_element(sc, sc + 8) / 63.0f, Dm = *std::max_element(mn, mn + 8) / 63.0f;
  uint8_t is[8], im[8];
  for (int j = 0; j < 8; ++j) {
    is[j] = static_cast<uint8_t>(six_bits(sc[j], D));
    im[j] = static_cast<uint8_t>(six_bits(mn[j], Dm));
  }
  const fp16_t d16 = f32_to_fp16(D), m16 = f32_to_fp16(Dm);
  std::memcpy(dst, &d16, 2);
  std::memcpy(dst + 2, &m16, 2);
  uint8_t* k = dst + 4;
  for (int j = 0; j < 4; ++j) {
    k[j] = static_cast<uint8_t>(is[j] | ((is[j + 4] >> 4) << 6));
    k[j + 4] = static_cast<uint8_t>(im[j] | ((im[j + 4] >> 4) << 6));
    k[j + 8] = static_cast<uint8_t>((is[j + 4] & 0x0f) | ((im[j + 4] & 0x0f) << 4));
  }
}

// Q5_K's super-block (kernels/blocks.h BlockQ5_K): scales, then the fifth
// bits (value 64 c + i in bit 2c of qh[i], 64 c + 32 + i in bit 2c + 1),
// then the low nibbles as Q4_K's.
void pack_q5_k(const int8_t* q, const float* sc, const float* mn, uint8_t* dst) {
  pack_k4_scales(sc, mn, dst);
  uint8_t* qh = dst + 16;
  uint8_t* qs = dst + 48;
  std::memset(qh, 0, 32);
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      const int lo = q[64 * c + l], hi = q[64 * c + 32 + l];  // 0..31
      qs[32 * c + l] = static_cast<uint8_t>((lo & 15) | (hi & 15) << 4);
      qh[l] = static_cast<uint8_t>(qh[l] | (lo >> 4) << (2 * c) | (hi >> 4) << (2 * c + 1));
    }
  }
}

// Q6_K's super-block (kernels/blocks.h BlockQ6_K): per half h of 128 values,
// value 128 h + 32 k + l (l < 32) as u = q + 32: low nibble in ql[64 h + l
// + 32 (k & 1)] (low nibble for k < 2, high for k >= 2), top two bits in
// bits 2k of qh[32 h + l]; int8 scales; fp16 d last.
void pack_q6_k(const int8_t* q, const float* sc, uint8_t* dst) {
  const float D = signed_unit(sc, 16, 128);  // exact: the largest |scale| is -128 D (super_params)
  std::memset(dst, 0, 210);
  uint8_t *ql = dst, *qh = dst + 128;
  auto* scales = reinterpret_cast<int8_t*>(dst + 192);
  for (int j = 0; j < 16; ++j) scales[j] = static_cast<int8_t>(signed_units(sc[j], D, 128));
  for (int i = 0; i < 256; ++i) {
    const int u = q[i] + 32, h = i / 128, k = (i % 128) / 32, l = i % 32;  // u in 0..63
    uint8_t& lo = ql[64 * h + l + 32 * (k & 1)];
    lo = static_cast<uint8_t>(lo | (u & 15) << (k < 2 ? 0 : 4));
    qh[32 * h + l] = static_cast<uint8_t>(qh[32 * h + l] | (u >> 4) << (2 * k));
  }
  const fp16_t d16 = f32_to_fp16(D);
  std::memcpy(dst + 208, &d16, 2);
}

// Q2_K's super-block (kernels/blocks.h BlockQ2_K): per sub-block a byte of
// 4-bit scale (low) and min (high), the 2-bit levels as Q3_K's low bits,
// then fp16 d and dmin (the largest scale and min are 15 units: exact).
void pack_q2_k(const int8_t* q, const float* sc, const float* mn, uint8_t* dst) {
  const float D = *std::max_element(sc, sc + 16) / 15.0f, Dm = *std::max_element(mn, mn + 16) / 15.0f;
  std::memset(dst, 0, 84);
  uint8_t* qs = dst + 16;
  for (int j = 0; j < 16; ++j) {
    dst[j] = static_cast<uint8_t>(unsigned_units(sc[j], D, 15) | unsigned_units(mn[j], Dm, 15) << 4);
  }
  for (int i = 0; i < 256; ++i) {
    const int h = i / 128, j = (i % 128) / 32, l = i % 32;
    qs[32 * h + l] = static_cast<uint8_t>(qs[32 * h + l] | q[i] << (2 * j));
  }
  const fp16_t d16 = f32_to_fp16(D), m16 = f32_to_fp16(Dm);
  std::memcpy(dst + 80, &d16, 2);
  std::memcpy(dst + 82, &m16, 2);
}

}  // namespace

void pack_row(const Grid& g, const int8_t* levels, const float* scales, int64_t n, uint8_t* dst, const float* mins) {
  if (g.type == DType::kQ2_K) {
    for (int64_t s = 0; s < n / 256; ++s) pack_q2_k(levels + s * 256, scales + s * 16, mins + s * 16, dst + s * 84);
    return;
  }
  if (g.type == DType::kQ5_K) {
    for (int64_t s = 0; s < n / 256; ++s) pack_q5_k(levels + s * 256, scales + s * 8, mins + s * 8, dst + s * 176);
    return;
  }
  if (g.type == DType::kQ6_K) {
    for (int64_t s = 0; s < n / 256; ++s) pack_q6_k(levels + s * 256, scales + s * 16, dst + s * 210);
    return;
  }
  if (g.type == DType::kQ4_K) {
    for (int64_t s = 0; s < n / 256; ++s) {
      const int8_t* q = levels + s * 256;
      pack_k4_scales(scales + s * 8, mins + s * 8, dst);
      uint8_t* qs = dst + 16;
      for (int c = 0; c < 4; ++c) {
        for (int l = 0; l < 32; ++l) qs[32 * c + l] = static_cast<uint8_t>(q[64 * c + l] | (q[64 * c + 32 + l] << 4));
      }
      dst += 144;
    }
    return;
  }
  if (g.type == DType::kQ3_K) {
    for (int64_t s = 0; s < n / 256; ++s, dst += 110) {
      const float* sc = scales + s * 16;
      const int8_t* q = levels + s * 256;
      const float D = signed_unit(sc, 16, 32);  // exact: the largest |scale| is -32 D (super_params)
      std::memset(dst, 0, 110);
      uint8_t *hmask = dst, *qs = dst + 32, *k = dst + 96;  // layout: kernels/blocks.h BlockQ3_K
      for (int j = 0; j < 16; ++j) {
        const int u = signed_units(sc[j], D, 32) + 32;
        k[j % 8] = static_cast<uint8_t>(k[j % 8] | (u & 15) << (j < 8 ? 0 : 4));
        k[8 + j % 4] = static_cast<uint8_t>(k[8 + j % 4] | (u >> 4) << (2 * (j / 4)));
      }
      for (int i = 0; i < 256; ++i) {
        const int u = q[i] + 4, h = i / 128, j = (i % 128) / 32, l = i % 32;  // u in 0..7
        qs[32 * h + l] = static_cast<uint8_t>(qs[32 * h + l] | (u & 3) << (2 * j));
        if (u > 3) hmask[l] = static_cast<uint8_t>(hmask[l] | 1 << (4 * h + j));
      }
      const fp16_t d16 = f32_to_fp16(D);
      std::memcpy(dst + 108, &d16, 2);
    }
    return;
  }
  for (int64_t b = 0; b < n / g.block; ++b) {
    const fp16_t d = f32_to_fp16(scales[b]);
    const int8_t* q = levels + b * g.block;
    std::memcpy(dst, &d, 2);
    if (g.type == DType::kQ4_0) {
      for (int j = 0; j < 16; ++j) dst[2 + j] = static_cast<uint8_t>((q[j] + 8) | ((q[j + 16] + 8) << 4));
      dst += 18;
    } else {
      std::memcpy(dst + 2, q, 32);
      dst += 34;
    }
  }
}

}  // namespace tessera::quant
