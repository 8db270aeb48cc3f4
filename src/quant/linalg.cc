#include "quant/linalg.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace tessera::quant {
namespace {

constexpr int64_t kPanel = 64;  // Cholesky panel width: 64 x 8 bytes per row stays in L1
constexpr int64_t kInvRows = 8; // rows of the inverse computed together (one read of each earlier row)

typedef double v2d __attribute__((vector_size(16)));

inline v2d load2(const double* p) {
  v2d v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

double dot(const double* x, const double* y, int64_t n) {
  v2d s0 = {0, 0}, s1 = {0, 0};
  int64_t k = 0;
  for (; k + 4 <= n; k += 4) {
    s0 += load2(x + k) * load2(y + k);
    s1 += load2(x + k + 2) * load2(y + k + 2);
  }
  const v2d s = s0 + s1;
  double r = s[0] + s[1];
  for (; k < n; ++k) r += x[k] * y[k];
  return r;
}

// out[k][c] = dot(r[k], col[c]) over w values, for 4 rows and 2 columns.
void dots_4x2(const double* const* r, const double* c0, const double* c1, int64_t w, double out[4][2]) {
  v2d acc[4][2] = {};
  int64_t m = 0;
  for (; m + 2 <= w; m += 2) {
    const v2d b0 = load2(c0 + m), b1 = load2(c1 + m);
    for (int k = 0; k < 4; ++k) {
      const v2d a = load2(r[k] + m);
      acc[k][0] += a * b0;
      acc[k][1] += a * b1;
    }
  }
  for (int k = 0; k < 4; ++k) {
    out[k][0] = acc[k][0][0] + acc[k][0][1];
    out[k][1] = acc[k][1][0] + acc[k][1][1];
    for (int64_t t = m; t < w; ++t) {
      out[k][0] += r[k][t] * c0[t];
      out[k][1] += r[k][t] * c1[t];
    }
  }
}

template <class F>
void rows_parallel(ThreadPool* pool, int64_t n, int64_t grain, F&& fn) {
  if (pool != nullptr) {
    pool->parallel_for(n, grain, fn);
  } else if (n > 0) {
    fn(int64_t{0}, n);
  }
}

}  // namespace

bool cholesky_lower(double* a, int64_t n, ThreadPool* pool) {
  std::vector<double> panel;
  for (int64_t k0 = 0; k0 < n; k0 += kPanel) {
    const int64_t k1 = std::min(n, k0 + kPanel), w = k1 - k0;
    // The diagonal block, unblocked (earlier panels are already subtracted).
    for (int64_t j = k0; j < k1; ++j) {
      double* rj = a + j * n;
      double d = rj[j] - dot(rj + k0, rj + k0, j - k0);
      if (!(d > 0.0) || !std::isfinite(d)) return false;
      d = std::sqrt(d);
      rj[j] = d;
      for (int64_t i = j + 1; i < k1; ++i) {
        double* ri = a + i * n;
        ri[j] = (ri[j] - dot(ri + k0, rj + k0, j - k0)) / d;
      }
    }
    if (k1 == n) break;
    // The panel below it: each row solved against the diagonal block.
    rows_parallel(pool, n - k1, 16, [&](int64_t i0, int64_t i1) {
      for (int64_t i = k1 + i0; i < k1 + i1; ++i) {
        double* ri = a + i * n;
        for (int64_t j = k0; j < k1; ++j) ri[j] = (ri[j] - dot(ri + k0, a + j * n + k0, j - k0)) / a[j * n + j];
      }
    });
    // The trailing lower triangle minus panel * panel^T, from a packed copy
    // of the panel (contiguous rows of w).
    const int64_t m = n - k1;
    panel.resize(static_cast<size_t>(m * w));
    for (int64_t i = 0; i < m; ++i) std::copy_n(a + (k1 + i) * n + k0, w, panel.data() + i * w);
    rows_parallel(pool, (m + 3) / 4, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t i0 = 4 * b;
        const double* r[4];
        for (int k = 0; k < 4; ++k) r[k] = panel.data() + std::min(i0 + k, m - 1) * w;
        const int64_t last = std::min(i0 + 3, m - 1);
        for (int64_t j0 = 0; j0 <= last; j0 += 2) {
          const int64_t j1 = std::min(j0 + 1, m - 1);
          double out[4][2];
          dots_4x2(r, panel.data() + j0 * w, panel.data() + j1 * w, w, out);
          for (int k = 0; k < 4; ++k) {
            const int64_t i = i0 + k;
            if (i >= m) break;
            double* ri = a + (k1 + i) * n + k1;
            if (j0 <= i) ri[j0] -= out[k][0];
            if (j0 + 1 <= i && j0 + 1 < m) ri[j0 + 1] -= out[k][1];
          }
        }
      }
    });
  }
  for (int64_t i = 0; i < n; ++i) std::fill(a + i * n + i + 1, a + (i + 1) * n, 0.0);
  return true;
}

