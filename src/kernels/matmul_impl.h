// The matmul kernels, written once as templates over vector traits and
// instantiated by each ISA file (matmul_avx2.cc, matmul_avx512.cc) after
// including its traits. Everything has internal linkage (ODR rule, see
// docs/KERNELS.md). Implements the arithmetic contract of matmul_kernels.h.
//
// Quantized types: a tile is 8 weight rows x T tokens. For each block the
// exact int32 dot of every (row, token) pair is formed as 8 lanes whose sum
// is the block's integer dot; an exact hadd tree turns the 8 rows' vectors
// into one vector with one lane per row, which is converted to float and
// accumulated with the block scales (d_w of 8 rows times d_x of the token).
// So the per-element arithmetic is the scalar contract, whatever T, the
// row grouping or the thread split. Integer work uses 256-bit vectors on
// every ISA (one Q8_0/Q4_0 block is 32 bytes); the AVX-512 file swaps in
// vpdpbusd through the dot strategy D.
//
// Float types: a tile is R rows x T tokens, one accumulator vector per
// element with k spread over the lanes, reduced by F::hsum at the end.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/blocks.h"
#include "kernels/matmul_kernels.h"
#include "kernels/simd_avx2.h"

namespace tessera::kernels {
namespace {

inline constexpr int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }

static inline __m256i loadu256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
static inline __m128i loadu128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }
static inline uint16_t load_u16(const void* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// The fp16 at byte offset `off` of each of 8 rows, as 8 floats (lane = row).
static inline __m256 gather_f16x8(const uint8_t* const* rows, size_t off) {
  const __m128i h = _mm_setr_epi16(
      static_cast<short>(load_u16(rows[0] + off)), static_cast<short>(load_u16(rows[1] + off)),
      static_cast<short>(load_u16(rows[2] + off)), static_cast<short>(load_u16(rows[3] + off)),
      static_cast<short>(load_u16(rows[4] + off)), static_cast<short>(load_u16(rows[5] + off)),
      static_cast<short>(load_u16(rows[6] + off)), static_cast<short>(load_u16(rows[7] + off)));
  return _mm256_cvtph_ps(h);
}

// ---- quantized formats ------------------------------------------------------
// Each format: kBlock values in kBytes; kSums integer sums per block (1, or
// 2 for Q4_K's min term) with fp16 scales at kScaleOffset[s]; prep() reads
// one row's block once (shared by all tokens); dot() yields, per sum, int32
// lanes whose total is exact; post() adds the per-token correction that is
// the same for every row (after the lane reduction).

template <class D>
struct FmtQ8_0 {
  static constexpr int kBlock = 32, kBytes = 34, kSums = 1;
  static constexpr size_t kScaleOffset[1] = {0};
  using Prep = typename D::Q8;
  static Prep prep(const uint8_t* blk) { return D::q8_prep(loadu256(blk + 2)); }
  static void dot(const Prep& p, const int8_t* xq, const int16_t*, __m256i* out) {
    out[0] = D::q8_dot(p, loadu256(xq));
  }
  static __m256i post(__m256i s, const int16_t* xs) {
    if constexpr (D::kQ8Offset == 0) {
      return s;
    } else {
      return _mm256_sub_epi32(s, _mm256_set1_epi32(D::kQ8Offset * xs[0]));
    }
  }
};

template <class D>
struct FmtQ4_0 {
  static constexpr int kBlock = 32, kBytes = 18, kSums = 1;
  static constexpr size_t kScaleOffset[1] = {0};
  // Values 0..15 (stored q, the -8 is applied through the token's sum):
  // bytes 0..15 the low nibbles (values 0..15), bytes 16..31 the high ones.
  using Prep = __m256i;
  static Prep prep(const uint8_t* blk) {
    const __m128i v = loadu128(blk + 2);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), _mm256_set1_epi8(0x0f));
  }
  static void dot(const Prep& p, const int8_t* xq, const int16_t*, __m256i* out) {
    out[0] = D::u4_dot(p, loadu256(xq));
  }
  static __m256i post(__m256i s, const int16_t* xs) { return _mm256_sub_epi32(s, _mm256_set1_epi32(8 * xs[0])); }
};

// Q4_K: w = d * sc[s] * q - dmin * m[s] per sub-block s of 32. Sum 0 is
// sum_s sc[s] * dot(q_s, x_s); sum 1 is sum_s m[s] * sum(x_s) (activation
// groups of 32).
struct FmtQ4_K {
  static constexpr int kBlock = 256, kBytes = 144, kSums = 2;
  static constexpr size_t kScaleOffset[2] = {0, 2};
  struct Prep {
    const uint8_t* qs;
    alignas(16) int16_t sc[8];
    alignas(16) int16_t m[8];
  };
  static Prep prep(const uint8_t* blk) {
    // The 12 scale bytes s (at blk + 4; the 16-byte load stays inside the
    // block): sc[j] = s[j] & 63, m[j] = s[j + 4] & 63 for j < 4;
    // sc[j + 4] = (s[j + 8] & 15) | (s[j] >> 6) << 4,
    // m[j + 4] = (s[j + 8] >> 4) | (s[j + 4] >> 6) << 4.
    Prep p;
    const __m128i v = loadu128(blk + 4);
    const __m128i low = _mm_and_si128(v, _mm_set1_epi8(63));  // bytes 0-3 sc[0..3], 4-7 m[0..3]
    const __m128i c = _mm_shuffle_epi32(v, 0xaa);              // s[8..11] in every dword
    const __m128i nib = _mm_unpacklo_epi32(_mm_and_si128(c, _mm_set1_epi8(15)),
                                           _mm_and_si128(_mm_srli_epi16(c, 4), _mm_set1_epi8(15)));
    const __m128i high = _mm_or_si128(nib, _mm_and_si128(_mm_srli_epi16(v, 2), _mm_set1_epi8(0x30)));
    const __m128i bytes = _mm_unpacklo_epi32(low, high);  // sc[0..7], then m[0..7]
    _mm_store_si128(reinterpret_cast<__m128i*>(p.sc), _mm_cvtepu8_epi16(bytes));
    _mm_store_si128(reinterpret_cast<__m128i*>(p.m), _mm_cvtepu8_epi16(_mm_srli_si128(bytes, 8)));
    p.qs = blk + 16;
    return p;
  }
  static void dot(const Prep& p, const int8_t* xq, const int16_t* xs, __m256i* out) {
    dot_bits<false>(p, xq, xs, out);
  }
  // kFifth (Q5_K): p.qs points at 32 bytes of fifth bits, the nibbles follow;
  // the bit of value 64j + i is bit 2j of byte i, of value 64j + 32 + i bit
  // 2j + 1, or-ed in as 16.
  template <bool kFifth>
  static void dot_bits(const Prep& p, const int8_t* xq, const int16_t* xs, __m256i* out) {
    const __m256i mask = _mm256_set1_epi8(0x0f), one = _mm256_set1_epi8(1);
    const uint8_t* qs = kFifth ? p.qs + 32 : p.qs;
    __m256i acc = _mm256_setzero_si256();
    for (int j = 0; j < 4; ++j) {
      const __m256i q = loadu256(qs + 32 * j);
      __m256i lo = _mm256_and_si256(q, mask);
      __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), mask);
      if constexpr (kFifth) {
        const __m256i qh = loadu256(p.qs);
        lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * j), one), 4));
        hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * j + 1), one), 4));
      }
      const __m256i plo = _mm256_maddubs_epi16(lo, loadu256(xq + 64 * j));
      const __m256i phi = _mm256_maddubs_epi16(hi, loadu256(xq + 64 * j + 32));
      acc = _mm256_add_epi32(acc, _mm256_madd_epi16(plo, _mm256_set1_epi16(p.sc[2 * j])));
      acc = _mm256_add_epi32(acc, _mm256_madd_epi16(phi, _mm256_set1_epi16(p.sc[2 * j + 1])));
    }
    out[0] = acc;
    const __m128i m = _mm_load_si128(reinterpret_cast<const __m128i*>(p.m));
    out[1] = _mm256_zextsi128_si256(_mm_madd_epi16(m, loadu128(xs)));
  }
  static __m256i post(__m256i s, const int16_t*) { return s; }
};

// Q5_K: Q4_K with a fifth bit per value from qh (FmtQ4_K::dot_bits). q <= 31,
// so a vpmaddubsw pair stays within 2 * 31 * 127.
struct FmtQ5_K {
  static constexpr int kBlock = 256, kBytes = 176, kSums = 2;
  static constexpr size_t kScaleOffset[2] = {0, 2};
  using Prep = FmtQ4_K::Prep;  // qs points at qh; the nibbles follow at +32
  static Prep prep(const uint8_t* blk) { return FmtQ4_K::prep(blk); }
  static void dot(const Prep& p, const int8_t* xq, const int16_t* xs, __m256i* out) {
    FmtQ4_K::dot_bits<true>(p, xq, xs, out);
  }
  static __m256i post(__m256i s, const int16_t*) { return s; }
};

