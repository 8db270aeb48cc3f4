// quant/linalg.h against the identities that define its results, checked
// with plain triple loops: L L^T = H, L * L^-1 = I, and U^T U H = I, for
// sizes around the 64-column panel and the 8-row inverse blocks, with and
// without a pool; and a matrix that is not positive definite refused.
#include "quant/linalg.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/thread_pool.h"

namespace tessera::quant {
namespace {

// A^T A + n I for a random A: symmetric positive definite, condition
// number modest enough that 1e-9 relative residuals are meaningful.
std::vector<double> spd(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> nd;
  std::vector<double> a(static_cast<size_t>(n * n)), h(static_cast<size_t>(n * n), 0.0);
  for (double& v : a) v = nd(rng);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = i == j ? static_cast<double>(n) : 0.0;
      for (int64_t k = 0; k < n; ++k) s += a[static_cast<size_t>(k * n + i)] * a[static_cast<size_t>(k * n + j)];
      h[static_cast<size_t>(i * n + j)] = s;
    }
  }
  return h;
}

double max_abs(const std::vector<double>& v) {
  double m = 0.0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

class Linalg : public ::testing::TestWithParam<int64_t> {};

TEST_P(Linalg, IdentitiesHold) {
  const int64_t n = GetParam();
  ThreadPool pool(2);
  for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
    const std::vector<double> h = spd(n, static_cast<uint32_t>(n));
    const double scale = max_abs(h);
    std::vector<double> l = h;
    ASSERT_TRUE(cholesky_lower(l.data(), n, p));
    double err = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        if (j > i) {
          ASSERT_EQ(l[static_cast<size_t>(i * n + j)], 0.0) << "upper triangle at " << i << "," << j;
        }
        double s = 0.0;
        for (int64_t k = 0; k < n; ++k) s += l[static_cast<size_t>(i * n + k)] * l[static_cast<size_t>(j * n + k)];
        err = std::max(err, std::fabs(s - h[static_cast<size_t>(i * n + j)]));
      }
    }
    EXPECT_LT(err, 1e-12 * scale * static_cast<double>(n)) << "L L^T != H, n=" << n;

    std::vector<double> m = l;
    invert_lower(m.data(), n, p);
    err = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        if (j > i) {
          ASSERT_EQ(m[static_cast<size_t>(i * n + j)], 0.0);
        }
        double s = 0.0;
        for (int64_t k = 0; k < n; ++k) s += l[static_cast<size_t>(i * n + k)] * m[static_cast<size_t>(k * n + j)];
        err = std::max(err, std::fabs(s - (i == j ? 1.0 : 0.0)));
      }
    }
    EXPECT_LT(err, 1e-10) << "L L^-1 != I, n=" << n;

    std::vector<double> u = h;
    ASSERT_TRUE(inverse_cholesky_upper(u.data(), n, p));
    // U upper triangular with a positive diagonal, and (U^T U) H = I.
    std::vector<double> hinv(static_cast<size_t>(n * n), 0.0);
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_GT(u[static_cast<size_t>(i * n + i)], 0.0);
      for (int64_t j = 0; j < i; ++j) ASSERT_EQ(u[static_cast<size_t>(i * n + j)], 0.0);
      for (int64_t j = 0; j < n; ++j) {
        double s = 0.0;
        for (int64_t k = 0; k < n; ++k) s += u[static_cast<size_t>(k * n + i)] * u[static_cast<size_t>(k * n + j)];
        hinv[static_cast<size_t>(i * n + j)] = s;
      }
    }
    err = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double s = 0.0;
        for (int64_t k = 0; k < n; ++k) s += hinv[static_cast<size_t>(i * n + k)] * h[static_cast<size_t>(k * n + j)];
        err = std::max(err, std::fabs(s - (i == j ? 1.0 : 0.0)));
      }
    }
    EXPECT_LT(err, 1e-10) << "U^T U H != I, n=" << n;
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, Linalg, ::testing::Values(1, 2, 7, 63, 64, 65, 129, 200));

TEST(Linalg, RefusesWhatIsNotPositiveDefinite) {
  const int64_t n = 70;
  std::vector<double> h = spd(n, 3);
  h[static_cast<size_t>(66 * n + 66)] = -1.0;  // a pivot past the first panel goes negative
  std::vector<double> a = h;
  EXPECT_FALSE(cholesky_lower(a.data(), n, nullptr));
  EXPECT_FALSE(inverse_cholesky_upper(h.data(), n, nullptr));
  std::vector<double> z(static_cast<size_t>(n * n), 0.0);  // singular
  EXPECT_FALSE(cholesky_lower(z.data(), n, nullptr));
}

// The calibration's batched x x^T: the upper triangle gains xt xt^T (to
// rounding), the strict lower triangle is untouched.
TEST(Linalg, GramUpdateAddsXtXtTransposed) {
  std::mt19937 rng(7);
  std::normal_distribution<double> nd;
  for (const auto& [n, k] : {std::pair<int64_t, int64_t>{1, 1}, {5, 3}, {67, 13}, {130, 64}}) {
    std::vector<double> xt(static_cast<size_t>(n * k)), h(static_cast<size_t>(n * n));
    for (double& v : xt) v = nd(rng);
    for (double& v : h) v = nd(rng);
    std::vector<double> got = h;
    add_gram_upper(got.data(), xt.data(), n, k);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        const size_t at = static_cast<size_t>(i * n + j);
        if (j < i) {
          EXPECT_EQ(got[at], h[at]) << n << " lower " << i << "," << j;
          continue;
        }
        double want = h[at];
        for (int64_t t = 0; t < k; ++t) want += xt[static_cast<size_t>(i * k + t)] * xt[static_cast<size_t>(j * k + t)];
        EXPECT_NEAR(got[at], want, 1e-12 * (1.0 + std::fabs(want)) * static_cast<double>(k)) << n << " " << i << "," << j;
      }
    }
  }
}

}  // namespace
}  // namespace tessera::quant
