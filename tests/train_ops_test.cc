// The training ops' backward passes (train/ops.h) against finite
// differences, in float64: for an op y = f(inputs) and a random r, the
// gradient of L = sum(r ∘ y) with respect to every input element, as the
// backward computes it from dy = r, equals (L(x + h) - L(x - h)) / 2h
// within 1e-6 of the gradients' scale (central differences at h = 1e-5
// err by ~h² and ~1e-16 / h). Shapes are small and odd (GQA, rotary dims
// short of the head), so a transposed index or a lost term shows.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "train/ops.h"

namespace tessera::train {
namespace {

using Vec = std::vector<double>;

Vec random_vec(size_t n, std::mt19937& rng, double scale = 1.0) {
  std::normal_distribution<double> g(0.0, scale);
  Vec v(n);
  for (double& x : v) x = g(rng);
  return v;
}

// Checks `analytic` (the gradient of loss() with respect to *x) by central
// differences over every element of *x.
void expect_gradient(const std::string& what, Vec* x, const Vec& analytic, const std::function<double()>& loss) {
  ASSERT_EQ(x->size(), analytic.size()) << what;
  constexpr double h = 1e-5;
  double scale = 1e-3;
  for (double g : analytic) scale = std::max(scale, std::fabs(g));
  for (size_t i = 0; i < x->size(); ++i) {
    const double keep = (*x)[i];
    (*x)[i] = keep + h;
    const double up = loss();
    (*x)[i] = keep - h;
    const double down = loss();
    (*x)[i] = keep;
    ASSERT_NEAR(analytic[i], (up - down) / (2 * h), 1e-6 * scale) << what << " element " << i;
  }
}

double weighted(const Vec& r, const Vec& y) {
  double s = 0;
  for (size_t i = 0; i < y.size(); ++i) s += r[i] * y[i];
  return s;
}

TEST(TrainOps, LinearGradients) {
  std::mt19937 rng(1);
  const int64_t n = 3, in = 5, out = 4;
  Vec x = random_vec(n * in, rng), w = random_vec(out * in, rng);
  const Vec r = random_vec(n * out, rng);
  auto loss = [&] {
    Vec y(n * out);
    linear(x.data(), w.data(), n, in, out, y.data());
    return weighted(r, y);
  };
  Vec dx(x.size(), 0.5), dw(w.size(), -0.25);  // backward adds: start from non-zero
  linear_backward(x.data(), w.data(), r.data(), n, in, out, dx.data(), dw.data());
  for (double& g : dx) g -= 0.5;
  for (double& g : dw) g += 0.25;
  expect_gradient("linear dx", &x, dx, loss);
  expect_gradient("linear dw", &w, dw, loss);
}

TEST(TrainOps, RmsNormGradients) {
  std::mt19937 rng(2);
  const int64_t n = 3, d = 7;
  Vec x = random_vec(n * d, rng), g = random_vec(d, rng);
  const Vec r = random_vec(n * d, rng);
  auto loss = [&] {
    Vec y(n * d), inv(n);
    rmsnorm(x.data(), g.data(), n, d, 1e-5, y.data(), inv.data());
    return weighted(r, y);
  };
  Vec y(n * d), inv(n), dx(x.size()), dg(g.size());
  rmsnorm(x.data(), g.data(), n, d, 1e-5, y.data(), inv.data());
  rmsnorm_backward(x.data(), g.data(), inv.data(), r.data(), n, d, dx.data(), dg.data());
  expect_gradient("rmsnorm dx", &x, dx, loss);
  expect_gradient("rmsnorm dg", &g, dg, loss);
}

TEST(TrainOps, RopeGradientIsTheInverseRotation) {
  std::mt19937 rng(3);
  const int64_t n = 4, heads = 3, hd = 10, n_rot = 6;
  for (bool neox : {false, true}) {
    kernels::RopeParams p;
    p.n_rot = n_rot;
    p.neox = neox;
    Vec cos(n * n_rot / 2), sin(cos.size());
    for (int64_t t = 0; t < n; ++t) {
      std::vector<float> c(n_rot / 2), s(n_rot / 2);
      kernels::rope_angles(t + 5, p, c.data(), s.data());
      for (int64_t i = 0; i < n_rot / 2; ++i) {
        cos[t * n_rot / 2 + i] = c[i];
        sin[t * n_rot / 2 + i] = s[i];
      }
    }
    Vec x = random_vec(n * heads * hd, rng);
    const Vec r = random_vec(x.size(), rng);
    auto loss = [&] {
      Vec y = x;
      rope(y.data(), n, heads, hd, n_rot, cos.data(), sin.data(), neox, false);
      return weighted(r, y);
    };
    Vec dx = r;
    rope(dx.data(), n, heads, hd, n_rot, cos.data(), sin.data(), neox, true);
    expect_gradient(neox ? "rope neox" : "rope", &x, dx, loss);
    // And the rotation is the engine's: rope() of kernels on float rows.
    std::vector<float> xf(x.begin(), x.end());
    Vec y = x;
    rope(y.data(), n, heads, hd, n_rot, cos.data(), sin.data(), neox, false);
    for (int64_t t = 0; t < n; ++t) kernels::rope(xf.data() + t * heads * hd, heads, hd, t + 5, p, Isa::kScalar);
    for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(xf[i], y[i], 1e-5) << (neox ? "neox " : "") << i;
  }
}

TEST(TrainOps, SwigluGradients) {
  std::mt19937 rng(4);
  const int64_t n = 11;
  Vec g = random_vec(n, rng, 2.0), u = random_vec(n, rng);
  const Vec r = random_vec(n, rng);
  auto loss = [&] {
    Vec h(n);
    swiglu(g.data(), u.data(), n, h.data());
    return weighted(r, h);
  };
  Vec dg(n), du(n);
  swiglu_backward(g.data(), u.data(), r.data(), n, dg.data(), du.data());
  expect_gradient("swiglu dg", &g, dg, loss);
  expect_gradient("swiglu du", &u, du, loss);
}

TEST(TrainOps, CausalAttentionGradients) {
  std::mt19937 rng(5);
  const int64_t n = 5, heads = 4, kv_heads = 2, hd = 3;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  Vec q = random_vec(n * heads * hd, rng), k = random_vec(n * kv_heads * hd, rng), v = random_vec(k.size(), rng);
  const Vec r = random_vec(q.size(), rng);
  auto loss = [&] {
    Vec o(q.size()), lse(heads * n);
    attention(q.data(), k.data(), v.data(), n, heads, kv_heads, hd, scale, o.data(), lse.data());
    return weighted(r, o);
  };
  Vec o(q.size()), lse(heads * n), dq(q.size()), dk(k.size()), dv(v.size());
  attention(q.data(), k.data(), v.data(), n, heads, kv_heads, hd, scale, o.data(), lse.data());
  // Causal: the first token sees only itself, so its output is its value.
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t e = 0; e < hd; ++e) EXPECT_NEAR(o[h * hd + e], v[(h / 2) * hd + e], 1e-12);
  }
  attention_backward(q.data(), k.data(), v.data(), o.data(), lse.data(), r.data(), n, heads, kv_heads, hd, scale,
                     dq.data(), dk.data(), dv.data());
  expect_gradient("attention dq", &q, dq, loss);
  expect_gradient("attention dk", &k, dk, loss);
  expect_gradient("attention dv", &v, dv, loss);
}