void invert_lower(double* l, int64_t n, ThreadPool* pool) {
  // Row i of M = l^-1 is (e_i - sum_{k<i} l[i][k] M[k]) / l[i][i]: a
  // combination of the rows above it. kInvRows rows at a time: each earlier
  // row of M is read once for all of them (columns split over the pool),
  // then the rows inside the block are finished in order.
  std::vector<double> lrows(static_cast<size_t>(kInvRows * n)), acc(static_cast<size_t>(kInvRows * n));
  for (int64_t i0 = 0; i0 < n; i0 += kInvRows) {
    const int64_t rows = std::min(kInvRows, n - i0);
    for (int64_t r = 0; r < rows; ++r) {
      std::copy_n(l + (i0 + r) * n, n, lrows.data() + r * n);
      double* ar = acc.data() + r * n;
      std::fill(ar, ar + n, 0.0);
      ar[i0 + r] = 1.0;
    }
    // Rows of M above the block, by column chunks (M[k] is zero past k).
    rows_parallel(pool, i0, 256, [&](int64_t c0, int64_t c1) {
      for (int64_t k = c0; k < i0; ++k) {
        const double* mk = l + k * n;
        const int64_t e = std::min(c1, k + 1);
        for (int64_t r = 0; r < rows; ++r) {
          const double f = lrows[static_cast<size_t>(r * n + k)];
          if (f == 0.0) continue;
          double* ar = acc.data() + r * n;
          for (int64_t c = c0; c < e; ++c) ar[c] -= f * mk[c];
        }
      }
    });
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = i0 + r;
      double* ar = acc.data() + r * n;
      for (int64_t k = i0; k < i; ++k) {  // rows of the block already finished
        const double f = lrows[static_cast<size_t>(r * n + k)];
        const double* mk = l + k * n;
        for (int64_t c = 0; c <= k; ++c) ar[c] -= f * mk[c];
      }
      const double d = lrows[static_cast<size_t>(r * n + i)];
      double* mi = l + i * n;
      for (int64_t c = 0; c <= i; ++c) mi[c] = ar[c] / d;
    }
  }
}

void add_gram_upper(double* h, const double* xt, int64_t n, int64_t k) {
  for (int64_t i0 = 0; i0 < n; i0 += 4) {
    const double* r[4];
    for (int q = 0; q < 4; ++q) r[q] = xt + std::min(i0 + q, n - 1) * k;
    for (int64_t j0 = i0; j0 < n; j0 += 2) {
      const int64_t j1 = std::min(j0 + 1, n - 1);
      double out[4][2];
      dots_4x2(r, xt + j0 * k, xt + j1 * k, k, out);
      for (int q = 0; q < 4; ++q) {
        const int64_t i = i0 + q;
        if (i >= n) break;
        double* hi = h + i * n;
        if (j0 >= i) hi[j0] += out[q][0];
        if (j0 + 1 >= i && j0 + 1 < n) hi[j0 + 1] += out[q][1];
      }
    }
  }
}

bool inverse_cholesky_upper(double* h, int64_t n, ThreadPool* pool) {
  std::reverse(h, h + n * n);
  if (!cholesky_lower(h, n, pool)) return false;
  invert_lower(h, n, pool);
  std::reverse(h, h + n * n);
  return true;
}

}  // namespace tessera::quant
