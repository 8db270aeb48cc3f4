// AVX-512 (F/BW/VL/DQ + VNNI) matmul kernels, compiled with those flags by the
// *_avx512.cc rule. Only called after CPUID reports them (see matmul.cc).
// Float types use 16-lane vectors; the quantized types keep the 256-bit tile
// of matmul_impl.h (a Q8_0/Q4_0 block is 32 bytes) with vpdpbusd dots and
// the 32 vector registers allowing 4 tokens per tile.
// GCC 12's AVX-512 headers build some intrinsics from _mm512_undefined_*()
// and warn about it at every use: not a problem in this file's code.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// The contract (matmul_kernels.h) fixes every rounding: no contraction of
// a separate multiply and add into an FMA behind the code's back.
#pragma GCC optimize("fp-contract=off")

#include "kernels/matmul_impl.h"
#include "kernels/sparse_kernels.h"
#include "kernels/pair_avx512.h"
#include "kernels/simd_avx512.h"

namespace tessera::kernels {
namespace {

// ---- 16-row packed Q8_0 / Q4_0 prompt tile ------------------------------------
// Two consecutive 8-row groups of the packed layout (matmul_kernels.h) side
// by side in one zmm: lanes 0-7 = the first group's rows, 8-15 the second's,
// so each vpdpbusd does 16 rows x 4 values for one token, with the token's 4
// activation bytes as an embedded broadcast. Against the 8-row ymm tile this
// halves the instructions per multiply-add: on Zen 4 that tile is bound by
// issuing them, not by the dot units (docs/KERNELS.md). Per lane the
// arithmetic is ptile's: the same exact int32 block sums, then
// acc += float(sum - offset * xsum) * (d_w * d_x) per block, so the bits are
// those of the 8-row tile and of the scalar reference.

static inline __m512i bcast4_512(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// acc + vpdpbusd(u, 4 bytes at p broadcast to every lane), with the
// broadcast embedded in the instruction's memory operand ({1to16}): GCC 12
// does not fold _mm512_set1_epi32 into vpdpbusd and issues a separate
// vpbroadcastd per dot, which costs the 16-row tiles an instruction per
// multiply-add instruction.
static inline __m512i dpbusd_bcast(__m512i acc, __m512i u, const int8_t* p) {
  asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(u), "m"(*reinterpret_cast<const int32_t*>(p)));
  return acc;
}

// The frame of the 16-row tiles: T token accumulators of 16 rows, the
// blocks of both groups walked in order (block(b0, b1, b, acc) adds block b
// at b0 and b1 into acc), and the stores (the pair has `nvalid` rows).
template <int T, size_t kBytes, class Block>
__attribute__((always_inline)) static inline void pair_frame(const uint8_t* group, size_t group_bytes, int64_t nb,
                                                             float* const* y, int nvalid, Block block) {
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* b0 = group + static_cast<size_t>(b) * kBytes;
    block(b0, b0 + group_bytes, b, acc);
  }
  for (int t = 0; t < T; ++t) {
    if (nvalid == 16) {
      _mm512_storeu_ps(y[t], acc[t]);
    } else {
      Avx512F::store_tail(y[t], acc[t], nvalid);
    }
  }
}

// K: Q8_0, Q4_0 or a nibble-table kind (IQ4_NL, MXFP4: each nibble's level
// by vpshufb, then Q8_0's offset-by-128 dot), or Q4_1 / Q5_0 / Q5_1 (ptile's
// fifth bits and min, matmul_impl.h).
template <Packed K, int T>
static void ptile16(const uint8_t* group, size_t group_bytes, int64_t nb, const ActPtrs* x, float* const* y,
                    int nvalid) {
  constexpr bool kLut = K == Packed::kIQ4_NL || K == Packed::kMXFP4;
  constexpr bool kQ4 = K == Packed::kQ4_0 || K == Packed::kQ4_1 || K == Packed::kQ5_0 || K == Packed::kQ5_1;
  constexpr bool kMin = K == Packed::kQ4_1 || K == Packed::kQ5_1, kFifth = K == Packed::kQ5_0 || K == Packed::kQ5_1;
  constexpr size_t kQh = 16 + (kMin ? 16 : 0), kVal = kQh + (kFifth ? 32 : 0);
  constexpr size_t kBytes = kPackedBytes[static_cast<int>(K)];
  constexpr int kOffset = K == Packed::kQ4_0 ? 8 : K == Packed::kQ5_0 ? 16 : kMin ? 0 : Avx512VnniDot::kQ8Offset;
  const __m512i m4 = _mm512_set1_epi8(0x0f), flip = _mm512_set1_epi8(static_cast<char>(0x80));
  // The levels already offset by 128 (so vpdpbusd reads them unsigned).
  const __m512i lut = kLut ? _mm512_xor_si512(_mm512_broadcast_i32x4(loadu128(K == Packed::kMXFP4 ? kMXFP4Values
                                                                                                 : kIQ4Values)),
                                              flip)
                           : _mm512_setzero_si512();
  const auto block = [&](const uint8_t* b0, const uint8_t* b1, int64_t b, __m512(&acc)[T])
                         __attribute__((always_inline)) {
    __m512i isum[T];
    for (int t = 0; t < T; ++t) isum[t] = _mm512_setzero_si512();
    if constexpr (kQ4 || kLut) {
      for (int h = 0; h < 4; ++h) {
        const __m512i v = join256(b0 + kVal + 32 * h, b1 + kVal + 32 * h);
        __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        if constexpr (kFifth) {
          const __m512i qh = join256(b0 + kQh, b1 + kQh), one = _mm512_set1_epi8(1);
          lo = _mm512_or_si512(lo, _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(qh, h), one), 4));
          hi = _mm512_or_si512(hi, _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(qh, 4 + h), one), 4));
        }
        if constexpr (kLut) {
          lo = _mm512_shuffle_epi8(lut, lo);
          hi = _mm512_shuffle_epi8(lut, hi);
        }
        for (int t = 0; t < T; ++t) {
          isum[t] = dpbusd_bcast(isum[t], lo, x[t].q + b * 32 + 4 * h);
          isum[t] = dpbusd_bcast(isum[t], hi, x[t].q + b * 32 + 16 + 4 * h);
        }
      }
    } else {
      for (int j = 0; j < 8; ++j) {
        const __m512i w = _mm512_xor_si512(join256(b0 + 16 + 32 * j, b1 + 16 + 32 * j), flip);
        for (int t = 0; t < T; ++t) isum[t] = dpbusd_bcast(isum[t], w, x[t].q + b * 32 + 4 * j);
      }
    }
    const __m512 ws = _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(loadu128(b0)), loadu128(b1), 1));
    for (int t = 0; t < T; ++t) {
      const __m512i v = _mm512_sub_epi32(isum[t], _mm512_set1_epi32(kOffset * x[t].sum[b]));
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(v), _mm512_mul_ps(ws, _mm512_set1_ps(x[t].d[b])), acc[t]);
    }
    if constexpr (kMin) {  // + sum(x) * fl(m * dx)
      const __m512 wm =
          _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(loadu128(b0 + 16)), loadu128(b1 + 16), 1));
      for (int t = 0; t < T; ++t) {
        acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(static_cast<float>(x[t].sum[b])),
                                 _mm512_mul_ps(wm, _mm512_set1_ps(x[t].d[b])), acc[t]);
      }
    }
  };
  pair_frame<T, kBytes>(group, group_bytes, nb, y, nvalid, block);
}