TEST(TrainOps, CrossEntropyGradientsAndValue) {
  std::mt19937 rng(6);
  const int64_t n = 4, vocab = 9;
  Vec z = random_vec(n * vocab, rng, 3.0);
  const std::vector<int32_t> targets = {3, -1, 0, 8};  // the second row has no target
  auto loss = [&] { return cross_entropy(z.data(), n, vocab, targets.data(), static_cast<double*>(nullptr)); };
  Vec dz(z.size(), 7.0);  // written, not added
  const double l = cross_entropy(z.data(), n, vocab, targets.data(), dz.data());
  // The value, from its definition: mean of log(sum exp) - z[target].
  double want = 0;
  for (int64_t t : {0, 2, 3}) {
    double s = 0;
    for (int64_t c = 0; c < vocab; ++c) s += std::exp(z[t * vocab + c]);
    want += std::log(s) - z[t * vocab + targets[static_cast<size_t>(t)]];
  }
  EXPECT_NEAR(l, want / 3, 1e-12);
  for (int64_t c = 0; c < vocab; ++c) EXPECT_EQ(dz[vocab + c], 0.0) << "a row without a target has no gradient";
  expect_gradient("cross entropy", &z, dz, loss);
  const std::vector<int32_t> none = {-1, -1, -1, -1};
  EXPECT_EQ(cross_entropy(z.data(), n, vocab, none.data(), dz.data()), 0.0);
}

// AdamW's first step moves every parameter by lr against its gradient's
// sign (m̂ = g, v̂ = g²), then decays it by lr * weight_decay * p; the
// second step with the same gradient moves it by lr again.
TEST(TrainOps, AdamWFirstStepsMoveByTheLearningRate) {
  std::vector<float> p = {1.0f, -2.0f, 0.5f}, g = {0.3f, -4.0f, 1e-3f}, m(3, 0.0f), v(3, 0.0f);
  const AdamW opt{.lr = 0.01f, .weight_decay = 0.1f};
  const std::vector<float> p0 = p;
  adamw_step(p.data(), g.data(), m.data(), v.data(), 3, opt, 1);
  for (int i = 0; i < 3; ++i) {
    const double step = (g[i] > 0 ? 1.0 : -1.0) * (std::fabs(g[i]) / (std::fabs(g[i]) + 1e-8));
    EXPECT_NEAR(p[i], p0[i] - 0.01 * (step + 0.1 * p0[i]), 1e-6) << i;
  }
  const std::vector<float> p1 = p;
  adamw_step(p.data(), g.data(), m.data(), v.data(), 3, opt, 2);
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(p[i], p1[i] - 0.01 * ((g[i] > 0 ? 1.0 : -1.0) + 0.1 * p1[i]), 1e-5) << i;
}

}  // namespace
}  // namespace tessera::train
