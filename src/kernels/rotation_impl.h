// The vector rotate_row of kernels/rotation.h, written once over the float
// vector traits (simd_avx2.h / simd_avx512.h) and a per-ISA `Swap` that
// exchanges lanes h apart inside a vector (h < F::kW). Include only from a
// rotation_<isa>.cc file.
#pragma once

#include <cstdint>

#include "kernels/rotation.h"

namespace tessera::kernels {
namespace {

// The scalar reference's butterflies, stage by stage (h = 1, 2, 4, ...):
// stages with h < W inside each vector (lane j with bit h clear takes x_j +
// x_{j+h}, its partner x_j - x_{j+h}: the same two operations), the others
// between vectors.
template <class F, class Swap>
inline void fwht_run(float* x, int64_t p) {
  using V = typename F::V;
  constexpr int W = F::kW;
  for (int64_t o = 0; o < p; o += W) {
    V v = F::load(x + o);
    for (int h = 1; h < W; h *= 2) {
      const V s = Swap::swap(v, h);
      v = Swap::blend_low(h, F::add(v, s), F::sub(s, v));
    }
    F::store(x + o, v);
  }
  for (int64_t h = W; h < p; h *= 2) {
    for (int64_t i = 0; i < p; i += 2 * h) {
      for (int64_t j = i; j < i + h; j += W) {
        const V a = F::load(x + j), b = F::load(x + j + h);
        F::store(x + j, F::add(a, b));
        F::store(x + j + h, F::sub(a, b));
      }
    }
  }
}

template <class F, class Swap>
void rotate_row_vec(const RotationArgs& a, float* x) {
  using V = typename F::V;
  constexpr int W = F::kW;
  // Called with p a multiple of W (rotation.cc runs the reference otherwise).
  for (int64_t i = 0; i < a.n; i += W) F::store(x + i, F::mul(F::load(x + i), F::load(a.signs + i)));
  for (int64_t r = 0; r < a.n; r += a.p) fwht_run<F, Swap>(x + r, a.p);
  const V norm = F::set1(a.norm);
  for (int64_t i = 0; i < a.n; i += W) F::store(x + i, F::mul(F::load(x + i), norm));
  if (a.mix == nullptr) return;
  // y[row a][b] = sum over a' in order of mix[a][a'] * x[a'][b].
  for (int64_t r = 0; r < a.m; ++r) {
    const float* q = a.mix + r * a.m;
    for (int64_t b = 0; b < a.p; b += W) {
      V acc = F::mul(F::set1(q[0]), F::load(x + b));
      for (int64_t c = 1; c < a.m; ++c) acc = F::add(acc, F::mul(F::set1(q[c]), F::load(x + c * a.p + b)));
      F::store(a.scratch + r * a.p + b, acc);
    }
  }
  for (int64_t i = 0; i < a.n; i += W) F::store(x + i, F::load(a.scratch + i));
}

}  // namespace
}  // namespace tessera::kernels