// Q6_K: w = d * sc[s] * (q - 32) per sub-block s of 16, q 6-bit. Sum 0 is
// sum_s sc[s] * (dot(q_s, x_s) - 32 * sum(x_s)) (activation groups of 16).
struct FmtQ6_K {
  static constexpr int kBlock = 256, kBytes = 210, kSums = 1;
  static constexpr size_t kScaleOffset[1] = {208};
  struct Prep {
    const uint8_t* q;  // block start: ql[128], qh[64], scales[16]
    __m256i sc16;      // the 16 scales as int16
    __m256i scv[8];    // for value vector v: [sc[2v] x 8 | sc[2v+1] x 8]
  };
  static Prep prep(const uint8_t* blk) { return prep_scales(blk, loadu128(blk + 192)); }
  // p.q = blk and the vectors of the 16 int8 scales s8.
  static Prep prep_scales(const uint8_t* blk, __m128i s8) {
    Prep p;
    p.q = blk;
    p.sc16 = _mm256_cvtepi8_epi16(s8);
    // Word 2j of the low lane / word 2j+1 of the high lane, broadcast.
    const __m256i lo_words = _mm256_broadcastsi128_si256(_mm256_castsi256_si128(p.sc16));
    const __m256i hi_words = _mm256_broadcastsi128_si256(_mm256_extracti128_si256(p.sc16, 1));
    for (int j = 0; j < 4; ++j) {
      const char a = static_cast<char>(4 * j), b = static_cast<char>(4 * j + 2);
      const __m256i ctrl = _mm256_setr_epi8(a, a + 1, a, a + 1, a, a + 1, a, a + 1, a, a + 1, a, a + 1, a, a + 1,
                                            a, a + 1, b, b + 1, b, b + 1, b, b + 1, b, b + 1, b, b + 1, b, b + 1,
                                            b, b + 1, b, b + 1);
      p.scv[j] = _mm256_shuffle_epi8(lo_words, ctrl);
      p.scv[4 + j] = _mm256_shuffle_epi8(hi_words, ctrl);
    }
    return p;
  }
  static void dot(const Prep& p, const int8_t* xq, const int16_t* xs, __m256i* out) {
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    __m256i acc = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i ql0 = loadu256(p.q + 64 * h);
      const __m256i ql1 = loadu256(p.q + 64 * h + 32);
      const __m256i qh = loadu256(p.q + 128 + 32 * h);
      __m256i q[4];
      q[0] = _mm256_or_si256(_mm256_and_si256(ql0, m4),
                             _mm256_slli_epi16(_mm256_and_si256(qh, _mm256_set1_epi8(0x03)), 4));
      q[1] = _mm256_or_si256(_mm256_and_si256(ql1, m4),
                             _mm256_slli_epi16(_mm256_and_si256(qh, _mm256_set1_epi8(0x0c)), 2));
      q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                             _mm256_and_si256(qh, _mm256_set1_epi8(0x30)));
      q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                             _mm256_srli_epi16(_mm256_and_si256(qh, _mm256_set1_epi8(static_cast<char>(0xc0))), 2));
      for (int i = 0; i < 4; ++i) {
        const __m256i pr = _mm256_maddubs_epi16(q[i], loadu256(xq + 128 * h + 32 * i));
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(pr, p.scv[4 * h + i]));
      }
    }
    const __m256i corr = _mm256_madd_epi16(p.sc16, loadu256(xs));  // sum_s sc[s] * sum(x_s)
    out[0] = _mm256_sub_epi32(acc, _mm256_slli_epi32(corr, 5));
  }
  static __m256i post(__m256i s, const int16_t*) { return s; }
};

// Q3_K: w = d * sc[s] * (q - 4) per sub-block s of 16 (sc signed, q 3-bit as
// its 2 low bits and a third bit: blocks.h). Sum 0 is sum_s sc[s] *
// (dot(q_s, x_s) - 4 * sum(x_s)), like Q6_K's with the offset 4.
struct FmtQ3_K {
  static constexpr int kBlock = 256, kBytes = 110, kSums = 1;
  static constexpr size_t kScaleOffset[1] = {108};
  using Prep = FmtQ6_K::Prep;  // q: block start (hmask[32], qs[64])
  static Prep prep(const uint8_t* blk) {
    // The 16 scales from 12 bytes s: the nibbles of s[0..7] (low: scales
    // 0-7, high: 8-15) and, as their top two bits, bit pairs of s[8..11].
    uint32_t a[3], sc[4];
    std::memcpy(a, blk + 96, 12);
    sc[0] = (a[0] & 0x0f0f0f0f) | (a[2] & 0x03030303) << 4;
    sc[1] = (a[1] & 0x0f0f0f0f) | ((a[2] >> 2) & 0x03030303) << 4;
    sc[2] = ((a[0] >> 4) & 0x0f0f0f0f) | ((a[2] >> 4) & 0x03030303) << 4;
    sc[3] = ((a[1] >> 4) & 0x0f0f0f0f) | ((a[2] >> 6) & 0x03030303) << 4;
    const __m128i s8 = _mm_sub_epi8(loadu128(sc), _mm_set1_epi8(32));
    return FmtQ6_K::prep_scales(blk, s8);
  }
  static void dot(const Prep& p, const int8_t* xq, const int16_t* xs, __m256i* out) {
    const __m256i m3 = _mm256_set1_epi8(3), m4 = _mm256_set1_epi8(4);
    const __m256i hm = loadu256(p.q);
    __m256i acc = _mm256_setzero_si256();
    for (int n = 0; n < 2; ++n) {
      const __m256i qs = loadu256(p.q + 32 + 32 * n);
      for (int j = 0; j < 4; ++j) {
        // Value 128 n + 32 j + l: bits 2j of qs[32 n + l], bit 4 n + j of
        // hm[l] moved to bit 2 (a 16-bit shift of at most 5 keeps each
        // byte's bit 2 inside its byte).
        const int b = 4 * n + j;
        const __m256i third = b >= 2 ? _mm256_and_si256(_mm256_srli_epi16(hm, b - 2), m4)
                                     : _mm256_and_si256(_mm256_slli_epi16(hm, 2 - b), m4);
        const __m256i q = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(qs, 2 * j), m3), third);
        const __m256i pr = _mm256_maddubs_epi16(q, loadu256(xq + 128 * n + 32 * j));
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(pr, p.scv[b]));
      }
    }
    const __m256i corr = _mm256_madd_epi16(p.sc16, loadu256(xs));  // sum_s sc[s] * sum(x_s)
    out[0] = _mm256_sub_epi32(acc, _mm256_slli_epi32(corr, 2));
  }
  static __m256i post(__m256i s, const int16_t*) { return s; }
};

#include "kernels/matmul_fmt_more.h"

// ---- quantized tile: 8 rows x T tokens ------------------------------------------

struct ActPtrs {
  const int8_t* q;
  const float* d;
  const int16_t* sum;
};

static inline ActPtrs act_ptrs(const MatmulArgs& a, int64_t t) {
  const uint8_t* row = a.act + static_cast<size_t>(t) * a.act_layout.row_bytes;
  return {reinterpret_cast<const int8_t*>(row), reinterpret_cast<const float*>(row + a.act_layout.d_offset),
          reinterpret_cast<const int16_t*>(row + a.act_layout.sum_offset)};
}

// [a0..a7], [b0..b7] (per 128-bit lane) -> pairwise sums, exact.
static inline __m256i hadd32(__m256i a, __m256i b) { return _mm256_hadd_epi32(a, b); }