// ---- 16-row packed Q4_K / Q5_K prompt tile ------------------------------------
// ktile's arithmetic (matmul_impl.h) on two 8-row groups side by side, as
// ptile16 does for Q8_0 / Q4_0: per sub-block pair the int32 dots by
// vpdpbusd, times the rows' 6-bit scales (vpmulld) into the super-block's
// exact sum; the high nibbles kept in place (16 q) for Q4_K; then the same
// two float steps per 256 values. T <= 4: four partial sums per token.

template <bool kFifth, int T>
static void ktile16(const uint8_t* group, size_t group_bytes, int64_t nb, const ActPtrs* x, float* const* y,
                    int nvalid) {
  constexpr size_t kBytes = kFifth ? kPackedQ5_KBlock : kPackedQ4_KBlock;
  constexpr bool kHigh16 = !kFifth;
  const __m512i m4 = _mm512_set1_epi8(0x0f);
  const auto block = [&](const uint8_t* b0, const uint8_t* b1, int64_t b, __m512(&acc)[T])
                         __attribute__((always_inline)) {
    __m512i isum[T];
    for (int t = 0; t < T; ++t) isum[t] = _mm512_setzero_si512();
    for (int p = 0; p < 4; ++p) {
      const __m512i sl = scale_lanes16(b0 + 32 + 16 * p, b1 + 32 + 16 * p);
      const __m512i sh = scale_lanes16(b0 + 40 + 16 * p, b1 + 40 + 16 * p);
      __m512i lo_part[T], hi_part[T];
      for (int t = 0; t < T; ++t) lo_part[t] = hi_part[t] = _mm512_setzero_si512();
      for (int h = 0; h < 8; ++h) {
        const __m512i v = join256(b0 + 160 + 256 * p + 32 * h, b1 + 160 + 256 * p + 32 * h);
        __m512i lo = _mm512_and_si512(v, m4);
        __m512i hi = kHigh16 ? _mm512_and_si512(v, _mm512_set1_epi8(static_cast<char>(0xf0)))
                             : _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        if constexpr (kFifth) {
          q5_k_fifth_bits16(join256(b0 + kPackedQ4_KBlock + 32 * h, b1 + kPackedQ4_KBlock + 32 * h), p, lo, hi);
        }
        for (int t = 0; t < T; ++t) {
          lo_part[t] = dpbusd_bcast(lo_part[t], lo, x[t].q + b * 256 + 64 * p + 4 * h);
          hi_part[t] = dpbusd_bcast(hi_part[t], hi, x[t].q + b * 256 + 64 * p + 32 + 4 * h);
        }
      }
      for (int t = 0; t < T; ++t) {
        const __m512i hp = kHigh16 ? _mm512_srai_epi32(hi_part[t], 4) : hi_part[t];
        isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(lo_part[t], sl));
        isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(hp, sh));
      }
    }
    __m512i mins[4];  // int16 pairs (m_r[2i], m_r[2i + 1]) in lane r
    for (int i = 0; i < 4; ++i) mins[i] = _mm512_cvtepu8_epi16(join128(b0 + 96 + 16 * i, b1 + 96 + 16 * i));
    const __m512 wd = _mm512_cvtph_ps(join128(b0, b1)), wmin = _mm512_cvtph_ps(join128(b0 + 16, b1 + 16));
    for (int t = 0; t < T; ++t) {
      const int8_t* xs = reinterpret_cast<const int8_t*>(x[t].sum + b * 8);
      __m512i msum = _mm512_madd_epi16(mins[0], bcast4_512(xs));
      for (int i = 1; i < 4; ++i) msum = _mm512_add_epi32(msum, _mm512_madd_epi16(mins[i], bcast4_512(xs + 4 * i)));
      const __m512 dx = _mm512_set1_ps(x[t].d[b]);
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_mul_ps(wd, dx), acc[t]);
      acc[t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(msum), _mm512_mul_ps(wmin, dx), acc[t]);
    }
  };
  pair_frame<T, kBytes>(group, group_bytes, nb, y, nvalid, block);
}

