// kernels/rotation.h: construction, the scalar reference, the double
// precision transforms of the offline weight rotation, and the dispatch.
// Separate multiplies and adds, as the reference: no contraction into FMAs.
#pragma GCC optimize("fp-contract=off")

#include "kernels/rotation.h"

#include <cmath>

#include "core/error.h"

namespace tessera::kernels {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A uniform double in (0, 1) from stream position i.
double uniform(uint64_t seed, uint64_t i) {
  return (static_cast<double>(splitmix64(seed ^ splitmix64(i)) >> 11) + 0.5) * 0x1.0p-53;
}

// Rows of a Gaussian m x m matrix made orthonormal (modified Gram-Schmidt,
// twice for the rounding).
std::vector<double> random_orthogonal(int64_t m, uint64_t seed) {
  std::vector<double> q(static_cast<size_t>(m * m));
  for (int64_t i = 0; i < m * m; i += 1) {
    const double u1 = uniform(seed, 2 * static_cast<uint64_t>(i)), u2 = uniform(seed, 2 * static_cast<uint64_t>(i) + 1);
    q[static_cast<size_t>(i)] = std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
  for (int pass = 0; pass < 2; ++pass) {
    for (int64_t r = 0; r < m; ++r) {
      double* row = q.data() + r * m;
      for (int64_t k = 0; k < r; ++k) {
        const double* prev = q.data() + k * m;
        double dot = 0.0;
        for (int64_t j = 0; j < m; ++j) dot += row[j] * prev[j];
        for (int64_t j = 0; j < m; ++j) row[j] -= dot * prev[j];
      }
      double ss = 0.0;
      for (int64_t j = 0; j < m; ++j) ss += row[j] * row[j];
      const double inv = 1.0 / std::sqrt(ss);
      for (int64_t j = 0; j < m; ++j) row[j] *= inv;
    }
  }
  return q;
}

template <class T>
void fwht_t(T* x, int64_t p) {
  for (int64_t h = 1; h < p; h *= 2) {
    for (int64_t i = 0; i < p; i += 2 * h) {
      for (int64_t j = i; j < i + h; ++j) {
        const T a = x[j], b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
    }
  }
}

// y[a][b] = sum over c in order of q[a][c] * x[c][b] (q transposed when `t`).
template <class T>
void mix_runs(const T* q, bool t, int64_t m, int64_t p, T* x, std::vector<T>& y) {
  y.assign(static_cast<size_t>(m * p), T{0});
  for (int64_t a = 0; a < m; ++a) {
    for (int64_t b = 0; b < p; ++b) {
      T acc = (t ? q[a] : q[a * m]) * x[b];
      for (int64_t c = 1; c < m; ++c) acc = acc + (t ? q[c * m + a] : q[a * m + c]) * x[c * p + b];
      y[static_cast<size_t>(a * p + b)] = acc;
    }
  }
  for (int64_t i = 0; i < m * p; ++i) x[i] = y[static_cast<size_t>(i)];
}

float norm_of(int64_t p) { return static_cast<float>(1.0 / std::sqrt(static_cast<double>(p))); }

}  // namespace

void fwht(float* x, int64_t p) { fwht_t(x, p); }

Rotation make_rotation(int64_t n, uint64_t seed) {
  TESSERA_CHECK(n > 0, kInvalidArgument, "a rotation needs a positive size (got {})", n);
  Rotation r;
  r.n = n;
  r.p = n & -n;
  r.m = n / r.p;
  r.signs.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    r.signs[static_cast<size_t>(i)] = (splitmix64(seed * 0x2545f4914f6cdd1dull + static_cast<uint64_t>(i)) >> 63) ? -1.0f : 1.0f;
  }
  if (r.m > 1) {
    r.mix64 = random_orthogonal(r.m, splitmix64(seed + 0x51ed2701ull));
    r.mix.assign(r.mix64.begin(), r.mix64.end());
  }
  return r;
}

void rotate_ref(const Rotation& r, float* x) {
  for (int64_t i = 0; i < r.n; ++i) x[i] = x[i] * r.signs[static_cast<size_t>(i)];
  for (int64_t o = 0; o < r.n; o += r.p) fwht_t(x + o, r.p);
  const float norm = norm_of(r.p);
  for (int64_t i = 0; i < r.n; ++i) x[i] = x[i] * norm;
  if (r.m == 1) return;
  thread_local std::vector<float> y;
  mix_runs(r.mix.data(), false, r.m, r.p, x, y);
}

void rotate_f64(const Rotation& r, double* x) {
  for (int64_t i = 0; i < r.n; ++i) x[i] *= r.signs[static_cast<size_t>(i)];
  for (int64_t o = 0; o < r.n; o += r.p) fwht_t(x + o, r.p);
  const double norm = 1.0 / std::sqrt(static_cast<double>(r.p));
  for (int64_t i = 0; i < r.n; ++i) x[i] *= norm;
  if (r.m == 1) return;
  std::vector<double> y;
  mix_runs(r.mix64.data(), false, r.m, r.p, x, y);
}

void rotate_transpose_f64(const Rotation& r, double* x) {
  if (r.m > 1) {
    std::vector<double> y;
    mix_runs(r.mix64.data(), true, r.m, r.p, x, y);
  }
  for (int64_t o = 0; o < r.n; o += r.p) fwht_t(x + o, r.p);
  const double norm = 1.0 / std::sqrt(static_cast<double>(r.p));
  for (int64_t i = 0; i < r.n; ++i) x[i] *= norm * r.signs[static_cast<size_t>(i)];
}

std::vector<double> rotation_dense(const Rotation& r) {
  // Column j is R e_j: signs, then the Hadamard entry of each run, then the mixing.
  const int64_t n = r.n;
  std::vector<double> out(static_cast<size_t>(n * n));
  const double norm = 1.0 / std::sqrt(static_cast<double>(r.p));
  for (int64_t j = 0; j < n; ++j) {
    const int64_t ja = j / r.p, jb = j % r.p;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t ia = i / r.p, ib = i % r.p;
      const double h = (__builtin_popcountll(static_cast<uint64_t>(ib & jb)) & 1) ? -1.0 : 1.0;
      const double mix = r.m == 1 ? 1.0 : r.mix64[static_cast<size_t>(ia * r.m + ja)];
      out[static_cast<size_t>(i * n + j)] = mix * h * norm * r.signs[static_cast<size_t>(j)];
    }
  }
  return out;
}