template <class Fmt, int T, int kPrefetch>
static inline void qtile8(const uint8_t* const* rows, int64_t nb, const ActPtrs* x, int group,
                          float* const* y, int nvalid) {
  constexpr int S = Fmt::kSums;
  const int sums_per_block = Fmt::kBlock / group;
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const size_t off = static_cast<size_t>(b) * Fmt::kBytes;
    if constexpr (kPrefetch > 0) {
      // Eight interleaved row streams are more than the hardware
      // prefetchers follow well; fetch each row kPrefetch bytes ahead.
      for (int r = 0; r < 8; ++r) _mm_prefetch(reinterpret_cast<const char*>(rows[r] + off + kPrefetch), _MM_HINT_T0);
    }
    // quad[h][s][t]: lanes 0-3 = rows 4h..4h+3 (low 128 bits of the k
    // range), lanes 4-7 the same rows' high halves (see the final step).
    __m256i quad[2][S][T];
    for (int h = 0; h < 2; ++h) {
      __m256i pair[2][S][T];
      for (int p = 0; p < 2; ++p) {
        const int r = 4 * h + 2 * p;
        const typename Fmt::Prep pa = Fmt::prep(rows[r] + off);
        const typename Fmt::Prep pb = Fmt::prep(rows[r + 1] + off);
        for (int t = 0; t < T; ++t) {
          __m256i va[S], vb[S];
          const int8_t* xq = x[t].q + b * Fmt::kBlock;
          const int16_t* xs = x[t].sum + b * sums_per_block;
          Fmt::dot(pa, xq, xs, va);
          Fmt::dot(pb, xq, xs, vb);
          for (int s = 0; s < S; ++s) pair[p][s][t] = hadd32(va[s], vb[s]);
        }
      }
      for (int s = 0; s < S; ++s)
        for (int t = 0; t < T; ++t) quad[h][s][t] = hadd32(pair[0][s][t], pair[1][s][t]);
    }
    __m256 wscale[S];
    for (int s = 0; s < S; ++s) wscale[s] = load_wscale<Fmt>(rows, off + Fmt::kScaleOffset[s]);
    for (int t = 0; t < T; ++t) {
      const __m256 dx = _mm256_set1_ps(x[t].d[b]);
      for (int s = 0; s < S; ++s) {
        // quad[0] = rows 0-3 in each 128-bit half, quad[1] = rows 4-7:
        // adding the low halves' and high halves' lanes gives rows 0..7.
        __m256i v = _mm256_add_epi32(_mm256_permute2x128_si256(quad[0][s][t], quad[1][s][t], 0x20),
                                     _mm256_permute2x128_si256(quad[0][s][t], quad[1][s][t], 0x31));
        if (s == 0) v = Fmt::post(v, x[t].sum + b * sums_per_block);
        const __m256 scale = _mm256_mul_ps(wscale[s], dx);
        acc[t] = s == 0 ? _mm256_fmadd_ps(_mm256_cvtepi32_ps(v), scale, acc[t])
                        : _mm256_fnmadd_ps(_mm256_cvtepi32_ps(v), scale, acc[t]);
      }
    }
  }
  for (int t = 0; t < T; ++t) {
    if (nvalid == 8) {
      _mm256_storeu_ps(y[t], acc[t]);
    } else {
      Avx2F::store_tail(y[t], acc[t], nvalid);
    }
  }
}

// Calls tile(rt, nvalid, x, y, n) for every tile of kRows rows rt of [r0,
// r1) (the last has nvalid rows) and every group of n <= max_tokens(nvalid)
// <= kMaxTokens tokens, tokens in chunks whose activations stay in L2 while
// the row tiles sweep them.
template <class Cfg, int kRows, int kMaxTokens, class MaxTokens, class Tile>
static inline void sweep(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1, MaxTokens max_tokens,
                         Tile tile) {
  const int64_t chunk = imin(t1 - t0, static_cast<int64_t>(Cfg::kActChunkBytes / a.act_layout.row_bytes) + 1);
  for (int64_t tc = t0; tc < t1; tc += chunk) {
    const int64_t tc1 = imin(t1, tc + chunk);
    for (int64_t rt = r0; rt < r1; rt += kRows) {
      const int nvalid = static_cast<int>(imin(kRows, r1 - rt));
      const int most = max_tokens(nvalid);
      for (int64_t t = tc; t < tc1;) {
        const int n = static_cast<int>(imin(most, tc1 - t));
        ActPtrs x[kMaxTokens];
        float* y[kMaxTokens];
        for (int i = 0; i < n; ++i) {
          x[i] = act_ptrs(a, t + i);
          y[i] = a.y + (t + i) * a.y_stride + rt;
        }
        tile(rt, nvalid, x, y, n);
        t += n;
      }
    }
  }
}

// The 8-row tiles: up to Cfg::kMaxT tokens each.
template <class Cfg, class Tile>
static inline void sweep_tiles(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1, Tile tile) {
  sweep<Cfg, kRowTile, Cfg::kMaxT>(a, r0, r1, t0, t1, [](int) { return Cfg::kMaxT; }, tile);
}

template <class Fmt, class Cfg>
static void qrange(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  const int64_t nb = a.cols / Fmt::kBlock;
  const int group = a.act_layout.group;
  sweep_tiles<Cfg>(a, r0, r1, t0, t1, [&](int64_t rt, int nvalid, const ActPtrs* x, float* const* y, int n) {
    const uint8_t* rows[8];
    for (int i = 0; i < 8; ++i) {
      const int64_t r = imin(rt + i, r1 - 1);
      rows[i] = a.w + static_cast<size_t>(a.row_index != nullptr ? a.row_index[r] : r) * a.row_bytes;
    }
    if constexpr (Cfg::kPrefetch > 0) {
      // Gathered rows: the next tile's rows start where no stream runs, so
      // their first kPrefetch bytes are fetched now (the kernel then runs
      // kPrefetch ahead in each).
      if (a.row_index != nullptr && rt + 8 < r1) {
        for (int i = 0; i < 8; ++i) {
          const char* p = reinterpret_cast<const char*>(a.w + static_cast<size_t>(a.row_index[imin(rt + 8 + i, r1 - 1)]) * a.row_bytes);
          for (int off = 0; off < Cfg::kPrefetch; off += 64) _mm_prefetch(p + off, _MM_HINT_T0);
        }
      }
    }
    switch (n) {
      case 1: qtile8<Fmt, 1, Cfg::kPrefetch>(rows, nb, x, group, y, nvalid); break;
      case 2: qtile8<Fmt, 2, Cfg::kPrefetch>(rows, nb, x, group, y, nvalid); break;
      case 3: qtile8<Fmt, 3, Cfg::kPrefetch>(rows, nb, x, group, y, nvalid); break;
      default: qtile8<Fmt, 4, Cfg::kPrefetch>(rows, nb, x, group, y, nvalid); break;
    }
  });
}

// ---- packed Q8_0 / Q4_0 tile: 8 rows x T tokens, lane r = row r ------------------
// Layout in matmul_kernels.h. Each 32-byte load feeds every token through a
// broadcast of 4 activation bytes; no reduction tree, scales in one load.
// Same exact integer sums and float steps as qtile8, so the same bits.

static inline __m256i bcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// The frame every packed tile shares: G row groups (8 rows each,
// consecutive in the packed layout) x T tokens of float accumulators, the
// blocks walked in order with each group's stream prefetched kPrefetch
// bytes ahead (0: none), and the stores (the last group has `nvalid` rows).
// block(blk, b, acc) adds block b of every group (blk[g]) into acc.
template <int T, int G, size_t kBytes, int kPrefetch, class Block>
__attribute__((always_inline)) static inline void packed_frame(const uint8_t* group, size_t group_bytes, int64_t nb,
                                                               float* const* y, int nvalid, Block block) {
  __m256 acc[G][T];
  for (int g = 0; g < G; ++g) {
    for (int t = 0; t < T; ++t) acc[g][t] = _mm256_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk[G];
    for (int g = 0; g < G; ++g) {
      blk[g] = group + g * group_bytes + static_cast<size_t>(b) * kBytes;
      if constexpr (kPrefetch > 0) {
        for (size_t o = 0; o < kBytes; o += 64) {
          _mm_prefetch(reinterpret_cast<const char*>(blk[g] + kPrefetch + o), _MM_HINT_T0);
        }
      }
    }
    block(blk, b, acc);
  }
  for (int g = 0; g < G; ++g) {
    for (int t = 0; t < T; ++t) {
      if (g < G - 1 || nvalid == 8) {
        _mm256_storeu_ps(y[t] + 8 * g, acc[g][t]);
      } else {
        Avx2F::store_tail(y[t] + 8 * g, acc[g][t], nvalid);
      }
    }
  }
}