// ---- 16-row packed Q6_K prompt tile --------------------------------------------
// q6tile's arithmetic (matmul_impl.h, the int32-dot path for T > 1) on two
// groups side by side: per sub-block pair the exact dots of the 6-bit q by
// vpdpbusd (values j = 0, 2 then 1, 3; the fourth assembled from the three
// bytes' top bits), times the rows' int8 scales (vpmulld) into the
// super-block's exact sum; the -32 as one vpmaddwd of the scale pairs with
// the token's sums of 16; then one float step per 256 values. T <= 4.

// The 16-row tile of the Q6_K-like packed blocks (Q6_K, Q3_K: int8 scales
// per sub-block of 16, values in the order of matmul_kernels.h): value(b0,
// b1, n, q, j) is the zmm of unsigned value bytes of the two row groups for
// values 128n + 32j + 4q + i; 2^kShift their offset (32, 4). kJ values j per
// pass ({c, c + 2}, or {c}): Q6_K's two share loads; Q3_K takes one at a
// time to hold twice the tokens, each decoded vector serving all of them.
template <int T, int kJ, size_t kBytes, int kShift, class Value>
static inline __attribute__((always_inline)) void sub_block_tile16(const uint8_t* group, size_t group_bytes,
                                                                   int64_t nb, const ActPtrs* x, float* const* y,
                                                                   int nvalid, Value value) {
  const auto block = [&](const uint8_t* b0, const uint8_t* b1, int64_t b, __m512(&acc)[T])
                         __attribute__((always_inline)) {
    __m512i isum[T];
    for (int t = 0; t < T; ++t) isum[t] = _mm512_setzero_si512();
    // Values 128n + 32j + 16 half + l, sub-block 8n + 2j + half. Unrolled
    // whole: the value decoding's shifts are then constants.
    #pragma GCC unroll 2
    for (int n = 0; n < 2; ++n) {
      #pragma GCC unroll 2
      for (int half = 0; half < 2; ++half) {
        #pragma GCC unroll 4
        for (int c = 0; c < 4 / kJ; ++c) {  // values j = c + 2k, k < kJ
          __m512i sc[kJ], part[kJ][T];
          #pragma GCC unroll 2
          for (int k = 0; k < kJ; ++k) {
            sc[k] = q6_scale16(b0, b1, 8 * n + 2 * (c + 2 * k) + half);
            #pragma GCC unroll 8
            for (int t = 0; t < T; ++t) part[k][t] = _mm512_setzero_si512();
          }
          #pragma GCC unroll 4
          for (int q = 4 * half; q < 4 * half + 4; ++q) {
            __m512i v[kJ];
            #pragma GCC unroll 2
            for (int k = 0; k < kJ; ++k) v[k] = value(b0, b1, n, q, c + 2 * k);
            #pragma GCC unroll 2
            for (int k = 0; k < kJ; ++k) {
              #pragma GCC unroll 8
              for (int t = 0; t < T; ++t) {
                part[k][t] = dpbusd_bcast(part[k][t], v[k], x[t].q + b * 256 + 128 * n + 32 * (c + 2 * k) + 4 * q);
              }
            }
          }
          #pragma GCC unroll 8
          for (int t = 0; t < T; ++t) {
            #pragma GCC unroll 2
            for (int k = 0; k < kJ; ++k) isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(part[k][t], sc[k]));
          }
        }
      }
    }
    const __m512 wd = _mm512_cvtph_ps(join128(b0, b1));
    for (int t = 0; t < T; ++t) {
      const int8_t* xs = reinterpret_cast<const int8_t*>(x[t].sum + b * 16);
      __m512i corr = _mm512_setzero_si512();  // sum_s sc_s * sum(x_s)
      for (int i = 0; i < 8; ++i) {
        const __m512i pairs = _mm512_cvtepi8_epi16(join128(b0 + 16 + 16 * i, b1 + 16 + 16 * i));
        corr = _mm512_add_epi32(corr, _mm512_madd_epi16(pairs, bcast4_512(xs + 4 * i)));
      }
      const __m512i v = _mm512_sub_epi32(isum[t], _mm512_slli_epi32(corr, kShift));
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(v), _mm512_mul_ps(wd, _mm512_set1_ps(x[t].d[b])), acc[t]);
    }
  };
  pair_frame<T, kBytes>(group, group_bytes, nb, y, nvalid, block);
}

