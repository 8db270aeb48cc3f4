// 512-bit vector traits and the VNNI integer-dot strategy. Include only from
// *_avx512.cc files. Same ODR rule as simd_avx2.h: internal linkage only.
//
// Each primitive mirrors one of Avx2F / Avx2Dot (same name, same meaning),
// so the kernel templates run unchanged; only these lines are specific to
// AVX-512 and cannot be executed on machines without it.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "kernels/simd_avx2.h"

namespace tessera::kernels {
namespace {

// Float vectors of 16 lanes (AVX-512F; DQ for the 256-bit extract, BW+VL for
// the masked 16-bit loads).
struct Avx512F {
  using V = __m512;
  static constexpr int kW = 16;

  static __mmask16 tail_mask(int n) { return static_cast<__mmask16>((1u << n) - 1u); }  // 0 < n < 16
  static V zero() { return _mm512_setzero_ps(); }
  static V set1(float v) { return _mm512_set1_ps(v); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  // Masked-off lanes are neither read nor faulted on, and come back as zero.
  static V load_tail(const float* p, int n) { return _mm512_maskz_loadu_ps(tail_mask(n), p); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static void store_tail(float* p, V v, int n) { _mm512_mask_storeu_ps(p, tail_mask(n), v); }
  static V load_f16(const void* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(static_cast<const __m256i*>(p))); }
  static V load_f16_tail(const void* p, int n) { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(tail_mask(n), p)); }
  // 16 int8 codes as f32; 16 4-bit codes (8 bytes, low nibble first) minus 8.
  static V load_i8(const void* p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(static_cast<const __m128i*>(p))));
  }
  static V load_q4_pairs(const void* p) {
    const __m128i b = _mm_loadl_epi64(static_cast<const __m128i*>(p));
    const __m128i m = _mm_set1_epi8(0x0f);
    const __m128i q = _mm_unpacklo_epi8(_mm_and_si128(b, m), _mm_and_si128(_mm_srli_epi16(b, 4), m));
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_sub_epi8(q, _mm_set1_epi8(8))));
  }
  static V bf16_widen(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }
  static V load_bf16(const void* p) { return bf16_widen(_mm256_loadu_si256(static_cast<const __m256i*>(p))); }
  static V load_bf16_tail(const void* p, int n) { return bf16_widen(_mm256_maskz_loadu_epi16(tail_mask(n), p)); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V fmadd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V max(V a, V b) { return _mm512_max_ps(a, b); }
  static V abs(V a) { return _mm512_abs_ps(a); }
  // Fixed tree: 256-bit halves added, then Avx2F's tree.
  static float hsum(V v) {
    return Avx2F::hsum(_mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)));
  }
  static float hmax(V v) {
    return Avx2F::hmax(_mm256_max_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)));
  }
  static float hsum_tail(V v, int n) { return n == kW ? hsum(v) : hsum(_mm512_maskz_mov_ps(tail_mask(n), v)); }
  static V load_tail_fill(const float* p, int n, float fill) {
    return _mm512_mask_loadu_ps(_mm512_set1_ps(fill), tail_mask(n), p);  // fill where the mask is off
  }
  static V min(V a, V b) { return _mm512_min_ps(a, b); }
  static V div(V a, V b) { return _mm512_div_ps(a, b); }
  static V fnmadd(V a, V b, V c) { return _mm512_fnmadd_ps(a, b, c); }
  static V round(V a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static V pow2(V n) {
    return _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23));
  }
  static V swap_pairs(V v) { return _mm512_permute_ps(v, 0xb1); }  // within each 128-bit lane, like vpermilps
  static V iota() { return _mm512_set_ps(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0); }
  using M = __mmask16;
  static M cmp_gt(V a, V b) { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ); }
  static V blend(M m, V a, V b) { return _mm512_mask_blend_ps(m, b, a); }  // mask_blend picks its 3rd operand where m is set
  static double sum_squares(const float* x, int64_t n) {
    __m512d a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd();
    for (int64_t i = 0; i < n; i += kW) {
      const V v = n - i >= kW ? load(x + i) : load_tail(x + i, static_cast<int>(n - i));
      const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
      const __m512d hi = _mm512_cvtps_pd(_mm512_extractf32x8_ps(v, 1));
      a0 = _mm512_fmadd_pd(lo, lo, a0);
      a1 = _mm512_fmadd_pd(hi, hi, a1);
    }
    const __m512d s = _mm512_add_pd(a0, a1);
    return Avx2F::hsum_pd(_mm256_add_pd(_mm512_castpd512_pd256(s), _mm512_extractf64x4_pd(s, 1)));
  }
};

// vpdpbusd: per int32 lane, the sum of four u8 x s8 products added to the
// accumulator, without intermediate saturation (AVX512_VNNI + VL for ymm).
struct Avx512VnniDot {
  static constexpr int kQ8Offset = 128;  // q8_dot returns sum((w + 128) * x)
  static constexpr bool kU4PairsInInt16 = false;  // vpdpbusd sums into int32 itself
  struct Q8 {
    __m256i u;
  };
  static Q8 q8_prep(__m256i w) { return {_mm256_xor_si256(w, _mm256_set1_epi8(static_cast<char>(0x80)))}; }
  static __m256i q8_dot(const Q8& p, __m256i x) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), p.u, x); }
  static __m256i u4_dot(__m256i u, __m256i x) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, x); }
  // Accumulating forms: vpdpbusd adds into acc itself, one instruction per
  // dot instead of a dot from zero and an add (integer sums: same lanes).
  static __m256i q8_dot_acc(__m256i acc, const Q8& p, __m256i x) { return _mm256_dpbusd_epi32(acc, p.u, x); }
  static __m256i u4_dot_acc(__m256i acc, __m256i u, __m256i x) { return _mm256_dpbusd_epi32(acc, u, x); }
};

}  // namespace
}  // namespace tessera::kernels
