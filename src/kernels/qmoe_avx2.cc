// The QMoE kernels with AVX2 (qmoe_kernels.h): a codeword's 16 lanes are two
// 8-lane halves; each half of a mask selects its inputs through a table of
// the 256 lane masks (x AND mask adds +0 where the bit is off, which leaves
// an accumulator as the reference's skipped add does), for up to 2 tokens
// per pass over a row's codewords.
#include <immintrin.h>

#include <array>
#include <cmath>

#include "core/fp16.h"
#include "kernels/qmoe_kernels.h"

namespace tessera::kernels {
namespace {

struct alignas(32) LaneMask {
  uint32_t lane[8];
};

const std::array<LaneMask, 256>& lane_masks() {
  static const std::array<LaneMask, 256> t = [] {
    std::array<LaneMask, 256> m{};
    for (int b = 0; b < 256; ++b) {
      for (int j = 0; j < 8; ++j) m[b].lane[j] = (b >> j & 1) ? 0xffffffffu : 0u;
    }
    return m;
  }();
  return t;
}

inline __m256 sel(const LaneMask* t, unsigned bits, __m256 x) {
  return _mm256_and_ps(x, _mm256_load_ps(reinterpret_cast<const float*>(&t[bits])));
}

// Lanes i + i+8 (the halves), then i + i+4, i + i+2, 0 + 1 (qmoe_tree16).
inline float tree16(__m256 a, __m256 b) {
  const __m256 s8 = _mm256_add_ps(a, b);
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Accumulators of one set and token: lanes 0-7 and 8-15 of lo and hi.
struct Acc {
  __m256 lo0, lo1, hi0, hi1;
};

inline void add(Acc& acc, const LaneMask* t, const QmoeEntry& e, const float* x) {
  const __m256 x0 = _mm256_loadu_ps(x), x1 = _mm256_loadu_ps(x + 8);
  acc.lo0 = _mm256_add_ps(acc.lo0, sel(t, e.lo_mask & 0xff, x0));
  acc.lo1 = _mm256_add_ps(acc.lo1, sel(t, e.lo_mask >> 8, x1));
  acc.hi0 = _mm256_add_ps(acc.hi0, sel(t, e.hi_mask & 0xff, x0));
  acc.hi1 = _mm256_add_ps(acc.hi1, sel(t, e.hi_mask >> 8, x1));
}

template <int TT>
uint64_t row_tile(const QmoeRowsArgs& a, int64_t r, uint64_t k, const float* const* x, float* const* y) {
  const QmoeView& w = *a.w;
  const LaneMask* t = lane_masks().data();
  Acc acc[2][TT];
  for (int s = 0; s < 2; ++s) {
    for (int i = 0; i < TT; ++i) acc[s][i] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  }
  // Codewords in pairs (even set, odd set), so the accumulators stay in
  // registers; a row's last, unpaired codeword goes to the even set.
  int64_t c = 0;
  while (c < w.cols && k < w.n_codes) {
    const QmoeEntry& e0 = w.dict[w.codes[k]];
    const int64_t c1 = c + e0.length;
    if (c1 >= w.cols || k + 1 >= w.n_codes) {
      for (int i = 0; i < TT; ++i) add(acc[0][i], t, e0, x[i] + c);
      ++k;
      break;
    }
    const QmoeEntry& e1 = w.dict[w.codes[k + 1]];
    for (int i = 0; i < TT; ++i) {
      add(acc[0][i], t, e0, x[i] + c);
      add(acc[1][i], t, e1, x[i] + c1);
    }
    c = c1 + e1.length;
    k += 2;
  }
  const int64_t global = a.m * w.rows + r;
  const float los = fp16_to_f32(w.scales[2 * global]), his = fp16_to_f32(w.scales[2 * global + 1]);
  for (int i = 0; i < TT; ++i) {
    const float sl = tree16(_mm256_add_ps(acc[0][i].lo0, acc[1][i].lo0), _mm256_add_ps(acc[0][i].lo1, acc[1][i].lo1));
    const float sh = tree16(_mm256_add_ps(acc[0][i].hi0, acc[1][i].hi0), _mm256_add_ps(acc[0][i].hi1, acc[1][i].hi1));
    y[i][r] = std::fma(los, sl, his * sh);
  }
  return k;
}

template <int TT>
void rows_tile(const QmoeRowsArgs& a, int64_t t0) {
  const float* x[TT];
  float* y[TT];
  for (int i = 0; i < TT; ++i) {
    x[i] = a.x + (t0 + i) * a.x_stride;
    y[i] = a.y + (t0 + i) * a.y_stride;
  }
  uint64_t k = a.code_begin;
  for (int64_t r = a.row_begin; r < a.row_end; ++r) k = row_tile<TT>(a, r, k, x, y);
}

void rows_avx2(const QmoeRowsArgs& a) {
  int64_t t = 0;
  for (; t + 2 <= a.n_tokens; t += 2) rows_tile<2>(a, t);
  if (t < a.n_tokens) rows_tile<1>(a, t);
}

}  // namespace

const QmoeKernels& qmoe_kernels_avx2() {
  static const QmoeKernels k{"avx2", &rows_avx2};
  return k;
}

}  // namespace tessera::kernels