template <int T>
static void q6tile16(const uint8_t* group, size_t group_bytes, int64_t nb, const ActPtrs* x, float* const* y,
                     int nvalid) {
  const __m512i m6 = _mm512_set1_epi8(0x3f);
  sub_block_tile16<T, 2, kPackedQ6_KBlock, 5>(
      group, group_bytes, nb, x, y, nvalid, [&](const uint8_t* b0, const uint8_t* b1, int n, int q, int j) {
        const auto vec = [&](int k) {
          return join256(b0 + 144 + 768 * n + 96 * q + 32 * k, b1 + 144 + 768 * n + 96 * q + 32 * k);
        };
        return j < 3 ? _mm512_and_si512(vec(j), m6) : q6_fourth16(vec(0), vec(1), vec(2));
      });
}

// Q3_K: the value's two low bits and its third bit (matmul_impl.h q3_value).
template <int T>
static void q3tile16(const uint8_t* group, size_t group_bytes, int64_t nb, const ActPtrs* x, float* const* y,
                     int nvalid) {
  const __m512i m3 = _mm512_set1_epi8(3), m4 = _mm512_set1_epi8(4);
  sub_block_tile16<T, 1, kPackedQ3_KBlock, 2>(
      group, group_bytes, nb, x, y, nvalid, [&](const uint8_t* b0, const uint8_t* b1, int n, int q, int j) {
        const size_t at = 144 + 384 * n + 96 * (q / 2);
        const __m512i low = join256(b0 + at + 32 * (q % 2), b1 + at + 32 * (q % 2));
        const __m512i third = join256(b0 + at + 64, b1 + at + 64);
        const int bit = j + 4 * (q % 2);
        const __m512i lo = _mm512_and_si512(j == 0 ? low : _mm512_srli_epi16(low, 2 * j), m3);
        const __m512i hi = bit >= 2 ? _mm512_srli_epi16(third, bit - 2) : _mm512_slli_epi16(third, 2 - bit);
        return _mm512_or_si512(lo, _mm512_and_si512(hi, m4));
      });
}