// G row groups (8 rows each, consecutive in the packed layout) x T tokens.
// One token (decode) takes two groups at a time so that each activation
// broadcast feeds 16 rows: decode's kernel issues fewer loads per weight
// byte, which is what lets two cores keep DRAM busy. All but the last group
// are full; the last has `nvalid` rows. kPrefetch: bytes ahead of each
// group's stream to prefetch (0: none), so that the misses of a decode step
// are in flight while the previous bytes are multiplied.
// K: Q8_0, Q4_0, or the nibble-table kinds (IQ4_NL, MXFP4: Q4_0's layout,
// each nibble looked up in the format's int8 levels, then Q8_0's signed dot),
// or Q4_1 / Q5_0 / Q5_1 (Q4_0's nibbles, the fifth bits or'ed in, the min
// added as m * sum(x)).
template <class D, Packed K, int T, int G, int kPrefetch>
static inline void ptile(const uint8_t* group, size_t group_bytes, int64_t nb, const ActPtrs* x, float* const* y,
                         int nvalid) {
  constexpr bool kLut = K == Packed::kIQ4_NL || K == Packed::kMXFP4;
  constexpr bool kQ4 = K == Packed::kQ4_0 || K == Packed::kQ4_1 || K == Packed::kQ5_0 || K == Packed::kQ5_1;
  constexpr bool kMin = K == Packed::kQ4_1 || K == Packed::kQ5_1, kFifth = K == Packed::kQ5_0 || K == Packed::kQ5_1;
  constexpr size_t kQh = 16 + (kMin ? 16 : 0), kVal = kQh + (kFifth ? 32 : 0);
  constexpr size_t kBytes = kPackedBytes[static_cast<int>(K)];
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  const __m256i lut = kLut ? _mm256_broadcastsi128_si256(loadu128(K == Packed::kMXFP4 ? kMXFP4Values : kIQ4Values))
                           : _mm256_setzero_si256();
  const auto block = [&](const uint8_t* const* blk, int64_t b, __m256(&acc)[G][T]) __attribute__((always_inline)) {
    __m256i isum[G][T];
    if constexpr (kQ4) {
      // kPairs: the 8 vpmaddubsw results of a block are summed as int16
      // pairs and widened once: |pair| <= 2 * 15 * 127 = 3810 (activations
      // are clamped to +-127), so 8 of them stay within 30480 < 32767 —
      // exact, and one vpmaddwd per block instead of eight. (Five-bit
      // values, up to 2 * 31 * 127 a pair, are widened at every dot.)
      constexpr bool kPairs = D::kU4PairsInInt16 && !kFifth;
      __m256i part[G][T];  // int16 pair sums (kPairs) or int32 sums
      for (int g = 0; g < G; ++g) {
        for (int t = 0; t < T; ++t) part[g][t] = _mm256_setzero_si256();
      }
      for (int h = 0; h < 4; ++h) {
        __m256i xl[T], xh[T];
        for (int t = 0; t < T; ++t) {
          xl[t] = bcast4(x[t].q + b * 32 + 4 * h);
          xh[t] = bcast4(x[t].q + b * 32 + 16 + 4 * h);
        }
        for (int g = 0; g < G; ++g) {
          const __m256i v = loadu256(blk[g] + kVal + 32 * h);
          __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
          if constexpr (kFifth) {
            // Bit h of byte 4r + i: value 4h + i's fifth bit; bit 4 + h: value 16 + 4h + i's.
            const __m256i qh = loadu256(blk[g] + kQh), one = _mm256_set1_epi8(1);
            lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, h), one), 4));
            hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4 + h), one), 4));
          }
          for (int t = 0; t < T; ++t) {
            if constexpr (kPairs) {
              part[g][t] = _mm256_add_epi16(part[g][t], _mm256_maddubs_epi16(lo, xl[t]));
              part[g][t] = _mm256_add_epi16(part[g][t], _mm256_maddubs_epi16(hi, xh[t]));
            } else {
              part[g][t] = D::u4_dot_acc(part[g][t], lo, xl[t]);
              part[g][t] = D::u4_dot_acc(part[g][t], hi, xh[t]);
            }
          }
        }
      }
      for (int g = 0; g < G; ++g) {
        for (int t = 0; t < T; ++t) {
          isum[g][t] = kPairs ? _mm256_madd_epi16(part[g][t], _mm256_set1_epi16(1)) : part[g][t];
        }
      }
    } else if constexpr (kLut) {
      for (int g = 0; g < G; ++g) {
        for (int t = 0; t < T; ++t) isum[g][t] = _mm256_setzero_si256();
      }
      for (int h = 0; h < 4; ++h) {
        __m256i xl[T], xh[T];
        for (int t = 0; t < T; ++t) {
          xl[t] = bcast4(x[t].q + b * 32 + 4 * h);
          xh[t] = bcast4(x[t].q + b * 32 + 16 + 4 * h);
        }
        for (int g = 0; g < G; ++g) {
          const __m256i v = loadu256(blk[g] + 16 + 32 * h);
          const typename D::Q8 lo = D::q8_prep(_mm256_shuffle_epi8(lut, _mm256_and_si256(v, m4)));
          const typename D::Q8 hi = D::q8_prep(_mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4)));
          for (int t = 0; t < T; ++t) {
            isum[g][t] = D::q8_dot_acc(isum[g][t], lo, xl[t]);
            isum[g][t] = D::q8_dot_acc(isum[g][t], hi, xh[t]);
          }
        }
      }
    } else {
      for (int g = 0; g < G; ++g) {
        for (int t = 0; t < T; ++t) isum[g][t] = _mm256_setzero_si256();
      }
      for (int j = 0; j < 8; ++j) {
        __m256i xj[T];
        for (int t = 0; t < T; ++t) xj[t] = bcast4(x[t].q + b * 32 + 4 * j);
        for (int g = 0; g < G; ++g) {
          const typename D::Q8 w = D::q8_prep(loadu256(blk[g] + 16 + 32 * j));
          for (int t = 0; t < T; ++t) isum[g][t] = D::q8_dot_acc(isum[g][t], w, xj[t]);
        }
      }
    }
    for (int t = 0; t < T; ++t) {
      const int offset = K == Packed::kQ4_0 ? 8 : K == Packed::kQ5_0 ? 16 : kMin ? 0 : D::kQ8Offset;
      const __m256 d = _mm256_set1_ps(x[t].d[b]);
      const __m256i off = _mm256_set1_epi32(offset * x[t].sum[b]);
      for (int g = 0; g < G; ++g) {
        const __m256i v = offset == 0 ? isum[g][t] : _mm256_sub_epi32(isum[g][t], off);
        const __m256 ws = _mm256_cvtph_ps(loadu128(blk[g]));
        acc[g][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(v), _mm256_mul_ps(ws, d), acc[g][t]);
        if constexpr (kMin) {  // + sum(x) * fl(m * dx)
          const __m256 wm = _mm256_cvtph_ps(loadu128(blk[g] + 16));
          acc[g][t] = _mm256_fmadd_ps(_mm256_set1_ps(static_cast<float>(x[t].sum[b])), _mm256_mul_ps(wm, d), acc[g][t]);
        }
      }
    }
  };
  packed_frame<T, G, kBytes, kPrefetch>(group, group_bytes, nb, y, nvalid, block);
}

// ---- packed Q4_K tile: 8 rows x T tokens, lane r = row r -----------------------
// Layout in matmul_kernels.h. Per super-block and sub-block j, the exact
// dot of each row with the token forms in one int32 lane (vpdpbusd, or on
// plain AVX2 int16 pairs: 8 vpmaddubsw results of at most 2 * 15 * 127
// stay within 30480) and is multiplied by that row's 6-bit scale, so the
// super-block's sum_j sc_j * dot_j is exact in int32 (at most 8 * 63 * 32 *
// 15 * 127 < 2^25); the min term sum_j m_j * sum(x_j) is a vpmaddwd of the
// unpacked mins with the token's group sums. Then the two float steps of
// the contract, once per 256 values instead of once per 32 as in Q4_0.

static inline __m256i scale_lanes(const uint8_t* p, bool pairs) {
  const __m256i s = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  return pairs ? _mm256_or_si256(s, _mm256_slli_epi32(s, 16)) : s;  // pairs: (sc, sc) as int16
}