void rotate_rows(const Rotation& r, float* x, int64_t n_rows, int64_t stride, Isa isa) {
  RotateRowFn fn = nullptr;
  if (isa == Isa::kAvx512 && r.p % 16 == 0) fn = rotate_row_avx512();
  else if (isa != Isa::kScalar && r.p % 8 == 0) fn = rotate_row_avx2();
  if (fn == nullptr) {
    for (int64_t t = 0; t < n_rows; ++t) rotate_ref(r, x + t * stride);
    return;
  }
  thread_local std::vector<float> scratch;
  scratch.resize(static_cast<size_t>(r.n));
  const RotationArgs a{r.n, r.p, r.m, r.signs.data(), r.m > 1 ? r.mix.data() : nullptr, norm_of(r.p), scratch.data()};
  for (int64_t t = 0; t < n_rows; ++t) fn(a, x + t * stride);
}

void rotate_rows(const Rotation& r, float* x, int64_t n_rows, int64_t stride, const KernelContext& ctx) {
  // Work in the float matmuls' units: about log2(p) adds per value for the
  // transform and m per value for the mixing.
  int64_t log_p = 0;
  while ((int64_t{1} << log_p) < r.p) ++log_p;
  ThreadPool* pool = parallel_pool(ctx, n_rows * r.n * (log_p + r.m), kMinParallelFloatMatmulMacs);
  if (pool == nullptr || n_rows < 2) return rotate_rows(r, x, n_rows, stride, ctx.isa);
  pool->parallel_for(n_rows, 1, [&](int64_t t0, int64_t t1) { rotate_rows(r, x + t0 * stride, t1 - t0, stride, ctx.isa); });
}

}  // namespace tessera::kernels