// ---- 16-row packed IQ4_XS prompt tile ------------------------------------------
// iq4xs_tile's arithmetic (matmul_packed_more.h) on two 8-row groups side by
// side: per sub-block the levels (offset by 128 in the table) by vpshufb,
// vpdpbusd into int32 lanes, times the rows' scales (vpmulld); then the
// offset taken out as 128 * sum_s ls_s * sum(x_s), and one fma per 256 values.
template <int T>
static void iq4xs_tile16(const uint8_t* group, size_t group_bytes, int64_t nb, const ActPtrs* x, float* const* y,
                         int nvalid) {
  const __m512i m4 = _mm512_set1_epi8(0x0f);
  const __m512i lut = _mm512_xor_si512(_mm512_broadcast_i32x4(loadu128(kIQ4Values)),
                                       _mm512_set1_epi8(static_cast<char>(0x80)));
  const auto block = [&](const uint8_t* b0, const uint8_t* b1, int64_t b, __m512(&acc)[T])
                         __attribute__((always_inline)) {
    __m512i isum[T];
    for (int t = 0; t < T; ++t) isum[t] = _mm512_setzero_si512();
    for (int s = 0; s < 8; ++s) {
      __m512i part[T];
      for (int t = 0; t < T; ++t) part[t] = _mm512_setzero_si512();
      for (int h = 0; h < 4; ++h) {
        const __m512i v = join256(b0 + 80 + 128 * s + 32 * h, b1 + 80 + 128 * s + 32 * h);
        const __m512i lo = _mm512_shuffle_epi8(lut, _mm512_and_si512(v, m4));
        const __m512i hi = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(v, 4), m4));
        for (int t = 0; t < T; ++t) {
          part[t] = dpbusd_bcast(part[t], lo, x[t].q + b * 256 + 32 * s + 4 * h);
          part[t] = dpbusd_bcast(part[t], hi, x[t].q + b * 256 + 32 * s + 16 + 4 * h);
        }
      }
      const __m512i ls = _mm512_cvtepi8_epi32(_mm_unpacklo_epi64(
          _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b0 + 16 + 8 * s)),
          _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b1 + 16 + 8 * s))));
      for (int t = 0; t < T; ++t) isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(part[t], ls));
    }
    // sum_s ls_s * sum(x_s): the scales as int16 pairs (lane r = ls_r[2k],
    // ls_r[2k + 1]) times the token's group sums 2k, 2k + 1, one vpmaddwd each.
    __m512i lspair[4];
    for (int k = 0; k < 4; ++k) {
      const auto ls16 = [&](int s) {
        return _mm512_cvtepi8_epi32(_mm_unpacklo_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b0 + 16 + 8 * s)),
                                                       _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b1 + 16 + 8 * s))));
      };
      lspair[k] = _mm512_or_si512(_mm512_and_si512(ls16(2 * k), _mm512_set1_epi32(0xffff)),
                                  _mm512_slli_epi32(ls16(2 * k + 1), 16));
    }
    const __m512 wd = _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(loadu128(b0)), loadu128(b1), 1));
    for (int t = 0; t < T; ++t) {
      __m512i corr = _mm512_setzero_si512();
      for (int k = 0; k < 4; ++k) {
        int32_t pair;
        std::memcpy(&pair, x[t].sum + b * 8 + 2 * k, 4);
        corr = _mm512_add_epi32(corr, _mm512_madd_epi16(lspair[k], _mm512_set1_epi32(pair)));
      }
      const __m512i v = _mm512_sub_epi32(isum[t], _mm512_slli_epi32(corr, 7));
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(v), _mm512_mul_ps(wd, _mm512_set1_ps(x[t].d[b])), acc[t]);
    }
  };
  pair_frame<T, kPackedIQ4_XSBlock>(group, group_bytes, nb, y, nvalid, block);
}

