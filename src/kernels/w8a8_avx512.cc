// AVX-512 VNNI W8A8 kernels (w8a8_kernels.h): a register tile of up to 6
// tokens x 4 row groups (24 zmm sums of 16 rows each); per 4 columns one
// load of each group's 16 x 4 weights and one broadcast of each token's 4
// activation bytes feed 24 VPDPBUSD. Columns go in chunks whose weights stay
// in L1 across the unit's token tiles (partial sums parked in a buffer).
// The sums are exact int32; the float step runs once per output.
#include <immintrin.h>

#include <cstring>

#include "kernels/w8a8_kernels.h"

namespace tessera::kernels {
namespace {

inline int32_t load4(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Adds the parked partial sums (unless first), then parks the result
// (unless last) or finishes it into y.
template <int NT, int NG>
void finish(const W8A8Args& a, int64_t g, int64_t t, __m512i (&acc)[NT][NG], int32_t* part, bool first, bool last) {
  if (!first) {
    for (int i = 0; i < NT; ++i) {
      for (int j = 0; j < NG; ++j) acc[i][j] = _mm512_add_epi32(acc[i][j], _mm512_loadu_si512(part + (i * 4 + j) * 16));
    }
  }
  if (!last) {
    for (int i = 0; i < NT; ++i) {
      for (int j = 0; j < NG; ++j) _mm512_storeu_si512(part + (i * 4 + j) * 16, acc[i][j]);
    }
    return;
  }
  // No early exit: a loop GCC cannot unroll would keep acc in memory.
#pragma GCC unroll 4
  for (int j = 0; j < NG; ++j) {
    const int64_t r0 = (g + j) * kW8Group, left = a.rows - r0;
    const __mmask16 m = left >= 16 ? static_cast<__mmask16>(0xffff)
                                   : left <= 0 ? static_cast<__mmask16>(0) : static_cast<__mmask16>((1u << left) - 1u);
    const __m512i ws = _mm512_loadu_si512(a.wsum128 + r0);
    const __m512 sw = _mm512_loadu_ps(a.sw + r0);
    for (int i = 0; i < NT; ++i) {
      const __m512 f = _mm512_cvtepi32_ps(_mm512_sub_epi32(acc[i][j], ws));
      const __m512 yv = _mm512_mul_ps(_mm512_mul_ps(f, _mm512_set1_ps(a.sx[t + i])), sw);
      _mm512_mask_storeu_ps(a.y + (t + i) * a.y_stride + r0, m, yv);
    }
  }
}

// Columns [4 c0, 4 c1) of tokens [t, t + NT) x row groups [g, g + NG): the
// partial sums start from zero (first) or from part, and are written back
// to part, or (last) finished into y. part: [NT][4][16] int32.
template <int NT, int NG>
void tile(const W8A8Args& a, int64_t g, int64_t t, int64_t c0, int64_t c1, int32_t* part, bool first, bool last) {
  // Sums start at zero (a load here kept GCC from holding them in registers
  // through the loop); the parked partial sums are added after it.
  __m512i acc[NT][NG];
  for (int i = 0; i < NT; ++i) {
    for (int j = 0; j < NG; ++j) acc[i][j] = _mm512_setzero_si512();
  }
  const int64_t gstride = a.cols4 * kW8Group * 4;
  const int8_t* w = a.q + g * gstride;
  const uint8_t* x = a.act + t * a.act_stride;
  for (int64_t c = c0; c < c1; ++c) {
    __m512i wv[NG];
#pragma GCC unroll 4
    for (int j = 0; j < NG; ++j) wv[j] = _mm512_loadu_si512(w + j * gstride + c * 64);
#pragma GCC unroll 6
    for (int i = 0; i < NT; ++i) {
      const __m512i b = _mm512_set1_epi32(load4(x + i * a.act_stride + 4 * c));
#pragma GCC unroll 4
      for (int j = 0; j < NG; ++j) acc[i][j] = _mm512_dpbusd_epi32(acc[i][j], b, wv[j]);
    }
  }
  finish<NT, NG>(a, g, t, acc, part, first, last);
}

// The full 6 x 4 tile with its 24 sums as named variables: GCC 12 keeps an
// array of them in memory (a load and a store around every VPDPBUSD, half
// the peak), named ones in registers (24 sums, 4 weight vectors and a
// broadcast: 29 of the 32 zmm).
void tile_6x4(const W8A8Args& a, int64_t g, int64_t t, int64_t c0, int64_t c1, int32_t* part, bool first, bool last) {
  const int64_t gstride = a.cols4 * kW8Group * 4;
  const int8_t* w = a.q + g * gstride;
  const int64_t s = a.act_stride;
  const uint8_t* x = a.act + t * s;
#define W8_ZERO4(i) __m512i s##i##0 = _mm512_setzero_si512(), s##i##1 = s##i##0, s##i##2 = s##i##0, s##i##3 = s##i##0;
  W8_ZERO4(0) W8_ZERO4(1) W8_ZERO4(2) W8_ZERO4(3) W8_ZERO4(4) W8_ZERO4(5)
#undef W8_ZERO4
  for (int64_t c = c0; c < c1; ++c) {
    const __m512i w0 = _mm512_loadu_si512(w + c * 64), w1 = _mm512_loadu_si512(w + gstride + c * 64);
    const __m512i w2 = _mm512_loadu_si512(w + 2 * gstride + c * 64), w3 = _mm512_loadu_si512(w + 3 * gstride + c * 64);
#define W8_ROW(i)                                                    \
  {                                                                  \
    const __m512i b = _mm512_set1_epi32(load4(x + (i) * s + 4 * c)); \
    s##i##0 = _mm512_dpbusd_epi32(s##i##0, b, w0);                   \
    s##i##1 = _mm512_dpbusd_epi32(s##i##1, b, w1);                   \
    s##i##2 = _mm512_dpbusd_epi32(s##i##2, b, w2);                   \
    s##i##3 = _mm512_dpbusd_epi32(s##i##3, b, w3);                   \
  }
    W8_ROW(0) W8_ROW(1) W8_ROW(2) W8_ROW(3) W8_ROW(4) W8_ROW(5)
#undef W8_ROW
  }
  __m512i acc[6][4] = {{s00, s01, s02, s03}, {s10, s11, s12, s13}, {s20, s21, s22, s23},
                       {s30, s31, s32, s33}, {s40, s41, s42, s43}, {s50, s51, s52, s53}};
  finish<6, 4>(a, g, t, acc, part, first, last);
}

using TileFn = void (*)(const W8A8Args&, int64_t, int64_t, int64_t, int64_t, int32_t*, bool, bool);

template <int NT>
constexpr TileFn kByGroups[4] = {tile<NT, 1>, tile<NT, 2>, tile<NT, 3>, tile<NT, 4>};

constexpr const TileFn* kTiles[6] = {kByGroups<1>, kByGroups<2>, kByGroups<3>, kByGroups<4>, kByGroups<5>,
                                     kByGroups<6>};

// Columns in chunks whose weights (4 groups x 64 x 64 bytes = 16 KiB) stay
// in L1 while every token tile of the unit passes over them.
constexpr int64_t kChunk4 = 64;
constexpr int64_t kMaxUnitTokens = 64;

void run_avx512(const W8A8Args& a, int64_t g0, int64_t g1, int64_t t0, int64_t t1) {
  alignas(64) int32_t part[kMaxUnitTokens / 6 + 1][6 * 4 * 16];
  for (int64_t g = g0; g < g1; g += 4) {
    const int64_t ng = g1 - g < 4 ? g1 - g : 4;
    for (int64_t tb = t0; tb < t1; tb += kMaxUnitTokens) {
      const int64_t te = t1 - tb < kMaxUnitTokens ? t1 : tb + kMaxUnitTokens;
      for (int64_t c0 = 0; c0 < a.cols4; c0 += kChunk4) {
        const int64_t c1 = a.cols4 - c0 < kChunk4 ? a.cols4 : c0 + kChunk4;
        int k = 0;
        for (int64_t t = tb; t < te; t += 6, ++k) {
          const int64_t nt = te - t < 6 ? te - t : 6;
          const TileFn f = nt == 6 && ng == 4 ? tile_6x4 : kTiles[nt - 1][ng - 1];
          f(a, g, t, c0, c1, part[k], c0 == 0, c1 == a.cols4);
        }
      }
    }
  }
}

// As the scalar reference: max over |x| (and the floor) skipping NaNs (vmaxps returns its
// second operand when either is NaN), x * id rounded to nearest even, NaN
// to 0, clamped.
float quantize_avx512(const float* x, int64_t cols, int64_t cols4, float amax_floor, uint8_t* act) {
  __m512 m = _mm512_set1_ps(amax_floor > 0.0f ? amax_floor : 0.0f);
  int64_t k = 0;
  for (; k + 16 <= cols; k += 16) m = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(x + k)), m);
  if (k < cols) {
    const __mmask16 tail = static_cast<__mmask16>((1u << (cols - k)) - 1u);
    m = _mm512_max_ps(_mm512_abs_ps(_mm512_maskz_loadu_ps(tail, x + k)), m);
  }
  const float amax = _mm512_reduce_max_ps(m);
  const float sx = amax / 127.0f;
  const float id = sx != 0.0f ? 1.0f / sx : 0.0f;
  const __m512 idv = _mm512_set1_ps(id), lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
  for (k = 0; k < cols; k += 16) {
    const __mmask16 mk = cols - k >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << (cols - k)) - 1u);
    __m512 v = _mm512_roundscale_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(mk, x + k), idv),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    v = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, v, _CMP_ORD_Q), v);
    v = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
    const __m512i q = _mm512_add_epi32(_mm512_cvtps_epi32(v), _mm512_set1_epi32(128));
    _mm_mask_storeu_epi8(act + k, mk, _mm512_cvtepi32_epi8(q));
  }
  for (k = cols; k < cols4 * 4; ++k) act[k] = 128;
  return sx;
}

