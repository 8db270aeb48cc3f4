// Scalar reference versions of the layer ops. Vector versions live in
// ops_<isa>.cc and are selected by `isa`.
#include "kernels/ops.h"

#include <cmath>

namespace tessera::kernels {

void rmsnorm(const float* x, const float* weight, float* y, int64_t n, float eps, Isa) {
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float scale = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale * weight[i];
}

void rope(float* x, int64_t n_heads, int64_t head_dim, int64_t pos, const RopeParams& p, Isa) {
  const int64_t half = p.n_rot / 2;
  for (int64_t i = 0; i < half; ++i) {
    const double theta = static_cast<double>(pos) * p.freq_scale *
                         std::pow(static_cast<double>(p.freq_base), -2.0 * static_cast<double>(i) / static_cast<double>(p.n_rot));
    const float c = static_cast<float>(std::cos(theta));
    const float s = static_cast<float>(std::sin(theta));
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

void silu_mul(float* gate, const float* up, int64_t n, Isa) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    gate[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void add_inplace(float* y, const float* x, int64_t n, Isa) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

}  // namespace tessera::kernels