// ---- 16-row packed Q2_K prompt tile ----------------------------------------------
// q2tile's arithmetic (matmul_packed_more.h) on two 8-row groups side by
// side. A sub-block's dot is at most 16 * 3 * 127 = 6096 in magnitude, so
// its int32 lane equals its low 16 bits read as signed: vpmaddwd with the
// scale in the low half of each lane (0 in the high half) is the exact
// product in one instruction instead of vpmulld's two; the min term is one
// vpmaddwd per pair of sub-blocks (the mins as int16 pairs times the
// token's group sums 2k, 2k + 1).
template <int T>
static void q2tile16(const uint8_t* group, size_t group_bytes, int64_t nb, const ActPtrs* x, float* const* y,
                     int nvalid) {
  const __m512i m3 = _mm512_set1_epi8(3);
  const auto lanes16 = [](const uint8_t* b0, const uint8_t* b1) {
    return _mm512_cvtepu8_epi32(_mm_unpacklo_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b0)),
                                                   _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b1))));
  };
  const auto block = [&](const uint8_t* b0, const uint8_t* b1, int64_t b, __m512(&acc)[T])
                         __attribute__((always_inline)) {
    __m512i isum[T];
    for (int t = 0; t < T; ++t) isum[t] = _mm512_setzero_si512();
    for (int n = 0; n < 2; ++n) {
      for (int half = 0; half < 2; ++half) {
        __m512i part[4][T];
        for (int j = 0; j < 4; ++j) {
          for (int t = 0; t < T; ++t) part[j][t] = _mm512_setzero_si512();
        }
        for (int q = 4 * half; q < 4 * half + 4; ++q) {
          const __m512i v = join256(b0 + 288 + 256 * n + 32 * q, b1 + 288 + 256 * n + 32 * q);
          for (int j = 0; j < 4; ++j) {
            const __m512i u = _mm512_and_si512(j == 0 ? v : _mm512_srli_epi16(v, 2 * j), m3);
            for (int t = 0; t < T; ++t) {
              part[j][t] = dpbusd_bcast(part[j][t], u, x[t].q + b * 256 + 128 * n + 32 * j + 4 * q);
            }
          }
        }
        for (int j = 0; j < 4; ++j) {
          const int sb = 8 * (8 * n + 2 * j + half);
          const __m512i sc = lanes16(b0 + 32 + sb, b1 + 32 + sb);
          for (int t = 0; t < T; ++t) isum[t] = _mm512_add_epi32(isum[t], _mm512_madd_epi16(part[j][t], sc));
        }
      }
    }
    // Mins as int16 pairs: lane r = (m_r[2k], m_r[2k + 1]).
    __m512i mpair[8];
    for (int k = 0; k < 8; ++k) {
      const __m512i lo = lanes16(b0 + 160 + 16 * k, b1 + 160 + 16 * k);
      const __m512i hi = lanes16(b0 + 168 + 16 * k, b1 + 168 + 16 * k);
      mpair[k] = _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16));
    }
    const __m512 wd = _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(loadu128(b0)), loadu128(b1), 1));
    const __m512 wm =
        _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(loadu128(b0 + 16)), loadu128(b1 + 16), 1));
    for (int t = 0; t < T; ++t) {
      const int16_t* xs = x[t].sum + b * 16;
      __m512i msum = _mm512_setzero_si512();
      for (int k = 0; k < 8; ++k) {
        int32_t pair;
        std::memcpy(&pair, xs + 2 * k, 4);
        msum = _mm512_add_epi32(msum, _mm512_madd_epi16(mpair[k], _mm512_set1_epi32(pair)));
      }
      const __m512 dx = _mm512_set1_ps(x[t].d[b]);
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_mul_ps(wd, dx), acc[t]);
      acc[t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(msum), _mm512_mul_ps(wm, dx), acc[t]);
    }
  };
  pair_frame<T, kPackedQ2_KBlock>(group, group_bytes, nb, y, nvalid, block);
}