// The signed codes (nibble - 8) of 64 bytes of W4UnpackFn's layout: the low
// nibbles (the even k group) and the high ones (the odd).
inline void nibble_codes(const uint8_t* p, __m512i& lo, __m512i& hi) {
  const __m512i m = _mm512_set1_epi8(15), eight = _mm512_set1_epi8(8), v = _mm512_loadu_si512(p);
  lo = _mm512_sub_epi8(_mm512_and_si512(v, m), eight);
  hi = _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(v, 4), m), eight);
}

void unpack4_avx512(const uint8_t* nib, int64_t cols4, int8_t* q) {
  for (int64_t c = 0; c < cols4; c += 2) {
    __m512i lo, hi;
    nibble_codes(nib + (c / 2) * 64, lo, hi);
    _mm512_storeu_si512(q + c * 64, lo);
    if (c + 1 < cols4) _mm512_storeu_si512(q + (c + 1) * 64, hi);
  }
}

// W4A8 in place for NT <= 4 tokens, one row group at a time: per 64 bytes
// of nibbles (two k groups of 16 rows), an AND, a shift and two subtracts
// give both groups' signed codes, then 2 NT VPDPBUSD. Four chains of sums
// per token (low / high nibbles of even / odd chunks: one chain would wait
// on VPDPBUSD's latency at every step), added at the end: exact int32, so
// the sums are W8A8's.
template <int NT>
void run4_tokens(const W8A8Args& a, int64_t g0, int64_t g1, int64_t t) {
  const int64_t cols8 = (a.cols4 + 1) / 2, full = a.cols4 / 2;
  const uint8_t* x = a.act + t * a.act_stride;
  const int64_t s = a.act_stride;
  for (int64_t g = g0; g < g1; ++g) {
    const uint8_t* w = a.nib + g * cols8 * 64;
    __m512i c0[NT], c1[NT], c2[NT], c3[NT];
#pragma GCC unroll 4
    for (int i = 0; i < NT; ++i) c0[i] = c1[i] = c2[i] = c3[i] = _mm512_setzero_si512();
    int64_t c = 0;
    for (; c + 2 <= full; c += 2) {
      __m512i l0, h0, l1, h1;
      nibble_codes(w + c * 64, l0, h0);
      nibble_codes(w + c * 64 + 64, l1, h1);
#pragma GCC unroll 4
      for (int i = 0; i < NT; ++i) {
        const uint8_t* xi = x + i * s + 8 * c;
        c0[i] = _mm512_dpbusd_epi32(c0[i], _mm512_set1_epi32(load4(xi)), l0);
        c1[i] = _mm512_dpbusd_epi32(c1[i], _mm512_set1_epi32(load4(xi + 4)), h0);
        c2[i] = _mm512_dpbusd_epi32(c2[i], _mm512_set1_epi32(load4(xi + 8)), l1);
        c3[i] = _mm512_dpbusd_epi32(c3[i], _mm512_set1_epi32(load4(xi + 12)), h1);
      }
    }
    for (; c < cols8; ++c) {  // the last chunk; low nibbles only past cols4
      __m512i lo, hi;
      nibble_codes(w + c * 64, lo, hi);
#pragma GCC unroll 4
      for (int i = 0; i < NT; ++i) {
        const uint8_t* xi = x + i * s + 8 * c;
        c0[i] = _mm512_dpbusd_epi32(c0[i], _mm512_set1_epi32(load4(xi)), lo);
        if (c < full) c1[i] = _mm512_dpbusd_epi32(c1[i], _mm512_set1_epi32(load4(xi + 4)), hi);
      }
    }
    __m512i acc[NT][1];
#pragma GCC unroll 4
    for (int i = 0; i < NT; ++i) {
      acc[i][0] = _mm512_add_epi32(_mm512_add_epi32(c0[i], c1[i]), _mm512_add_epi32(c2[i], c3[i]));
    }
    finish<NT, 1>(a, g, t, acc, nullptr, true, true);
  }
}

void run4_avx512(const W8A8Args& a, int64_t g0, int64_t g1, int64_t t0, int64_t t1) {
  switch (t1 - t0) {
    case 1: return run4_tokens<1>(a, g0, g1, t0);
    case 2: return run4_tokens<2>(a, g0, g1, t0);
    case 3: return run4_tokens<3>(a, g0, g1, t0);
    default: return run4_tokens<4>(a, g0, g1, t0);
  }
}

constexpr W8A8Kernels kTable = {"avx512", run_avx512, quantize_avx512, unpack4_avx512, run4_avx512};

}  // namespace

const W8A8Kernels& w8a8_kernels_avx512() { return kTable; }

}  // namespace tessera::kernels
