// The QMoE kernels with AVX-512 (qmoe_kernels.h): a codeword's masks go to
// mask registers and each of its 16 inputs is added under them, for up to 4
// tokens per pass over a row's codewords.
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "kernels/qmoe_kernels.h"

namespace tessera::kernels {
namespace {

// Lanes i + i+8, then i + i+4, i + i+2, 0 + 1 (qmoe_tree16).
inline float tree16(__m512 v) {
  __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// An input vector in a register: used by two masked adds, it is loaded once
// (a memory operand would be a second split-line load).
inline __m512 load_x(const float* p) {
  __m512 v = _mm512_loadu_ps(p);
  asm("" : "+v"(v));
  return v;
}

// A codeword's masks: lo in bits 0-15 of one mask register, hi shifted down
// from bits 16-31 (one 32-bit load, one shift).
struct Masks {
  __mmask16 lo, hi;
};
inline Masks masks(const QmoeEntry& e) {
  __mmask32 bits;
  std::memcpy(&bits, &e, sizeof(bits));
  const __mmask32 both = _cvtu32_mask32(bits);
  return {static_cast<__mmask16>(both), static_cast<__mmask16>(_kshiftri_mask32(both, 16))};
}

// One row for TT tokens; returns the index past its codewords.
template <int TT>
uint64_t row_tile(const QmoeRowsArgs& a, int64_t r, uint64_t k, const float* const* x, float* const* y) {
  const QmoeView& w = *a.w;
  __m512 lo[2][TT], hi[2][TT];
  for (int s = 0; s < 2; ++s) {
    for (int t = 0; t < TT; ++t) lo[s][t] = hi[s][t] = _mm512_setzero_ps();
  }
  int64_t c = 0;
  const int64_t cols = w.cols;
  const uint64_t end = w.n_codes;
  const uint8_t* codes = w.codes;
  const QmoeEntry* dict = w.dict;
  while (c < cols && k < end) {
    const QmoeEntry& e0 = dict[codes[k]];
    const Masks m0 = masks(e0);
    const int64_t c1 = c + e0.length;
    if (c1 >= cols || k + 1 >= end) {  // the row's last codeword: even or odd set by its index
      for (int t = 0; t < TT; ++t) {
        const __m512 xv = load_x(x[t] + c);
        lo[0][t] = _mm512_mask_add_ps(lo[0][t], m0.lo, lo[0][t], xv);
        hi[0][t] = _mm512_mask_add_ps(hi[0][t], m0.hi, hi[0][t], xv);
      }
      c = c1;
      ++k;
      break;
    }
    const QmoeEntry& e1 = dict[codes[k + 1]];
    const Masks m1 = masks(e1);
    for (int t = 0; t < TT; ++t) {
      const __m512 x0 = load_x(x[t] + c), x1 = load_x(x[t] + c1);
      lo[0][t] = _mm512_mask_add_ps(lo[0][t], m0.lo, lo[0][t], x0);
      hi[0][t] = _mm512_mask_add_ps(hi[0][t], m0.hi, hi[0][t], x0);
      lo[1][t] = _mm512_mask_add_ps(lo[1][t], m1.lo, lo[1][t], x1);
      hi[1][t] = _mm512_mask_add_ps(hi[1][t], m1.hi, hi[1][t], x1);
    }
    c = c1 + e1.length;
    k += 2;
  }
  const int64_t global = a.m * w.rows + r;
  const float los = fp16_to_f32(w.scales[2 * global]), his = fp16_to_f32(w.scales[2 * global + 1]);
  for (int t = 0; t < TT; ++t) {
    const float sl = tree16(_mm512_add_ps(lo[0][t], lo[1][t]));
    const float sh = tree16(_mm512_add_ps(hi[0][t], hi[1][t]));
    y[t][r] = std::fma(los, sl, his * sh);
  }
  return k;
}

template <int TT>
uint64_t rows_tile(const QmoeRowsArgs& a, int64_t t0) {
  const float* x[TT];
  float* y[TT];
  for (int t = 0; t < TT; ++t) {
    x[t] = a.x + (t0 + t) * a.x_stride;
    y[t] = a.y + (t0 + t) * a.y_stride;
  }
  uint64_t k = a.code_begin;
  for (int64_t r = a.row_begin; r < a.row_end; ++r) k = row_tile<TT>(a, r, k, x, y);
  return k;
}

void rows_avx512(const QmoeRowsArgs& a) {
  int64_t t = 0;
  for (; t + 4 <= a.n_tokens; t += 4) rows_tile<4>(a, t);
  switch (a.n_tokens - t) {
    case 3: rows_tile<3>(a, t); break;
    case 2: rows_tile<2>(a, t); break;
    case 1: rows_tile<1>(a, t); break;
    default: break;
  }
}

}  // namespace

const QmoeKernels& qmoe_kernels_avx512() {
  static const QmoeKernels k{"avx512", &rows_avx512};
  return k;
}

}  // namespace tessera::kernels