// ---- 16-row packed TQ2_0 / TQ1_0 prompt tile ---------------------------------------
// tq2tile's arithmetic on two 8-row groups side by side: every value's dot
// straight into one int32 lane per row (no sub-block scales), minus sum(x).
template <int T>
static void tq2tile16(const uint8_t* group, size_t group_bytes, int64_t nb, const ActPtrs* x, float* const* y,
                      int nvalid) {
  const __m512i m3 = _mm512_set1_epi8(3);
  const auto block = [&](const uint8_t* b0, const uint8_t* b1, int64_t b, __m512(&acc)[T])
                         __attribute__((always_inline)) {
    __m512i isum[T];
    for (int t = 0; t < T; ++t) isum[t] = _mm512_setzero_si512();
    for (int n = 0; n < 2; ++n) {
      for (int q = 0; q < 8; ++q) {
        const __m512i v = join256(b0 + 16 + 256 * n + 32 * q, b1 + 16 + 256 * n + 32 * q);
        for (int j = 0; j < 4; ++j) {
          const __m512i u = _mm512_and_si512(j == 0 ? v : _mm512_srli_epi16(v, 2 * j), m3);
          for (int t = 0; t < T; ++t) isum[t] = dpbusd_bcast(isum[t], u, x[t].q + b * 256 + 128 * n + 32 * j + 4 * q);
        }
      }
    }
    const __m512 wd = _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(loadu128(b0)), loadu128(b1), 1));
    for (int t = 0; t < T; ++t) {
      const __m512i v = _mm512_sub_epi32(isum[t], _mm512_set1_epi32(sum_groups(x[t].sum + b * 8, 8)));
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(v), _mm512_mul_ps(wd, _mm512_set1_ps(x[t].d[b])), acc[t]);
    }
  };
  pair_frame<T, kPackedTQ2_0Block>(group, group_bytes, nb, y, nvalid, block);
}