template <class D, bool kFifth, int T, int G, int kPrefetch>
static inline void ktile(const uint8_t* group, size_t group_bytes, int64_t nb, const ActPtrs* x, float* const* y,
                         int nvalid) {
  constexpr size_t kBytes = kFifth ? kPackedQ5_KBlock : kPackedQ4_KBlock;
  constexpr bool kPairs = D::kU4PairsInInt16;
  // int16 pair sums fold into int32 every kFold loads: 8 * 2 * 15 * 127 and
  // 4 * 2 * 31 * 127 (Q5_K) stay within int16.
  constexpr int kFold = kFifth ? 4 : 8;
  // With int32 dots (not kPairs) the high nibbles may stay at 16 q: a
  // sub-block's dot is then at most 32 * 240 * 127 < 2^22, exact.
  constexpr bool kHigh16 = !kPairs && !kFifth;
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  const auto block = [&](const uint8_t* const* blk, int64_t b, __m256(&acc)[G][T]) __attribute__((always_inline)) {
    __m256i isum[G][T];
    for (int g = 0; g < G; ++g) {
      for (int t = 0; t < T; ++t) isum[g][t] = _mm256_setzero_si256();
    }
    for (int p = 0; p < 4; ++p) {
      __m256i sl[G], sh[G];  // the scales of sub-blocks 2p and 2p + 1
      for (int g = 0; g < G; ++g) {
        sl[g] = scale_lanes(blk[g] + 32 + 8 * (2 * p), kPairs);
        sh[g] = scale_lanes(blk[g] + 32 + 8 * (2 * p + 1), kPairs);
      }
      __m256i lo_part[G][T], hi_part[G][T];
      for (int g = 0; g < G; ++g) {
        for (int t = 0; t < T; ++t) lo_part[g][t] = hi_part[g][t] = _mm256_setzero_si256();
      }
      for (int h = 0; h < 8; ++h) {
        __m256i xl[T], xh[T];
        for (int t = 0; t < T; ++t) {
          xl[t] = bcast4(x[t].q + b * 256 + 64 * p + 4 * h);
          xh[t] = bcast4(x[t].q + b * 256 + 64 * p + 32 + 4 * h);
        }
        for (int g = 0; g < G; ++g) {
          const __m256i v = loadu256(blk[g] + 160 + 256 * p + 32 * h);
          // kHigh16: the high nibbles stay in place (16 q): one and instead
          // of a shift and an and, the 16 divided out (exactly) at the fold.
          __m256i lo = _mm256_and_si256(v, m4);
          __m256i hi = kHigh16 ? _mm256_and_si256(v, _mm256_set1_epi8(static_cast<char>(0xf0)))
                               : _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
          if constexpr (kFifth) {  // bits 2p (low nibbles' values) and 2p + 1 become bit 4
            const __m256i qh = loadu256(blk[g] + kPackedQ4_KBlock + 32 * h);
            const __m256i bl = _mm256_and_si256(qh, _mm256_set1_epi8(static_cast<char>(1 << (2 * p))));
            const __m256i bh = _mm256_and_si256(qh, _mm256_set1_epi8(static_cast<char>(1 << (2 * p + 1))));
            lo = _mm256_or_si256(lo, 2 * p <= 4 ? _mm256_slli_epi16(bl, 4 - 2 * p) : _mm256_srli_epi16(bl, 2 * p - 4));
            hi = _mm256_or_si256(hi, 2 * p + 1 <= 4 ? _mm256_slli_epi16(bh, 3 - 2 * p)
                                                    : _mm256_srli_epi16(bh, 2 * p - 3));
          }
          for (int t = 0; t < T; ++t) {
            if constexpr (kPairs) {
              lo_part[g][t] = _mm256_add_epi16(lo_part[g][t], _mm256_maddubs_epi16(lo, xl[t]));
              hi_part[g][t] = _mm256_add_epi16(hi_part[g][t], _mm256_maddubs_epi16(hi, xh[t]));
            } else {
              lo_part[g][t] = D::u4_dot_acc(lo_part[g][t], lo, xl[t]);
              hi_part[g][t] = D::u4_dot_acc(hi_part[g][t], hi, xh[t]);
            }
          }
        }
        if (!kPairs ? h == 7 : h % kFold == kFold - 1) {
          for (int g = 0; g < G; ++g) {
            for (int t = 0; t < T; ++t) {
              if constexpr (kPairs) {
                isum[g][t] = _mm256_add_epi32(isum[g][t], _mm256_madd_epi16(lo_part[g][t], sl[g]));
                isum[g][t] = _mm256_add_epi32(isum[g][t], _mm256_madd_epi16(hi_part[g][t], sh[g]));
              } else {
                const __m256i hp = kHigh16 ? _mm256_srai_epi32(hi_part[g][t], 4) : hi_part[g][t];
                isum[g][t] = _mm256_add_epi32(isum[g][t], _mm256_mullo_epi32(lo_part[g][t], sl[g]));
                isum[g][t] = _mm256_add_epi32(isum[g][t], _mm256_mullo_epi32(hp, sh[g]));
              }
              lo_part[g][t] = hi_part[g][t] = _mm256_setzero_si256();
            }
          }
        }
      }
    }
    for (int g = 0; g < G; ++g) {
      __m256i mins[4];  // int16 pairs (m_r[2i], m_r[2i + 1]) in lane r
      for (int i = 0; i < 4; ++i) mins[i] = _mm256_cvtepu8_epi16(loadu128(blk[g] + 96 + 16 * i));
      const __m256 wd = _mm256_cvtph_ps(loadu128(blk[g])), wmin = _mm256_cvtph_ps(loadu128(blk[g] + 16));
      for (int t = 0; t < T; ++t) {
        const int8_t* xs = reinterpret_cast<const int8_t*>(x[t].sum + b * 8);
        __m256i msum = _mm256_madd_epi16(mins[0], bcast4(xs));
        for (int i = 1; i < 4; ++i) msum = _mm256_add_epi32(msum, _mm256_madd_epi16(mins[i], bcast4(xs + 4 * i)));
        const __m256 dx = _mm256_set1_ps(x[t].d[b]);
        acc[g][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[g][t]), _mm256_mul_ps(wd, dx), acc[g][t]);
        acc[g][t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum), _mm256_mul_ps(wmin, dx), acc[g][t]);
      }
    }
  };
  packed_frame<T, G, kBytes, kPrefetch>(group, group_bytes, nb, y, nvalid, block);
}

// ---- packed Q6_K tile: 8 rows x T tokens, lane r = row r -----------------------
// Layout in matmul_kernels.h. Per sub-block s of 16 values the exact dot
// of each row's 6-bit q (0..63, the -32 left out) with the token forms in
// one int32 lane and is multiplied by the row's int8 scale (vpdpbusd then
// vpmulld; on plain AVX2 each vpmaddubsw pair, at most 2 * 63 * 127, goes
// through vpmaddwd with the scale), so sum_s sc_s * dot_s is exact in int32
// (|.| <= 16 * 128 * 16 * 63 * 127 < 2^29); the -32 is one vpmaddwd of the
// scale pairs with the token's group sums: sum_s sc_s * sum(x_s), times 32.
// Bytes V_k (k < 3) hold value j = k in their low 6 bits and two bits of
// value j = 3 in their top 2. One token with int32 dots (kSplit) takes the
// top bits as they are, V_k & 0xc0 = 64 t_k, in three more dots:
// dot(q_3, x) = (dot(64 t_0, x) + 4 dot(64 t_1, x) + 16 dot(64 t_2, x)) / 64,
// exact; otherwise q_3 is assembled from the three bytes once per load and
// shared by the tokens.

// The int8 scale of sub-block 2i + e of each row as int32 lanes, from the
// pairs (sc_r[2i], sc_r[2i + 1]) widened to int16 (lane r = one int32);
// kPairs: as int16 pairs (sc, sc).
static inline __m256i q6_scale(const uint8_t* blk, int sb, bool pairs) {
  const __m256i w = _mm256_cvtepi8_epi16(loadu128(blk + 16 + 16 * (sb / 2)));
  const __m256i s32 = sb % 2 == 0 ? _mm256_srai_epi32(_mm256_slli_epi32(w, 16), 16) : _mm256_srai_epi32(w, 16);
  return pairs ? _mm256_or_si256(_mm256_and_si256(s32, _mm256_set1_epi32(0xffff)), _mm256_slli_epi32(s32, 16)) : s32;
}

// q_3 from the top bits of the three bytes (16-bit shifts; the bits that
// cross from the neighbouring byte are masked off).
static inline __m256i q6_fourth(__m256i v0, __m256i v1, __m256i v2) {
  const __m256i a = _mm256_and_si256(_mm256_srli_epi16(v0, 6), _mm256_set1_epi8(0x03));
  const __m256i b = _mm256_and_si256(_mm256_srli_epi16(v1, 4), _mm256_set1_epi8(0x0c));
  const __m256i c = _mm256_and_si256(_mm256_srli_epi16(v2, 2), _mm256_set1_epi8(0x30));
  return _mm256_or_si256(_mm256_or_si256(a, b), c);
}

