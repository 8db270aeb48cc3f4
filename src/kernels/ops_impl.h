// The vector layer ops, written once over the float traits F (Avx2F,
// Avx512F) and instantiated by ops_avx2.cc / ops_avx512.cc. Internal linkage
// only (ODR rule, docs/KERNELS.md). The including file turns off
// floating-point contraction, so every mul and add rounds as written and
// rope / add_inplace match the scalar reference exactly.
#pragma once

#include <cstdint>

#include "kernels/ops_kernels.h"

namespace tessera::kernels {
namespace {

// exp(x) for float vectors: n = round(x / ln 2), r = x - n ln 2 (ln 2 split
// in two so r is exact), e^r by a degree-7 polynomial (Cephes'
// coefficients), times 2^n built in the exponent bits. Within about 2 ulp
// of std::exp on [-87.33, 88.37]; +inf above, 0 below (where std::exp gives
// a subnormal, less than 1.2e-38 away).
template <class F>
static inline typename F::V vexp(typename F::V x_in) {
  using V = typename F::V;
  const V lo = F::set1(-87.3365478515625f), hi = F::set1(88.3762626647949f);
  const V x = F::min(F::max(x_in, lo), hi);
  const V n = F::round(F::mul(x, F::set1(1.44269504088896341f)));
  V r = F::fnmadd(n, F::set1(0.693359375f), x);
  r = F::fnmadd(n, F::set1(-2.12194440e-4f), r);
  V p = F::set1(1.9875691500e-4f);
  p = F::fmadd(p, r, F::set1(1.3981999507e-3f));
  p = F::fmadd(p, r, F::set1(8.3334519073e-3f));
  p = F::fmadd(p, r, F::set1(4.1665795894e-2f));
  p = F::fmadd(p, r, F::set1(1.6666665459e-1f));
  p = F::fmadd(p, r, F::set1(5.0000001201e-1f));
  p = F::fmadd(p, F::mul(r, r), F::add(r, F::set1(1.0f)));
  const V e = F::mul(p, F::pow2(n));
  return F::blend(F::cmp_gt(lo, x_in), F::zero(), F::blend(F::cmp_gt(x_in, hi), F::set1(__builtin_inff()), e));
}

// Applies fn(vector, valid lanes) over [0, n) in whole vectors and one
// masked tail.
template <class F, class Fn>
static inline void for_each_vector(int64_t n, Fn fn) {
  int64_t i = 0;
  for (; i + F::kW <= n; i += F::kW) fn(i, F::kW);
  if (i < n) fn(i, static_cast<int>(n - i));
}

template <class F>
static inline typename F::V load_n(const float* p, int n) {
  return n == F::kW ? F::load(p) : F::load_tail(p, n);
}
template <class F>
static inline void store_n(float* p, typename F::V v, int n) {
  if (n == F::kW) {
    F::store(p, v);
  } else {
    F::store_tail(p, v, n);
  }
}

template <class F>
static void rmsnorm_v(const float* x, const float* weight, float* y, int64_t n, float eps) {
  const double ss = F::sum_squares(x, n);
  const float scale = static_cast<float>(1.0 / __builtin_sqrt(ss / static_cast<double>(n) + eps));
  const typename F::V vs = F::set1(scale);
  for_each_vector<F>(n, [&](int64_t i, int m) {
    store_n<F>(y + i, F::mul(F::mul(load_n<F>(x + i, m), vs), load_n<F>(weight + i, m)), m);
  });
}

template <class F>
static void rope_apply_v(float* x, int64_t n_heads, int64_t head_dim, int64_t half, bool neox, const float* c,
                         const float* s) {
  if (neox) {
    for (int64_t h = 0; h < n_heads; ++h) {
      float* a = x + h * head_dim;
      float* b = a + half;
      for_each_vector<F>(half, [&](int64_t i, int m) {
        const typename F::V xa = load_n<F>(a + i, m), xb = load_n<F>(b + i, m);
        const typename F::V vc = load_n<F>(c + i, m), vs = load_n<F>(s + i, m);
        store_n<F>(a + i, F::sub(F::mul(xa, vc), F::mul(xb, vs)), m);
        store_n<F>(b + i, F::add(F::mul(xa, vs), F::mul(xb, vc)), m);
      });
    }
    return;
  }
  // Pairs (2i, 2i+1): y = x * [c_i, c_i] + swap(x) * [-s_i, s_i].
  float cd[512], sd[512];
  for (int64_t i = 0; i < half; ++i) {
    cd[2 * i] = cd[2 * i + 1] = c[i];
    sd[2 * i] = -s[i];
    sd[2 * i + 1] = s[i];
  }
  for (int64_t h = 0; h < n_heads; ++h) {
    float* v = x + h * head_dim;
    for_each_vector<F>(2 * half, [&](int64_t i, int m) {
      const typename F::V xv = load_n<F>(v + i, m);
      store_n<F>(v + i, F::add(F::mul(xv, load_n<F>(cd + i, m)), F::mul(F::swap_pairs(xv), load_n<F>(sd + i, m))), m);
    });
  }
}

template <class F>
static void silu_mul_v(float* gate, const float* up, int64_t n) {
  const typename F::V one = F::set1(1.0f), zero = F::zero();
  for_each_vector<F>(n, [&](int64_t i, int m) {
    const typename F::V g = load_n<F>(gate + i, m);
    const typename F::V e = vexp<F>(F::sub(zero, g));
    store_n<F>(gate + i, F::mul(F::div(g, F::add(one, e)), load_n<F>(up + i, m)), m);
  });
}

template <class F>
static void gelu_tanh_mul_v(float* gate, const float* up, int64_t n) {
  using V = typename F::V;
  const V one = F::set1(1.0f), minus2 = F::set1(-2.0f), c = F::set1(kGeluSqrt2OverPi), a = F::set1(kGeluCubic);
  for_each_vector<F>(n, [&](int64_t i, int m) {
    const V g = load_n<F>(gate + i, m);
    // The reference's order: -2 * (c * (g + a * g * g * g)).
    const V z2 = F::mul(minus2, F::mul(c, F::add(g, F::mul(F::mul(F::mul(a, g), g), g))));
    store_n<F>(gate + i, F::mul(F::div(g, F::add(one, vexp<F>(z2))), load_n<F>(up + i, m)), m);
  });
}

template <class F>
static void add_inplace_v(float* y, const float* x, int64_t n) {
  for_each_vector<F>(n, [&](int64_t i, int m) {
    store_n<F>(y + i, F::add(load_n<F>(y + i, m), load_n<F>(x + i, m)), m);
  });
}

template <class F>
static void softmax_v(float* x, int64_t n) {
  typename F::V vm = F::set1(-__builtin_inff());
  // Masked tail lanes read as 0, which must not win the max: use -inf there.
  for_each_vector<F>(n, [&](int64_t i, int m) {
    vm = F::max(m == F::kW ? F::load(x + i) : F::load_tail_fill(x + i, m, -__builtin_inff()), vm);
  });
  const typename F::V mx = F::set1(F::hmax(vm));
  double sum = 0.0;
  for_each_vector<F>(n, [&](int64_t i, int m) {
    const typename F::V e = vexp<F>(F::sub(load_n<F>(x + i, m), mx));
    store_n<F>(x + i, e, m);
    sum += F::hsum_tail(e, m);
  });
  const typename F::V inv = F::set1(static_cast<float>(1.0 / sum));
  for_each_vector<F>(n, [&](int64_t i, int m) { store_n<F>(x + i, F::mul(load_n<F>(x + i, m), inv), m); });
}

// Per lane: the largest value seen and its first index (strict > keeps the
// first; NaN compares false). Then the lane with the largest value, smallest
// index among ties.
template <class F>
static int64_t argmax_v(const float* x, int64_t n) {
  using V = typename F::V;
  if (n >= (int64_t{1} << 24)) {  // float lane indices would no longer be exact
    int64_t where = 0;
    float top = -__builtin_inff();
    for (int64_t i = 0; i < n; ++i) {
      if (x[i] > top) {
        top = x[i];
        where = i;
      }
    }
    return where;
  }
  V best = F::set1(-__builtin_inff()), idx = F::zero(), cur = F::iota();
  const V step = F::set1(static_cast<float>(F::kW));
  int64_t i = 0;
  for (; i + F::kW <= n; i += F::kW) {
    const V v = F::load(x + i);
    const auto gt = F::cmp_gt(v, best);
    best = F::blend(gt, v, best);
    idx = F::blend(gt, cur, idx);
    cur = F::add(cur, step);
  }
  float bv[16], bi[16];
  F::store(bv, best);
  F::store(bi, idx);
  float top = -__builtin_inff();
  int64_t where = 0;
  for (int l = 0; l < F::kW; ++l) {
    const int64_t li = static_cast<int64_t>(bi[l]);
    if (bv[l] > top || (bv[l] == top && bv[l] > -__builtin_inff() && li < where)) {
      top = bv[l];
      where = li;
    }
  }
  for (; i < n; ++i) {
    if (x[i] > top) {
      top = x[i];
      where = i;
    }
  }
  return where;
}

// The reference's order: min(g, limit), clamp(up), g / (1 + exp(-alpha g)) * (u + 1).
template <class F>
static void swiglu_oai_mul_v(float* gate, const float* up, int64_t n) {
  using V = typename F::V;
  const V one = F::set1(1.0f), lim = F::set1(kSwigluOaiLimit), nlim = F::set1(-kSwigluOaiLimit);
  const V nalpha = F::set1(-kSwigluOaiAlpha);
  for_each_vector<F>(n, [&](int64_t i, int m) {
    const V g = F::min(load_n<F>(gate + i, m), lim);
    const V u = F::min(F::max(load_n<F>(up + i, m), nlim), lim);
    const V e = vexp<F>(F::mul(nalpha, g));
    store_n<F>(gate + i, F::mul(F::div(g, F::add(one, e)), F::add(u, one)), m);
  });
}

template <class F>
struct OpsSet {
  static constexpr OpsKernels table = {rmsnorm_v<F>, rope_apply_v<F>, silu_mul_v<F>, gelu_tanh_mul_v<F>, swiglu_oai_mul_v<F>,
                                       add_inplace_v<F>, softmax_v<F>, argmax_v<F>};
};

}  // namespace
}  // namespace tessera::kernels
