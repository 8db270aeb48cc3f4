// QuaRot's rotations (kernels/rotation.h): the fast transform against the
// dense matrix built from the definition, orthogonality, and the vector
// kernels bit-identical to the scalar reference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/cpu.h"
#include "core/thread_pool.h"
#include "kernels/rotation.h"

namespace tessera::kernels {
namespace {

// Sizes: powers of two, odd multiples of them (the mixing of runs: 172 =
// 43 x 4 is stories260K's n_ff, 5632 = 11 x 512 the 1b preset's), and odd.
constexpr int64_t kSizes[] = {1, 3, 8, 12, 16, 48, 64, 96, 172, 384, 512, 768};

std::vector<double> random_doubles(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> g(0.0, 1.0);
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = g(rng);
  return v;
}

TEST(Rotation, IsOrthogonalAndTheFastTransformIsTheDenseMatrix) {
  for (int64_t n : kSizes) {
    const Rotation r = make_rotation(n, 7);
    EXPECT_EQ(r.p * r.m, n);
    EXPECT_EQ(r.m % 2, 1) << n;
    const std::vector<double> R = rotation_dense(r);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double dot = 0.0;
        for (int64_t k = 0; k < n; ++k) dot += R[i * n + k] * R[j * n + k];
        ASSERT_NEAR(dot, i == j ? 1.0 : 0.0, 1e-12) << "n " << n << " rows " << i << ", " << j;
      }
    }
    const std::vector<double> x = random_doubles(n, 11);
    std::vector<double> fast = x, back = x;
    rotate_f64(r, fast.data());
    std::vector<float> xf(x.begin(), x.end());
    rotate_ref(r, xf.data());
    for (int64_t i = 0; i < n; ++i) {
      double want = 0.0;
      for (int64_t k = 0; k < n; ++k) want += R[i * n + k] * x[k];
      EXPECT_NEAR(fast[i], want, 1e-12) << "n " << n << " row " << i;
      EXPECT_NEAR(xf[i], want, 1e-5 * (1.0 + std::fabs(want))) << "n " << n << " row " << i;
    }
    // R^T undoes R.
    rotate_transpose_f64(r, fast.data());
    for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(fast[i], x[i], 1e-12) << "n " << n;
    // ... and is the dense transpose.
    rotate_transpose_f64(r, back.data());
    for (int64_t i = 0; i < n; ++i) {
      double want = 0.0;
      for (int64_t k = 0; k < n; ++k) want += R[k * n + i] * x[k];
      EXPECT_NEAR(back[i], want, 1e-12) << "n " << n;
    }
  }
}

TEST(Rotation, TheSeedChoosesTheRotation) {
  const Rotation a = make_rotation(172, 1), b = make_rotation(172, 1), c = make_rotation(172, 2);
  EXPECT_EQ(a.signs, b.signs);
  EXPECT_EQ(a.mix, b.mix);
  EXPECT_NE(a.signs, c.signs);
  EXPECT_NE(a.mix, c.mix);
  int negative = 0;
  for (float s : make_rotation(4096, 3).signs) negative += s < 0.0f;
  EXPECT_GT(negative, 1800);  // about half
  EXPECT_LT(negative, 2300);
}

TEST(Rotation, SpreadsAnOutlierOverEveryFeature) {
  // One feature 100x the others: after the rotation no feature holds more
  // than a few times the vector's RMS (the point of rotating before
  // quantizing).
  for (int64_t n : {64, 172, 768}) {
    std::vector<float> x(static_cast<size_t>(n), 0.01f);
    x[5] = 100.0f;
    rotate_ref(make_rotation(n, 5), x.data());
    double ss = 0.0, mx = 0.0;
    for (float v : x) {
      ss += static_cast<double>(v) * v;
      mx = std::max(mx, static_cast<double>(std::fabs(v)));
    }
    const double rms = std::sqrt(ss / static_cast<double>(n));
    EXPECT_LT(mx / rms, 4.0) << n;
  }
}

class RotationIsa : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (!isa_supported(GetParam())) GTEST_SKIP() << "this CPU cannot run " << isa_name(GetParam());
  }
};

TEST_P(RotationIsa, RowsAreBitIdenticalToTheReference) {
  for (int64_t n : {8, 16, 24, 32, 48, 64, 80, 172, 256, 768, 2048, 5632}) {
    const Rotation r = make_rotation(n, 9);
    const int64_t rows = 3, stride = n + 5;
    std::vector<float> x(static_cast<size_t>(rows * stride));
    std::mt19937 rng(static_cast<uint32_t>(n));
    std::normal_distribution<float> g(0.0f, 2.0f);
    for (float& v : x) v = g(rng);
    std::vector<float> want = x;
    for (int64_t t = 0; t < rows; ++t) rotate_ref(r, want.data() + t * stride);
    rotate_rows(r, x.data(), rows, stride, GetParam());
    ASSERT_EQ(0, std::memcmp(x.data(), want.data(), x.size() * sizeof(float))) << "n " << n;
  }
}

TEST_P(RotationIsa, RowsSplitOverAPoolAreTheSameBits) {
  ThreadPool pool(2);
  KernelContext ctx;
  ctx.pool = &pool;
  ctx.isa = GetParam();
  ctx.force_parallel = true;
  for (int64_t n : {172, 5632}) {
    const Rotation r = make_rotation(n, 4);
    const int64_t rows = 37;
    std::vector<float> x(static_cast<size_t>(rows * n));
    std::mt19937 rng(static_cast<uint32_t>(n));
    std::normal_distribution<float> g(0.0f, 1.0f);
    for (float& v : x) v = g(rng);
    std::vector<float> want = x;
    for (int64_t t = 0; t < rows; ++t) rotate_ref(r, want.data() + t * n);
    rotate_rows(r, x.data(), rows, n, ctx);
    ASSERT_EQ(0, std::memcmp(x.data(), want.data(), x.size() * sizeof(float))) << "n " << n;
  }
}

INSTANTIATE_TEST_SUITE_P(Isas, RotationIsa, ::testing::Values(Isa::kScalar, Isa::kAvx2, Isa::kAvx512),
                         [](const auto& info) { return std::string(isa_name(info.param)); });

}  // namespace
}  // namespace tessera::kernels
