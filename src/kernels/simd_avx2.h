// 256-bit vector traits for the kernel templates, and the integer-dot
// strategies of the quantized kernels. Include only from *_avx2.cc and
// *_avx512.cc files (it needs AVX2/FMA/F16C code generation).
//
// ODR rule: everything here has internal linkage (anonymous namespace), so
// code compiled for one ISA can never be picked by the linker for another.
// Only intrinsics, raw pointers and POD are used; no std:: templates.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace tessera::kernels {
namespace {

alignas(32) constexpr int32_t kTailMask32[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};

// Float vectors of 8 lanes.
struct Avx2F {
  using V = __m256;
  static constexpr int kW = 8;

  static V zero() { return _mm256_setzero_ps(); }
  static V set1(float v) { return _mm256_set1_ps(v); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  // First n (0 < n < kW) values, the rest zero; reads only those n.
  static __m256i tail_mask(int n) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kTailMask32 + 8 - n));
  }
  static V load_tail(const float* p, int n) { return _mm256_maskload_ps(p, tail_mask(n)); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static void store_tail(float* p, V v, int n) { _mm256_maskstore_ps(p, tail_mask(n), v); }
  static V load_f16(const void* p) { return _mm256_cvtph_ps(_mm_loadu_si128(static_cast<const __m128i*>(p))); }
  static V load_f16_tail(const void* p, int n) {
    alignas(16) uint16_t h[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    std::memcpy(h, p, static_cast<size_t>(n) * 2);
    return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(h)));
  }
  // 8 int8 codes as f32; 8 4-bit codes (4 bytes, low nibble first) minus 8.
  static V load_i8(const void* p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(static_cast<const __m128i*>(p))));
  }
  static V load_q4_pairs(const void* p) {
    int32_t w;
    std::memcpy(&w, p, 4);
    const __m128i b = _mm_cvtsi32_si128(w);
    const __m128i m = _mm_set1_epi8(0x0f);
    const __m128i q = _mm_unpacklo_epi8(_mm_and_si128(b, m), _mm_and_si128(_mm_srli_epi16(b, 4), m));
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_sub_epi8(q, _mm_set1_epi8(8))));
  }
  static V bf16_widen(__m128i h) { return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)); }
  static V load_bf16(const void* p) { return bf16_widen(_mm_loadu_si128(static_cast<const __m128i*>(p))); }
  static V load_bf16_tail(const void* p, int n) {
    alignas(16) uint16_t h[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    std::memcpy(h, p, static_cast<size_t>(n) * 2);
    return bf16_widen(_mm_load_si128(reinterpret_cast<const __m128i*>(h)));
  }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V fmadd(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V max(V a, V b) { return _mm256_max_ps(a, b); }
  static V abs(V a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a); }
  // Fixed reduction tree: (lo half + hi half), then pairs, then the last two.
  static float hsum(V v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static float hmax(V v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  // Sum of the first n lanes (0 < n <= kW).
  static float hsum_tail(V v, int n) {
    return n == kW ? hsum(v) : hsum(_mm256_and_ps(v, _mm256_castsi256_ps(tail_mask(n))));
  }
  // Like load_tail, with `fill` in the lanes past n.
  static V load_tail_fill(const float* p, int n, float fill) {
    const __m256i m = tail_mask(n);
    return _mm256_blendv_ps(_mm256_set1_ps(fill), _mm256_maskload_ps(p, m), _mm256_castsi256_ps(m));
  }
  static V min(V a, V b) { return _mm256_min_ps(a, b); }
  static V div(V a, V b) { return _mm256_div_ps(a, b); }
  static V fnmadd(V a, V b, V c) { return _mm256_fnmadd_ps(a, b, c); }
  static V round(V a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  // 2^n for integral n in [-126, 127], through the exponent bits.
  static V pow2(V n) {
    return _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
  }
  // [v1, v0, v3, v2, ...]
  static V swap_pairs(V v) { return _mm256_permute_ps(v, 0xb1); }
  static V iota() { return _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7); }
  using M = __m256;
  static M cmp_gt(V a, V b) { return _mm256_cmp_ps(a, b, _CMP_GT_OQ); }  // false if either is NaN
  static V blend(M m, V a, V b) { return _mm256_blendv_ps(b, a, m); }     // m ? a : b
  static double hsum_pd(__m256d v) {
    __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
    s = _mm_add_sd(s, _mm_unpackhi_pd(s, s));
    return _mm_cvtsd_f64(s);
  }
  // sum of x[i]^2 in double (each square is exact in double).
  static double sum_squares(const float* x, int64_t n) {
    __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
    int64_t i = 0;
    for (; i < n; i += kW) {
      const V v = n - i >= kW ? load(x + i) : load_tail(x + i, static_cast<int>(n - i));
      const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
      const __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
      a0 = _mm256_fmadd_pd(lo, lo, a0);
      a1 = _mm256_fmadd_pd(hi, hi, a1);
    }
    return hsum_pd(_mm256_add_pd(a0, a1));
  }
};

// Integer dot strategies. Each returns, in int32 lane i, the exact dot of
// bytes 4i..4i+3 (the plain-layout kernels only use the lane total; the
// packed-layout kernels need lane i = row i).
//
// Avx2Dot: vpmaddubsw needs an unsigned operand and saturates its int16
// pair sums, so signed Q8_0 weights use the sign trick (|w| times x with
// w's sign), which keeps every pair within 2 * 128 * 127 < 32767.
struct Avx2Dot {
  static constexpr int kQ8Offset = 0;  // q8_dot returns sum(w * x) itself
  static constexpr bool kU4PairsInInt16 = true;  // see ptile
  struct Q8 {
    __m256i abs_w, w;
  };
  static Q8 q8_prep(__m256i w) { return {_mm256_abs_epi8(w), w}; }
  static __m256i q8_dot(const Q8& p, __m256i x) {
    const __m256i pairs = _mm256_maddubs_epi16(p.abs_w, _mm256_sign_epi8(x, p.w));
    return _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
  }
  // u in 0..15: pair sums stay within 2 * 15 * 127.
  static __m256i u4_dot(__m256i u, __m256i x) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, x), _mm256_set1_epi16(1));
  }
  // acc + q8_dot / acc + u4_dot (exact integer adds: the same lanes).
  static __m256i q8_dot_acc(__m256i acc, const Q8& p, __m256i x) { return _mm256_add_epi32(acc, q8_dot(p, x)); }
  static __m256i u4_dot_acc(__m256i acc, __m256i u, __m256i x) { return _mm256_add_epi32(acc, u4_dot(u, x)); }
};