struct Avx512Cfg {
  static constexpr const char* kName = "avx512";
  static constexpr int kMaxT = 4;
  // Tokens of the 16-row packed prompt tiles above (K types keep twice the
  // partial sums, so half the tokens).
  static constexpr int pair_tokens(Packed k) {
    return kPackedValues[static_cast<int>(k)] == 32 || k == Packed::kQ3_K || k == Packed::kTQ2_0 ||
                   k == Packed::kIQ4_XS
               ? 8
               : 4;  // Q3_K, IQ4_XS: one sub-block per pass
  }
  // Decode (one token) through the 16-row tiles too: for issue 35's kinds,
  // whose decoding (tables, fifth bits, scales) makes the one-token 8-row
  // tile issue-bound. Measured on the Xeon (docs/BENCHMARKS.md, "Every
  // other GGUF type"): 1b IQ4_XS decode 27 -> 36 tok/s, Q2_K 39 -> 45; the
  // older kinds keep the one-stream 8-row decode tuned on Zen 4.
  static constexpr bool decode_pairs(Packed k) {
    return k != Packed::kQ8_0 && k != Packed::kQ4_0 && k != Packed::kQ4_K && k != Packed::kQ5_K &&
           k != Packed::kQ6_K && k != Packed::kQ3_K;
  }
  template <Packed K, int T = pair_tokens(K)>
  static void pair_tile(int n, const uint8_t* group, size_t group_bytes, int64_t nb, const ActPtrs* x,
                        float* const* y, int nvalid) {
    if constexpr (T > 1) {
      if (n < T) return pair_tile<K, T - 1>(n, group, group_bytes, nb, x, y, nvalid);
    }
    if constexpr (kPackedValues[static_cast<int>(K)] == 32) {
      ptile16<K, T>(group, group_bytes, nb, x, y, nvalid);
    } else if constexpr (K == Packed::kIQ4_XS) {
      iq4xs_tile16<T>(group, group_bytes, nb, x, y, nvalid);
    } else if constexpr (K == Packed::kQ2_K) {
      q2tile16<T>(group, group_bytes, nb, x, y, nvalid);
    } else if constexpr (K == Packed::kTQ2_0) {
      tq2tile16<T>(group, group_bytes, nb, x, y, nvalid);
    } else if constexpr (K == Packed::kQ6_K) {
      q6tile16<T>(group, group_bytes, nb, x, y, nvalid);
    } else if constexpr (K == Packed::kQ3_K) {
      q3tile16<T>(group, group_bytes, nb, x, y, nvalid);
    } else {
      ktile16<K == Packed::kQ5_K, T>(group, group_bytes, nb, x, y, nvalid);
    }
  }
  static constexpr int kFloatRows = 4;
  static constexpr int kPrefetch = 512;  // bytes ahead in each weight row (0: none)
#ifndef TESSERA_PACKED_PF
#define TESSERA_PACKED_PF 4096
#endif
  // Bytes ahead in a packed row group's stream, decode only (measured: docs/KERNELS.md).
  static constexpr int kPackedPrefetch = TESSERA_PACKED_PF;
  // Row groups per pass of the packed decode tiles (Q8_0 / Q4_0, K types).
  static constexpr int kDecodeGroups = 1;
  static constexpr int kDecodeGroupsK = 1;
  static constexpr size_t kActChunkBytes = 256 * 1024;
  static constexpr MatmulRangeFn kSparseRange = sparse_range_avx512;
};

}  // namespace

const MatmulKernels& matmul_kernels_avx512() { return KernelSet<Avx512F, Avx512VnniDot, Avx512Cfg>::table; }

}  // namespace tessera::kernels
