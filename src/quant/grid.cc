#include "quant/grid.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/fp16.h"

namespace tessera::quant {

bool is_grid_type(DType type) { return type == DType::kQ4_0 || type == DType::kQ8_0; }

Grid make_grid(DType type, int bits) {
  Grid g;
  g.type = type;
  switch (type) {
    case DType::kQ4_0:
      TESSERA_CHECK(bits == 0 || bits == 4 || bits == 3, kInvalidArgument,
                    "Q4_0 holds 4-bit or 3-bit values, not {}-bit", bits);
      g.bits = bits == 3 ? 3 : 4;
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
    default:
      fail(ErrorCode::kInvalidArgument, "tessera quantize cannot write {} blocks yet (it writes Q4_0, Q8_0, F16, BF16, F32)",
           dtype_name(type));
  }
}

float block_scale(const Grid& g, const float* w, int64_t n, float clip) {
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

void rtn_row(const Grid& g, const float* w, int64_t n, std::span<const float> chosen, int8_t* levels, float* scales) {
  for (int64_t b = 0; b < n / g.block; ++b) {
    const float* x = w + b * g.block;
    const float d = chosen.empty() ? block_scale(g, x, g.block) : chosen[static_cast<size_t>(b)];
    scales[b] = d;
    for (int j = 0; j < g.block; ++j) levels[b * g.block + j] = static_cast<int8_t>(level(g, x[j], d));
  }
}

void dequant_row(const Grid& g, const int8_t* levels, const float* scales, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = scales[i / g.block] * static_cast<float>(levels[i]);
}

void pack_row(const Grid& g, const int8_t* levels, const float* scales, int64_t n, uint8_t* dst) {
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