// The strategy vpdpbusd (unsigned x signed bytes, int32 sums, no
// saturation) allows: Q8_0 weights offset to unsigned (w ^ 0x80 = w + 128),
// corrected by -128 * sum(x) per block. Here emulated with AVX2 widening
// multiplies so the offset logic runs (and is tested) without AVX-512.
struct Avx2VnniEmulatedDot {
  static constexpr int kQ8Offset = 128;  // q8_dot returns sum((w + 128) * x)
  static constexpr bool kU4PairsInInt16 = false;  // vpdpbusd sums into int32 itself
  struct Q8 {
    __m256i u;
  };
  static Q8 q8_prep(__m256i w) { return {_mm256_xor_si256(w, _mm256_set1_epi8(static_cast<char>(0x80)))}; }
  static __m256i dpbusd(__m256i u, __m256i s) {
    // lo lane k = bytes 2k, 2k+1 (k < 8), hi the same for bytes 16..31;
    // hadd gives groups [0 1 4 5 | 2 3 6 7], the permute restores 0..7.
    const __m256i lo = _mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm256_castsi256_si128(u)),
                                         _mm256_cvtepi8_epi16(_mm256_castsi256_si128(s)));
    const __m256i hi = _mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm256_extracti128_si256(u, 1)),
                                         _mm256_cvtepi8_epi16(_mm256_extracti128_si256(s, 1)));
    return _mm256_permute4x64_epi64(_mm256_hadd_epi32(lo, hi), 0xd8);
  }
  static __m256i q8_dot(const Q8& p, __m256i x) { return dpbusd(p.u, x); }
  static __m256i u4_dot(__m256i u, __m256i x) { return dpbusd(u, x); }
  static __m256i q8_dot_acc(__m256i acc, const Q8& p, __m256i x) { return _mm256_add_epi32(acc, dpbusd(p.u, x)); }
  static __m256i u4_dot_acc(__m256i acc, __m256i u, __m256i x) { return _mm256_add_epi32(acc, dpbusd(u, x)); }
};

}  // namespace
}  // namespace tessera::kernels