// The int8-scaled sub-blocks of a Q6_K-like packed block (Q6_K, Q3_K):
// sub-blocks 8n + 2j + half (j < 4), whose values 128n + 32j + 4q + i
// (q = 4 half .. 4 half + 3) are the unsigned bytes value(g, q, j) of row
// group g. Each sub-block's exact dot with the token, times the row's
// scale, is added to isum (vpdpbusd then vpmulld; on plain AVX2 each
// vpmaddubsw pair goes through vpmaddwd with the scale). Two values j at a
// time ({0, 2}, then {1, 3}) keep the tile's partial sums in registers.
template <class D, int T, int G, class Value>
static inline __attribute__((always_inline)) void sub_block_dots(const uint8_t* const* blk, const ActPtrs* x, int64_t b,
                                                                 int n, int half, __m256i (&isum)[G][T], Value value) {
  constexpr bool kPairs = D::kU4PairsInInt16;
  #pragma GCC unroll 8
  for (int c = 0; c < 2; ++c) {
    __m256i sc[G][2], part[G][2][T];
    #pragma GCC unroll 8
    for (int g = 0; g < G; ++g) {
      #pragma GCC unroll 8
      for (int k = 0; k < 2; ++k) {
        sc[g][k] = q6_scale(blk[g], 8 * n + 2 * (c + 2 * k) + half, kPairs);
        #pragma GCC unroll 8
        for (int t = 0; t < T; ++t) part[g][k][t] = _mm256_setzero_si256();
      }
    }
    #pragma GCC unroll 8
    for (int q = 4 * half; q < 4 * half + 4; ++q) {
      __m256i v[G][2];
      #pragma GCC unroll 8
      for (int g = 0; g < G; ++g) {
        #pragma GCC unroll 8
        for (int k = 0; k < 2; ++k) v[g][k] = value(g, q, c + 2 * k);
      }
      #pragma GCC unroll 8
      for (int k = 0; k < 2; ++k) {
        #pragma GCC unroll 8
        for (int t = 0; t < T; ++t) {
          const __m256i xb = bcast4(x[t].q + b * 256 + 128 * n + 32 * (c + 2 * k) + 4 * q);
          #pragma GCC unroll 8
          for (int g = 0; g < G; ++g) {
            if constexpr (kPairs) {
              part[g][k][t] =
                  _mm256_add_epi32(part[g][k][t], _mm256_madd_epi16(_mm256_maddubs_epi16(v[g][k], xb), sc[g][k]));
            } else {
              part[g][k][t] = D::u4_dot_acc(part[g][k][t], v[g][k], xb);
            }
          }
        }
      }
    }
    #pragma GCC unroll 8
    for (int g = 0; g < G; ++g) {
      #pragma GCC unroll 8
      for (int k = 0; k < 2; ++k) {
        #pragma GCC unroll 8
        for (int t = 0; t < T; ++t) {
          isum[g][t] = _mm256_add_epi32(isum[g][t], kPairs ? part[g][k][t] : _mm256_mullo_epi32(part[g][k][t], sc[g][k]));
        }
      }
    }
  }
}

// The end of a Q6_K-like block: the values' offset (2^kShift: 32 for Q6_K,
// 4 for Q3_K) taken out as sum_s sc_s * sum(x_s) (one vpmaddwd of the
// scale pairs with the token's group sums per pair), then acc += isum * d *
// dx.
template <int T, int G, int kShift>
static inline __attribute__((always_inline)) void add_sub_block_sums(const uint8_t* const* blk, const ActPtrs* x,
                                                                     int64_t b, const __m256i (&isum)[G][T],
                                                                     __m256 (&acc)[G][T]) {
  #pragma GCC unroll 8
  for (int g = 0; g < G; ++g) {
    const __m256 wd = _mm256_cvtph_ps(loadu128(blk[g]));
    #pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const int8_t* xs = reinterpret_cast<const int8_t*>(x[t].sum + b * 16);
      __m256i corr = _mm256_setzero_si256();  // sum_s sc_s * sum(x_s)
      for (int i = 0; i < 8; ++i) {
        const __m256i pairs = _mm256_cvtepi8_epi16(loadu128(blk[g] + 16 + 16 * i));
        corr = _mm256_add_epi32(corr, _mm256_madd_epi16(pairs, bcast4(xs + 4 * i)));
      }
      const __m256i v = _mm256_sub_epi32(isum[g][t], _mm256_slli_epi32(corr, kShift));
      acc[g][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(v), _mm256_mul_ps(wd, _mm256_set1_ps(x[t].d[b])), acc[g][t]);
    }
  }
}

template <class D, int T, int G, int kPrefetch>
static inline void q6tile(const uint8_t* group, size_t group_bytes, int64_t nb, const ActPtrs* x, float* const* y,
                          int nvalid) {
  constexpr size_t kBytes = kPackedQ6_KBlock;
  constexpr bool kPairs = D::kU4PairsInInt16;
  constexpr bool kSplit = !kPairs && T == 1;
  const __m256i m6 = _mm256_set1_epi8(0x3f), top = _mm256_set1_epi8(static_cast<char>(0xc0));
  const auto block = [&](const uint8_t* const* blk, int64_t b, __m256(&acc)[G][T]) __attribute__((always_inline)) {
    __m256i isum[G][T];
    #pragma GCC unroll 8
    for (int g = 0; g < G; ++g) {
      #pragma GCC unroll 8
      for (int t = 0; t < T; ++t) isum[g][t] = _mm256_setzero_si256();
    }
    // Values 128n + 32j + 16 half + l, sub-block 8n + 2j + half.
    for (int n = 0; n < 2; ++n) {
      for (int half = 0; half < 2; ++half) {
        const auto vec = [&](int g, int q, int k) { return loadu256(blk[g] + 144 + 768 * n + 96 * q + 32 * k); };
        const auto xat = [&](int t, int j, int q) { return bcast4(x[t].q + b * 256 + 128 * n + 32 * j + 4 * q); };
        if constexpr (kSplit) {
          __m256i part[G][6];  // j = 0, 1, 2, then the three top-bit dots of j = 3
          #pragma GCC unroll 8
          for (int g = 0; g < G; ++g) {
            #pragma GCC unroll 8
            for (int k = 0; k < 6; ++k) part[g][k] = _mm256_setzero_si256();
          }
          #pragma GCC unroll 8
          for (int q = 4 * half; q < 4 * half + 4; ++q) {
            __m256i xj[4];
            #pragma GCC unroll 8
            for (int j = 0; j < 4; ++j) xj[j] = xat(0, j, q);
            #pragma GCC unroll 8
            for (int g = 0; g < G; ++g) {
              #pragma GCC unroll 8
              for (int k = 0; k < 3; ++k) {
                const __m256i v = vec(g, q, k);
                part[g][k] = D::u4_dot_acc(part[g][k], _mm256_and_si256(v, m6), xj[k]);
                part[g][3 + k] = D::u4_dot_acc(part[g][3 + k], _mm256_and_si256(v, top), xj[3]);
              }
            }
          }
          #pragma GCC unroll 8
          for (int g = 0; g < G; ++g) {
            const __m256i d3 = _mm256_srai_epi32(
                _mm256_add_epi32(_mm256_add_epi32(part[g][3], _mm256_slli_epi32(part[g][4], 2)),
                                 _mm256_slli_epi32(part[g][5], 4)),
                6);
            #pragma GCC unroll 8
            for (int j = 0; j < 4; ++j) {
              const __m256i sc = q6_scale(blk[g], 8 * n + 2 * j + half, false);
              isum[g][0] = _mm256_add_epi32(isum[g][0], _mm256_mullo_epi32(j < 3 ? part[g][j] : d3, sc));
            }
          }
        } else {
          sub_block_dots<D, T, G>(blk, x, b, n, half, isum, [&](int g, int q, int j) {
            return j < 3 ? _mm256_and_si256(vec(g, q, j), m6) : q6_fourth(vec(g, q, 0), vec(g, q, 1), vec(g, q, 2));
          });
        }
      }
    }
    add_sub_block_sums<T, G, 5>(blk, x, b, isum, acc);
  };
  packed_frame<T, G, kBytes, kPrefetch>(group, group_bytes, nb, y, nvalid, block);
}

// ---- packed Q3_K tile: 8 rows x T tokens, lane r = row r -----------------------
// Layout in matmul_kernels.h: Q6_K's scales and value order, each value u =
// q + 4 in 0..7 rebuilt from its two low bits (a 2j-bit 16-bit shift and an
// and) and its third bit (one 16-bit shift moving bit j + 4e to bit 2: at
// most 5 right or 2 left, so each byte's bit 2 comes from its own byte).
// Then as Q6_K: per sub-block the exact dot in int32 lanes times the int8
// scale (vpdpbusd then vpmulld; on plain AVX2 vpmaddubsw pairs, at most 2 *
// 7 * 127, through vpmaddwd with the scale), and the -4 one vpmaddwd of the
// scale pairs with the token's group sums, times 4.
static inline __m256i q3_value(__m256i low, __m256i third, int j, int bit) {
  const __m256i lo = _mm256_and_si256(j == 0 ? low : _mm256_srli_epi16(low, 2 * j), _mm256_set1_epi8(3));
  const __m256i hi = bit >= 2 ? _mm256_srli_epi16(third, bit - 2) : _mm256_slli_epi16(third, 2 - bit);
  return _mm256_or_si256(lo, _mm256_and_si256(hi, _mm256_set1_epi8(4)));
}

