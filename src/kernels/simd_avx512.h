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
};

// vpdpbusd: per int32 lane, the sum of four u8 x s8 products added to the
// accumulator, without intermediate saturation (AVX512_VNNI + VL for ymm).
struct Avx512VnniDot {
  static constexpr int kQ8Offset = 128;  // q8_dot returns sum((w + 128) * x)
  struct Q8 {
    __m256i u;
  };
  static Q8 q8_prep(__m256i w) { return {_mm256_xor_si256(w, _mm256_set1_epi8(static_cast<char>(0x80)))}; }
  static __m256i q8_dot(const Q8& p, __m256i x) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), p.u, x); }
  static __m256i u4_dot(__m256i u, __m256i x) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, x); }
};

}  // namespace
}  // namespace tessera::kernels
