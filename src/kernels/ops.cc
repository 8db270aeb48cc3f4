// Scalar reference versions of the layer ops, and the dispatch to the vector
// versions of ops_<isa>.cc.
#include "kernels/ops.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/ops_kernels.h"

namespace tessera::kernels {
namespace {

const OpsKernels* vector_ops(Isa isa) {
  switch (isa) {
    case Isa::kAvx2: return &ops_kernels_avx2();
    case Isa::kAvx512: return &ops_kernels_avx512();
    case Isa::kScalar: break;
  }
  return nullptr;
}

// The vector rope() takes its angles from the stack, up to this many.
constexpr int64_t kRopeChunk = 256;

}  // namespace

void rmsnorm(const float* x, const float* weight, float* y, int64_t n, float eps, Isa isa) {
  if (const OpsKernels* k = vector_ops(isa)) return k->rmsnorm(x, weight, y, n, eps);
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float scale = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale * weight[i];
}

namespace {
void rope_angle(int64_t pos, const RopeParams& p, int64_t i, float* c, float* s) {
  const double inv_freq = std::pow(static_cast<double>(p.freq_base),
                                   -2.0 * static_cast<double>(i) / static_cast<double>(p.n_rot));
  const double factor = p.freq_factors != nullptr ? static_cast<double>(p.freq_factors[i]) : 1.0;
  double theta = static_cast<double>(pos) * p.freq_scale * inv_freq / factor;
  double mscale = p.attn_factor;
  if (p.ext_factor != 0.0f) {
    const double extrap = static_cast<double>(pos) * inv_freq / factor;
    const double y = (static_cast<double>(i) - p.yarn_low) / std::max(0.001, static_cast<double>(p.yarn_high) - p.yarn_low);
    const double mix = (1.0 - std::min(1.0, std::max(0.0, y))) * p.ext_factor;
    theta = theta * (1.0 - mix) + extrap * mix;
    mscale *= 1.0 + 0.1 * std::log(1.0 / static_cast<double>(p.freq_scale));
  }
  *c = static_cast<float>(std::cos(theta) * mscale);
  *s = static_cast<float>(std::sin(theta) * mscale);
}
}  // namespace

void yarn_corr_dims(int64_t n_rot, int64_t n_ctx_orig, float freq_base, float beta_fast, float beta_slow,
                    float out[2]) {
  // The pair i whose wavelength 2 pi base^(2i/n_rot) fits n_ctx_orig / beta times.
  auto pair_for = [&](double beta) {
    return static_cast<double>(n_rot) * std::log(static_cast<double>(n_ctx_orig) / (beta * 2.0 * M_PI)) /
           (2.0 * std::log(static_cast<double>(freq_base)));
  };
  out[0] = static_cast<float>(std::max(0.0, std::floor(pair_for(beta_fast))));
  out[1] = static_cast<float>(std::min(static_cast<double>(n_rot - 1), std::ceil(pair_for(beta_slow))));
}

void rope_angles(int64_t pos, const RopeParams& p, float* cos_out, float* sin_out) {
  for (int64_t i = 0; i < p.n_rot / 2; ++i) rope_angle(pos, p, i, &cos_out[i], &sin_out[i]);
}

void rope_rotate(float* x, int64_t n_heads, int64_t head_dim, const RopeParams& p, const float* cos,
                 const float* sin, Isa isa) {
  const int64_t half = p.n_rot / 2;
  if (const OpsKernels* k = vector_ops(isa); k != nullptr && half <= kRopeChunk) {
    return k->rope_apply(x, n_heads, head_dim, half, p.neox, cos, sin);
  }
  for (int64_t i = 0; i < half; ++i) {
    const float c = cos[i], s = sin[i];
    for (int64_t h = 0; h < n_heads; ++h) {
      float* v = x + h * head_dim;
      const int64_t a = p.neox ? i : 2 * i;
      const int64_t b = p.neox ? i + half : 2 * i + 1;
      const float x0 = v[a], x1 = v[b];
      v[a] = x0 * c - x1 * s;
      v[b] = x0 * s + x1 * c;
    }
  }
}

void rope(float* x, int64_t n_heads, int64_t head_dim, int64_t pos, const RopeParams& p, Isa isa) {
  const int64_t half = p.n_rot / 2;
  if (half <= kRopeChunk) {
    float c[kRopeChunk], s[kRopeChunk];
    rope_angles(pos, p, c, s);
    return rope_rotate(x, n_heads, head_dim, p, c, s, isa);
  }
  std::vector<float> c(static_cast<size_t>(half)), s(static_cast<size_t>(half));
  rope_angles(pos, p, c.data(), s.data());
  rope_rotate(x, n_heads, head_dim, p, c.data(), s.data(), isa);
}

void silu_mul(float* gate, const float* up, int64_t n, Isa isa) {
  if (const OpsKernels* k = vector_ops(isa)) return k->silu_mul(gate, up, n);
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    gate[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void gelu_tanh_mul(float* gate, const float* up, int64_t n, Isa isa) {
  if (const OpsKernels* k = vector_ops(isa)) return k->gelu_tanh_mul(gate, up, n);
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    const float z2 = -2.0f * (kGeluSqrt2OverPi * (g + kGeluCubic * g * g * g));
    gate[i] = g / (1.0f + std::exp(z2)) * up[i];
  }
}

void swiglu_oai_mul(float* gate, const float* up, int64_t n, Isa isa) {
  if (const OpsKernels* k = vector_ops(isa)) return k->swiglu_oai_mul(gate, up, n);
  for (int64_t i = 0; i < n; ++i) {
    // Written as minps / maxps compute (a NaN first operand gives the second).
    const float g = gate[i] < kSwigluOaiLimit ? gate[i] : kSwigluOaiLimit;
    const float lo = up[i] > -kSwigluOaiLimit ? up[i] : -kSwigluOaiLimit;
    const float u = lo < kSwigluOaiLimit ? lo : kSwigluOaiLimit;
    gate[i] = g / (1.0f + std::exp(-kSwigluOaiAlpha * g)) * (u + 1.0f);
  }
}

void add_inplace(float* y, const float* x, int64_t n, Isa isa) {
  if (const OpsKernels* k = vector_ops(isa)) return k->add_inplace(y, x, n);
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void softmax(float* x, int64_t n, Isa isa) {
  if (const OpsKernels* k = vector_ops(isa)) return k->softmax(x, n);
  float m = -INFINITY;
  for (int64_t i = 0; i < n; ++i) m = std::fmax(m, x[i]);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - m);
    sum += x[i];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

int64_t argmax(const float* x, int64_t n, Isa isa) {
  if (const OpsKernels* k = vector_ops(isa)) return k->argmax(x, n);
  int64_t best = 0;
  float v = -INFINITY;
  for (int64_t i = 0; i < n; ++i) {
    if (x[i] > v) {
      v = x[i];
      best = i;
    }
  }
  return best;
}

}  // namespace tessera::kernels