template <class D, int T, int G, int kPrefetch>
static inline void q3tile(const uint8_t* group, size_t group_bytes, int64_t nb, const ActPtrs* x, float* const* y,
                          int nvalid) {
  const auto block = [&](const uint8_t* const* blk, int64_t b, __m256(&acc)[G][T]) __attribute__((always_inline)) {
    __m256i isum[G][T];
    #pragma GCC unroll 8
    for (int g = 0; g < G; ++g) {
      #pragma GCC unroll 8
      for (int t = 0; t < T; ++t) isum[g][t] = _mm256_setzero_si256();
    }
    #pragma GCC unroll 2
    for (int n = 0; n < 2; ++n) {  // unrolled whole: the value decoding's shifts are then constants
      #pragma GCC unroll 2
      for (int half = 0; half < 2; ++half) {
        sub_block_dots<D, T, G>(blk, x, b, n, half, isum, [&](int g, int q, int j) {
          const uint8_t* at = blk[g] + 144 + 384 * n + 96 * (q / 2);
          return q3_value(loadu256(at + 32 * (q % 2)), loadu256(at + 64), j, j + 4 * (q % 2));
        });
      }
    }
    add_sub_block_sums<T, G, 2>(blk, x, b, isum, acc);
  };
  packed_frame<T, G, kPackedQ3_KBlock, kPrefetch>(group, group_bytes, nb, y, nvalid, block);
}

#include "kernels/matmul_packed_more.h"

// One packed tile of kind K.
template <class D, Packed K, int T, int G, int kPrefetch>
static inline void packed_tile(const uint8_t* group, size_t group_bytes, int64_t nb, const ActPtrs* x,
                               float* const* y, int nvalid) {
  if constexpr (K == Packed::kQ4_K || K == Packed::kQ5_K) {
    ktile<D, K == Packed::kQ5_K, T, G, kPrefetch>(group, group_bytes, nb, x, y, nvalid);
  } else if constexpr (K == Packed::kQ6_K) {
    q6tile<D, T, G, kPrefetch>(group, group_bytes, nb, x, y, nvalid);
  } else if constexpr (K == Packed::kQ3_K) {
    q3tile<D, T, G, kPrefetch>(group, group_bytes, nb, x, y, nvalid);
  } else if constexpr (K == Packed::kIQ4_XS) {
    iq4xs_tile<D, T, G, kPrefetch>(group, group_bytes, nb, x, y, nvalid);
  } else if constexpr (K == Packed::kQ2_K) {
    q2tile<D, T, G, kPrefetch>(group, group_bytes, nb, x, y, nvalid);
  } else if constexpr (K == Packed::kTQ2_0) {
    tq2tile<D, T, G, kPrefetch>(group, group_bytes, nb, x, y, nvalid);
  } else {
    ptile<D, K, T, G, kPrefetch>(group, group_bytes, nb, x, y, nvalid);
  }
}

// One 8-row packed tile of kind K for n <= 4 tokens.
template <class D, Packed K>
static inline void packed_tile_n(int n, const uint8_t* group, size_t group_bytes, int64_t nb, const ActPtrs* x,
                                 float* const* y, int nvalid) {
  switch (n) {
    case 1: packed_tile<D, K, 1, 1, 0>(group, group_bytes, nb, x, y, nvalid); break;
    case 2: packed_tile<D, K, 2, 1, 0>(group, group_bytes, nb, x, y, nvalid); break;
    case 3: packed_tile<D, K, 3, 1, 0>(group, group_bytes, nb, x, y, nvalid); break;
    default: packed_tile<D, K, 4, 1, 0>(group, group_bytes, nb, x, y, nvalid); break;
  }
}

template <class D, Packed K, class Cfg>
static void prange(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  const int64_t nb = a.cols / kPackedValues[static_cast<int>(K)];
  const size_t group_bytes = static_cast<size_t>(nb) * kPackedBytes[static_cast<int>(K)];
  if constexpr (Cfg::decode_pairs(K)) {
    // Decode through the ISA's 16-row tile (Cfg::decode_pairs): half the
    // instructions per weight where decoding the format costs them.
    if (t1 - t0 == 1) {
      const ActPtrs x = act_ptrs(a, t0);
      for (int64_t rt = r0; rt < r1; rt += 2 * kRowTile) {
        const uint8_t* group = a.w + static_cast<size_t>(rt / kRowTile) * group_bytes;
        float* y = a.y + t0 * a.y_stride + rt;
        const int nvalid = static_cast<int>(imin(2 * kRowTile, r1 - rt));
        if (nvalid > kRowTile) {
          Cfg::template pair_tile<K, 1>(1, group, group_bytes, nb, &x, &y, nvalid);
        } else {
          packed_tile<D, K, 1, 1, Cfg::kPackedPrefetch>(group, group_bytes, nb, &x, &y, nvalid);
        }
      }
      return;
    }
  }
  if (t1 - t0 == 1) {  // decode: several row groups per pass
    constexpr bool kBlock32 = kPackedValues[static_cast<int>(K)] == 32;
    constexpr int kG = kBlock32 ? Cfg::kDecodeGroups : Cfg::kDecodeGroupsK;
    static_assert(kG == 1 || kG == 2, "decode passes of 1 or 2 row groups");
    const ActPtrs x = act_ptrs(a, t0);
    for (int64_t rt = r0; rt < r1; rt += kG * kRowTile) {
      const uint8_t* group = a.w + static_cast<size_t>(rt / kRowTile) * group_bytes;
      float* y = a.y + t0 * a.y_stride + rt;
      const int64_t groups = imin(kG, (r1 - rt + kRowTile - 1) / kRowTile);
      const int last = static_cast<int>(imin(kRowTile, r1 - rt - (groups - 1) * kRowTile));  // rows of the last group
      if constexpr (kG == 2) {
        if (groups == 2) {
          packed_tile<D, K, 1, 2, Cfg::kPackedPrefetch>(group, group_bytes, nb, &x, &y, last);
          continue;
        }
      }
      packed_tile<D, K, 1, 1, Cfg::kPackedPrefetch>(group, group_bytes, nb, &x, &y, last);
    }
    return;
  }
  constexpr int kPairT = Cfg::pair_tokens(K);
  if constexpr (kPairT > 0) {
    // Pairs of packed row groups (16 rows) through the ISA's 16-row tile
    // (Cfg::pair_tile, matmul_avx512.cc); a lone last group takes the 8-row
    // tile. Every lane does the 8-row tile's arithmetic, so the bits do not
    // depend on which tile a row lands in.
    constexpr int kMaxTokens = kPairT > Cfg::kMaxT ? kPairT : Cfg::kMaxT;
    sweep<Cfg, 2 * kRowTile, kMaxTokens>(
        a, r0, r1, t0, t1, [](int nvalid) { return nvalid > kRowTile ? kPairT : Cfg::kMaxT; },
        [&](int64_t rt, int nvalid, const ActPtrs* x, float* const* y, int n) {
          const uint8_t* group = a.w + static_cast<size_t>(rt / kRowTile) * group_bytes;
          if (nvalid > kRowTile) {
            Cfg::template pair_tile<K>(n, group, group_bytes, nb, x, y, nvalid);
          } else {
            packed_tile_n<D, K>(n, group, group_bytes, nb, x, y, nvalid);
          }
        });
    return;
  }
  sweep_tiles<Cfg>(a, r0, r1, t0, t1, [&](int64_t rt, int nvalid, const ActPtrs* x, float* const* y, int n) {
    packed_tile_n<D, K>(n, a.w + static_cast<size_t>(rt / kRowTile) * group_bytes, group_bytes, nb, x, y, nvalid);
  });
}

// ---- activation quantization (256-bit; same result on every ISA) ---------------

static inline void quantize_act_impl(const float* x, int64_t x_stride, int64_t t0, int64_t t1, uint8_t* act,
                                     const ActLayout& lay) {
  const __m256 lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
  const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t t = t0; t < t1; ++t) {
    const float* xr = x + t * x_stride;
    uint8_t* row = act + static_cast<size_t>(t) * lay.row_bytes;
    auto* d = reinterpret_cast<float*>(row + lay.d_offset);
    auto* sum = reinterpret_cast<int16_t*>(row + lay.sum_offset);
    for (int64_t b = 0; b < lay.k / lay.block; ++b) {
      const float* xb = xr + b * lay.block;
      __m256 m = _mm256_setzero_ps();
      // max_ps returns its second operand when either is NaN: NaNs are skipped.
      for (int j = 0; j < lay.block; j += 8) m = _mm256_max_ps(Avx2F::abs(_mm256_loadu_ps(xb + j)), m);
      const float amax = Avx2F::hmax(m);
      const float db = amax / 127.0f;
      const float id = db != 0.0f ? 1.0f / db : 0.0f;
      d[b] = db;
      const __m256 vid = _mm256_set1_ps(id);
      for (int j = 0; j < lay.block; j += 32) {
        __m256i q[4];
        for (int i = 0; i < 4; ++i) {
          const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(xb + j + 8 * i), vid);
          q[i] = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(v, lo), hi));  // NaN -> -127
        }
        const __m256i p16 = _mm256_packs_epi32(q[0], q[1]), p16b = _mm256_packs_epi32(q[2], q[3]);
        const __m256i p8 = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p16, p16b), perm);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(row + b * lay.block + j), p8);
        const __m256i s01 = _mm256_add_epi32(q[0], q[1]), s23 = _mm256_add_epi32(q[2], q[3]);
        auto hsum_i = [](__m256i v) {
          __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
          s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
          s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
          return _mm_cvtsi128_si32(s);
        };
        const int64_t g = (b * lay.block + j) / lay.group;
        if (lay.group == 16) {
          sum[g] = static_cast<int16_t>(hsum_i(s01));
          sum[g + 1] = static_cast<int16_t>(hsum_i(s23));
        } else {
          sum[g] = static_cast<int16_t>(hsum_i(_mm256_add_epi32(s01, s23)));
        }
      }
    }
  }
}

