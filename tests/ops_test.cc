// Vector layer ops against the scalar reference (Isa::kScalar), for every
// ISA this CPU has, on lengths that are not multiples of any vector width.
//   add_inplace, rope:     bit-identical (same roundings, no contraction)
//   rmsnorm:               |y - ref| <= 2 eps |ref|   (the double sum of squares is only
//                                                      reordered; one float rounding of the scale
//                                                      may differ, plus the two products)
//   silu_mul:              |y - ref| <= 8 eps |ref| + 1e-37  (vector exp within ~2 ulp, then a
//                                                      divide and a multiply)
//   gelu_tanh_mul:         |y - ref| <= 8 eps |ref| + 1e-37  (as silu_mul)
//   softmax:               |y - ref| <= 8 eps |ref| + 1e-37
//   argmax:                equal index (first maximum, NaNs skipped)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/cpu.h"
#include "kernels/ops.h"

namespace tessera::kernels {
namespace {

constexpr float kEps = 0x1p-24f;

class OpsTest : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (!isa_supported(GetParam())) GTEST_SKIP() << "this CPU cannot run " << isa_name(GetParam());
  }
};

std::vector<float> random_vec(int64_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> g(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = g(rng);
  return v;
}

const int64_t kLengths[] = {1, 3, 7, 8, 9, 15, 16, 17, 31, 33, 100, 768, 2051};

TEST_P(OpsTest, AddInplaceExact) {
  std::mt19937 rng(1);
  for (int64_t n : kLengths) {
    std::vector<float> y = random_vec(n + 1, rng), x = random_vec(n + 1, rng);
    std::vector<float> yr = y;
    add_inplace(y.data() + 1, x.data() + 1, n, GetParam());  // misaligned
    add_inplace(yr.data() + 1, x.data() + 1, n, Isa::kScalar);
    ASSERT_EQ(y, yr) << "n " << n;
  }
}

TEST_P(OpsTest, RmsnormMatchesScalar) {
  std::mt19937 rng(2);
  for (int64_t n : kLengths) {
    std::vector<float> x = random_vec(n, rng, 3.0f), w = random_vec(n, rng);
    std::vector<float> y(n + 1, 5.0f), yr(n + 1, 5.0f);
    rmsnorm(x.data(), w.data(), y.data(), n, 1e-5f, GetParam());
    rmsnorm(x.data(), w.data(), yr.data(), n, 1e-5f, Isa::kScalar);
    for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(y[i], yr[i], 2 * kEps * std::fabs(yr[i])) << "n " << n << " i " << i;
    ASSERT_EQ(y[n], 5.0f) << "wrote past the row";
  }
}

TEST_P(OpsTest, RopeExact) {
  std::mt19937 rng(3);
  for (bool neox : {false, true}) {
    for (int64_t head_dim : {int64_t{6}, int64_t{64}, int64_t{80}, int64_t{128}}) {
      for (int64_t n_rot : {head_dim, head_dim / 2 + (head_dim / 2) % 2}) {
        RopeParams p;
        p.n_rot = n_rot;
        p.neox = neox;
        p.freq_base = 500000.0f;
        p.freq_scale = 0.25f;
        const int64_t heads = 3;
        for (int64_t pos : {int64_t{0}, int64_t{1}, int64_t{17}, int64_t{4095}}) {
          std::vector<float> x = random_vec(heads * head_dim, rng), xr = x;
          rope(x.data(), heads, head_dim, pos, p, GetParam());
          rope(xr.data(), heads, head_dim, pos, p, Isa::kScalar);
          ASSERT_EQ(x, xr) << "neox " << neox << " head_dim " << head_dim << " n_rot " << n_rot << " pos " << pos;
        }
      }
    }
  }
}

// Independent check of the reference itself: rotating by theta and then by
// -theta (position p then the conjugate) restores the vector, and a pair's
// norm is preserved.
TEST(OpsReference, RopePreservesNorm) {
  std::mt19937 rng(4);
  RopeParams p;
  p.n_rot = 8;
  std::vector<float> x = random_vec(8, rng), y = x;
  rope(y.data(), 1, 8, 123, p, Isa::kScalar);
  for (int i = 0; i < 4; ++i) {
    const double n0 = std::hypot(x[2 * i], x[2 * i + 1]), n1 = std::hypot(y[2 * i], y[2 * i + 1]);
    EXPECT_NEAR(n0, n1, 4 * kEps * n0);
  }
  // Pair 0 rotates by exactly pos radians.
  const double c = std::cos(123.0), s = std::sin(123.0);
  EXPECT_NEAR(y[0], x[0] * c - x[1] * s, 1e-6);
  EXPECT_NEAR(y[1], x[0] * s + x[1] * c, 1e-6);
}

// Llama 3's rope_freqs: pair i's angle is divided by factor i (ggml's
// freq_factors), checked against the formula evaluated here.
TEST(OpsReference, RopeFreqFactorsDivideTheAngles) {
  const float factors[4] = {1.0f, 2.0f, 5.5f, 32.0f};
  RopeParams p;
  p.n_rot = 8;
  p.freq_base = 500000.0f;
  p.freq_factors = factors;
  float c[4], s[4];
  rope_angles(37, p, c, s);
  for (int i = 0; i < 4; ++i) {
    const double theta = 37.0 * std::pow(500000.0, -2.0 * i / 8.0) / factors[i];
    EXPECT_NEAR(c[i], std::cos(theta), 1e-7) << i;
    EXPECT_NEAR(s[i], std::sin(theta), 1e-7) << i;
  }
}

// YaRN as llama.cpp computes it (ggml_rope_yarn_corr_dims, rope_yarn), for
// 128 rotated dims of a model trained on 4096 positions, base 10000, factor
// 4, betas 32 / 1: the correction range is pairs [20, 46] (floor(20.94),
// ceil(45.03), evaluated by hand); pairs up to 20 keep their unscaled
// angle, pairs from 46 on are divided by 4, pair 33 is half way, and cos
// and sin are scaled by 1 + 0.1 ln 4.
TEST(OpsReference, YarnAngles) {
  float dims[2];
  yarn_corr_dims(128, 4096, 10000.0f, 32.0f, 1.0f, dims);
  EXPECT_EQ(dims[0], 20.0f);
  EXPECT_EQ(dims[1], 46.0f);
  RopeParams p;
  p.n_rot = 128;
  p.freq_base = 10000.0f;
  p.freq_scale = 0.25f;
  p.ext_factor = 1.0f;
  p.yarn_low = dims[0];
  p.yarn_high = dims[1];
  std::vector<float> c(64), s(64);
  const int64_t pos = 1000;
  rope_angles(pos, p, c.data(), s.data());
  const double mscale = 1.0 + 0.1 * std::log(4.0);
  auto angle = [](int i) { return 1000.0 * std::pow(10000.0, -2.0 * i / 128.0); };
  for (int i : {0, 7, 20}) {
    EXPECT_NEAR(c[i], mscale * std::cos(angle(i)), 1e-6) << i;
    EXPECT_NEAR(s[i], mscale * std::sin(angle(i)), 1e-6) << i;
  }
  for (int i : {46, 50, 63}) {
    EXPECT_NEAR(c[i], mscale * std::cos(angle(i) / 4), 1e-6) << i;
    EXPECT_NEAR(s[i], mscale * std::sin(angle(i) / 4), 1e-6) << i;
  }
  const double mid = 0.5 * angle(33) + 0.5 * angle(33) / 4;
  EXPECT_NEAR(c[33], mscale * std::cos(mid), 1e-6);
  EXPECT_NEAR(s[33], mscale * std::sin(mid), 1e-6);
}

TEST_P(OpsTest, SiluMulMatchesScalar) {
  std::mt19937 rng(5);
  for (int64_t n : kLengths) {
    std::vector<float> g = random_vec(n, rng, 4.0f), up = random_vec(n, rng);
    if (n > 5) {
      g[0] = 100.0f;
      g[1] = -100.0f;  // exp overflow side
      g[2] = 0.0f;
      g[3] = -87.5f;
      g[4] = 89.0f;
    }
    std::vector<float> gr = g;
    silu_mul(g.data(), up.data(), n, GetParam());
    silu_mul(gr.data(), up.data(), n, Isa::kScalar);
    for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(g[i], gr[i], 8 * kEps * std::fabs(gr[i]) + 1e-37f) << "n " << n << " i " << i;
  }
}

// GeGLU's gelu_tanh(g) * up, computed as g / (1 + exp(-2 z)) everywhere:
// the vector exp is within ~2 ulp, then a divide and a multiply (as silu_mul).
TEST_P(OpsTest, GeluTanhMulMatchesScalar) {
  std::mt19937 rng(15);
  for (int64_t n : kLengths) {
    std::vector<float> g = random_vec(n, rng, 6.0f), up = random_vec(n, rng, 2.0f);
    if (n > 4) {
      g[0] = -40.0f;  // exp overflows: gelu is -0
      g[1] = 40.0f;   // exp underflows: gelu is x
      g[2] = 0.0f;
    }
    std::vector<float> gr = g;
    gelu_tanh_mul(g.data(), up.data(), n, GetParam());
    gelu_tanh_mul(gr.data(), up.data(), n, Isa::kScalar);
    for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(g[i], gr[i], 8 * kEps * std::fabs(gr[i]) + 1e-37f) << "n " << n << " i " << i;
  }
  // The scalar reference against tanh in double.
  for (float x : {-5.0f, -1.0f, -0.1f, 0.3f, 1.0f, 2.5f, 7.0f}) {
    float g = x;
    const float one = 1.0f;
    gelu_tanh_mul(&g, &one, 1, Isa::kScalar);
    const double z = 0.7978845608028654 * (x + 0.044715 * x * x * x);
    EXPECT_NEAR(g, 0.5 * x * (1.0 + std::tanh(z)), 4e-7 * std::fabs(x) + 1e-30) << x;
  }
}

// gpt-oss's clamped SwiGLU: inputs past the limits (both signs), a NaN
// clamped like ggml's MIN / MAX; the scalar reference against the formula in
// double.
TEST_P(OpsTest, SwigluOaiMulMatchesScalar) {
  std::mt19937 rng(16);
  for (int64_t n : kLengths) {
    std::vector<float> g = random_vec(n, rng, 12.0f), up = random_vec(n, rng, 12.0f);
    if (n > 4) {
      g[0] = -60.0f;  // exp overflows: the product is -0
      g[1] = std::nanf("");
      up[2] = std::nanf("");
    }
    std::vector<float> gr = g;
    swiglu_oai_mul(g.data(), up.data(), n, GetParam());
    swiglu_oai_mul(gr.data(), up.data(), n, Isa::kScalar);
    for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(g[i], gr[i], 8 * kEps * std::fabs(gr[i]) + 1e-37f) << "n " << n << " i " << i;
  }
  for (float x : {-9.0f, -1.0f, 0.0f, 0.4f, 3.0f, 6.5f, 7.5f, 30.0f}) {
    for (float u : {-20.0f, -3.0f, 0.25f, 6.0f, 8.0f}) {
      float g = x;
      swiglu_oai_mul(&g, &u, 1, Isa::kScalar);
      const double gc = std::min<double>(x, 7.0), uc = std::clamp<double>(u, -7.0, 7.0);
      const double want = gc / (1.0 + std::exp(-1.702 * gc)) * (uc + 1.0);
      EXPECT_NEAR(g, want, 4e-7 * std::fabs(want) + 1e-30) << x << " " << u;
    }
  }
  float g = std::nanf(""), u = 1.0f;
  swiglu_oai_mul(&g, &u, 1, Isa::kScalar);
  EXPECT_NEAR(g, 7.0 / (1.0 + std::exp(-1.702 * 7.0)) * 2.0, 1e-5);  // NaN gate: the limit, as ggml's MIN gives
}

TEST_P(OpsTest, SoftmaxMatchesScalar) {
  std::mt19937 rng(6);
  for (int64_t n : kLengths) {
    std::vector<float> x = random_vec(n, rng, 5.0f);
    if (n > 3) x[2] = -INFINITY;  // a masked-out score
    std::vector<float> xr = x;
    softmax(x.data(), n, GetParam());
    softmax(xr.data(), n, Isa::kScalar);
    double total = 0;
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_NEAR(x[i], xr[i], 8 * kEps * std::fabs(xr[i]) + 1e-37f) << "n " << n << " i " << i;
      total += x[i];
    }
    EXPECT_NEAR(total, 1.0, 1e-5);
  }
}

TEST_P(OpsTest, ArgmaxMatchesScalar) {
  std::mt19937 rng(7);
  for (int64_t n : kLengths) {
    for (int trial = 0; trial < 4; ++trial) {
      std::vector<float> x = random_vec(n, rng);
      if (trial == 1 && n > 4) x[n - 1] = x[n / 2] = 50.0f;  // tie: first wins
      if (trial == 2) x.assign(n, -INFINITY);
      if (trial == 3 && n > 2) {
        x[0] = std::nanf("");
        x[n - 1] = 99.0f;
      }
      ASSERT_EQ(argmax(x.data(), n, GetParam()), argmax(x.data(), n, Isa::kScalar)) << "n " << n << " trial " << trial;
    }
  }
  std::vector<float> x = {1.0f, 7.0f, 7.0f, -3.0f};
  EXPECT_EQ(argmax(x.data(), 4, GetParam()), 1);
}

INSTANTIATE_TEST_SUITE_P(Isas, OpsTest, ::testing::Values(Isa::kScalar, Isa::kAvx2, Isa::kAvx512),
                         [](const auto& info) { return std::string(isa_name(info.param)); });

}  // namespace
}  // namespace tessera::kernels