// ---- float weights -------------------------------------------------------------

template <class F>
struct LoadF32 {
  static constexpr int kBytes = 4;
  static typename F::V load(const uint8_t* p) { return F::load(reinterpret_cast<const float*>(p)); }
  static typename F::V load_tail(const uint8_t* p, int n) { return F::load_tail(reinterpret_cast<const float*>(p), n); }
};
template <class F>
struct LoadF16 {
  static constexpr int kBytes = 2;
  static typename F::V load(const uint8_t* p) { return F::load_f16(p); }
  static typename F::V load_tail(const uint8_t* p, int n) { return F::load_f16_tail(p, n); }
};
template <class F>
struct LoadBF16 {
  static constexpr int kBytes = 2;
  static typename F::V load(const uint8_t* p) { return F::load_bf16(p); }
  static typename F::V load_tail(const uint8_t* p, int n) { return F::load_bf16_tail(p, n); }
};

template <class F, class L, int R, int T>
static inline void ftile(const uint8_t* w, size_t row_bytes, const float* x, int64_t x_stride, int64_t k_total,
                         float* y, int64_t y_stride) {
  using V = typename F::V;
  constexpr int W = F::kW;
  V acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = F::zero();
  int64_t k = 0;
  for (; k + W <= k_total; k += W) {
    V xv[T];
    for (int t = 0; t < T; ++t) xv[t] = F::load(x + t * x_stride + k);
    if constexpr (T == 1) {
      // Decode: prefetch the next tile's rows at this column, once per
      // cache line (a tile ahead: R rows of row_bytes). A prefetch past the
      // matrix end does not fault. Measured: 110m F16 tg +14% (docs/KERNELS.md).
      if ((k * L::kBytes) % 64 == 0) {
        for (int r = 0; r < R; ++r) {
          _mm_prefetch(reinterpret_cast<const char*>(w + (r + R) * row_bytes + k * L::kBytes), _MM_HINT_T0);
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      const V wv = L::load(w + r * row_bytes + k * L::kBytes);
      for (int t = 0; t < T; ++t) acc[r][t] = F::fmadd(wv, xv[t], acc[r][t]);
    }
  }
  if (k < k_total) {
    const int n = static_cast<int>(k_total - k);
    V xv[T];
    for (int t = 0; t < T; ++t) xv[t] = F::load_tail(x + t * x_stride + k, n);
    for (int r = 0; r < R; ++r) {
      const V wv = L::load_tail(w + r * row_bytes + k * L::kBytes, n);
      for (int t = 0; t < T; ++t) acc[r][t] = F::fmadd(wv, xv[t], acc[r][t]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) y[t * y_stride + r] = F::hsum(acc[r][t]);
}

template <class F, class L, int R>
static inline void ftile_rows(const MatmulArgs& a, int64_t r, int64_t t, int n, int64_t rows) {
  const uint8_t* w = a.w + static_cast<size_t>(r) * a.row_bytes;
  const float* x = a.x + t * a.x_stride;
  float* y = a.y + t * a.y_stride + r;
  if (a.row_index != nullptr) {  // gathered rows: one at a time
    for (int64_t i = 0; i < rows; ++i) {
      const uint8_t* wi = a.w + static_cast<size_t>(a.row_index[r + i]) * a.row_bytes;
      switch (n) {
        case 1: ftile<F, L, 1, 1>(wi, a.row_bytes, x, a.x_stride, a.cols, y + i, a.y_stride); break;
        case 2: ftile<F, L, 1, 2>(wi, a.row_bytes, x, a.x_stride, a.cols, y + i, a.y_stride); break;
        default: ftile<F, L, 1, 3>(wi, a.row_bytes, x, a.x_stride, a.cols, y + i, a.y_stride); break;
      }
    }
  } else if (rows == R) {
    switch (n) {
      case 1: ftile<F, L, R, 1>(w, a.row_bytes, x, a.x_stride, a.cols, y, a.y_stride); break;
      case 2: ftile<F, L, R, 2>(w, a.row_bytes, x, a.x_stride, a.cols, y, a.y_stride); break;
      default: ftile<F, L, R, 3>(w, a.row_bytes, x, a.x_stride, a.cols, y, a.y_stride); break;
    }
  } else {
    for (int64_t i = 0; i < rows; ++i) {
      const uint8_t* wi = w + static_cast<size_t>(i) * a.row_bytes;
      switch (n) {
        case 1: ftile<F, L, 1, 1>(wi, a.row_bytes, x, a.x_stride, a.cols, y + i, a.y_stride); break;
        case 2: ftile<F, L, 1, 2>(wi, a.row_bytes, x, a.x_stride, a.cols, y + i, a.y_stride); break;
        default: ftile<F, L, 1, 3>(wi, a.row_bytes, x, a.x_stride, a.cols, y + i, a.y_stride); break;
      }
    }
  }
}

template <class F, class L, class Cfg>
static void frange(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  constexpr int R = Cfg::kFloatRows;
  const int64_t chunk = imin(t1 - t0, static_cast<int64_t>(Cfg::kActChunkBytes / (4 * a.cols)) + 1);
  for (int64_t tc = t0; tc < t1; tc += chunk) {
    const int64_t tc1 = imin(t1, tc + chunk);
    for (int64_t r = r0; r < r1; r += R) {
      const int64_t rows = imin(R, r1 - r);
      for (int64_t t = tc; t < tc1;) {
        const int n = static_cast<int>(imin(3, tc1 - t));
        ftile_rows<F, L, R>(a, r, t, n, rows);
        t += n;
      }
    }
  }
}

// The kernel table of one ISA: F = float vector traits, D = integer dot
// strategy, Cfg = tile sizes.
template <class F, class D, class Cfg>
struct KernelSet {
  static constexpr MatmulKernels table = {
      Cfg::kName,
      {
          frange<F, LoadF32<F>, Cfg>,
          frange<F, LoadF16<F>, Cfg>,
          frange<F, LoadBF16<F>, Cfg>,
          qrange<FmtQ8_0<D>, Cfg>,
          qrange<FmtQ4_0<D>, Cfg>,
          qrange<FmtQ4_K, Cfg>,
          qrange<FmtQ6_K, Cfg>,
          qrange<FmtQ5_K, Cfg>,
          qrange<FmtQ3_K, Cfg>,
          qrange<FmtAffine32<D, false>, Cfg>,
          qrange<FmtQ5_0<D>, Cfg>,
          qrange<FmtAffine32<D, true>, Cfg>,
          qrange<FmtLut32<D, false>, Cfg>,
          qrange<FmtLut32<D, true>, Cfg>,
          qrange<FmtQ2_K, Cfg>,
          qrange<FmtIQ4_XS<D>, Cfg>,
          qrange<FmtTQ1_0<D>, Cfg>,
          qrange<FmtTQ2_0<D>, Cfg>,
      },
      quantize_act_impl,
      {prange<D, Packed::kQ8_0, Cfg>, prange<D, Packed::kQ4_0, Cfg>, prange<D, Packed::kQ4_K, Cfg>,
       prange<D, Packed::kQ6_K, Cfg>, prange<D, Packed::kQ5_K, Cfg>, prange<D, Packed::kQ3_K, Cfg>,
       prange<D, Packed::kIQ4_NL, Cfg>, prange<D, Packed::kMXFP4, Cfg>, prange<D, Packed::kQ4_1, Cfg>,
       prange<D, Packed::kQ5_0, Cfg>, prange<D, Packed::kQ5_1, Cfg>, prange<D, Packed::kIQ4_XS, Cfg>,
       prange<D, Packed::kQ2_K, Cfg>, prange<D, Packed::kTQ2_0, Cfg>},
      Cfg::kSparseRange,
  };
};

}  // namespace
}  // namespace tessera::kernels
