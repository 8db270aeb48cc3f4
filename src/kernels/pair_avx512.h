// Loads and decoders of the 16-row pair (two consecutive packed 8-row
// groups side by side in one zmm, matmul_kernels.h's layouts), shared by
// the two files compiled with the AVX-512 flags that walk pairs: the
// AVX-512 prompt tiles (matmul_avx512.cc) and the AMX ones (matmul_amx.cc).
// Internal linkage only (docs/KERNELS.md, "ODR rule"): include from those
// files alone.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace tessera::kernels {
namespace {

// 32 bytes at lo (rows 0-7), then 32 at hi (rows 8-15).
static inline __m512i join256(const uint8_t* lo, const uint8_t* hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(lo))),
                            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(hi)), 1);
}

// 16 bytes at lo, then 16 at hi.
static inline __m256i join128(const uint8_t* lo, const uint8_t* hi) {
  return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(lo))),
                                 _mm_loadu_si128(reinterpret_cast<const __m128i*>(hi)), 1);
}

// 8 bytes at lo, then 8 at hi: a byte per row of the pair.
static inline __m128i join64(const uint8_t* lo, const uint8_t* hi) {
  return _mm_unpacklo_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(lo)),
                            _mm_loadl_epi64(reinterpret_cast<const __m128i*>(hi)));
}

// A byte per row (8 at lo, 8 at hi) widened to unsigned int32 lanes.
static inline __m512i scale_lanes16(const uint8_t* lo, const uint8_t* hi) {
  return _mm512_cvtepu8_epi32(join64(lo, hi));
}

// The 16 rows' fp16 scales (8 at lo, 8 at hi) as floats.
static inline __m512 fp16x16(const uint8_t* lo, const uint8_t* hi) { return _mm512_cvtph_ps(join128(lo, hi)); }

// Q6_K / Q3_K: the int8 scale of sub-block sb of each of the 16 rows as int32 lanes.
static inline __m512i q6_scale16(const uint8_t* b0, const uint8_t* b1, int sb) {
  const __m512i w = _mm512_cvtepi8_epi16(join128(b0 + 16 + 16 * (sb / 2), b1 + 16 + 16 * (sb / 2)));
  return sb % 2 == 0 ? _mm512_srai_epi32(_mm512_slli_epi32(w, 16), 16) : _mm512_srai_epi32(w, 16);
}

// Q6_K: the fourth value of each 3-byte group, from the three bytes' top bits.
static inline __m512i q6_fourth16(__m512i v0, __m512i v1, __m512i v2) {
  const __m512i a = _mm512_and_si512(_mm512_srli_epi16(v0, 6), _mm512_set1_epi8(0x03));
  const __m512i b = _mm512_and_si512(_mm512_srli_epi16(v1, 4), _mm512_set1_epi8(0x0c));
  const __m512i c = _mm512_and_si512(_mm512_srli_epi16(v2, 2), _mm512_set1_epi8(0x30));
  return _mm512_or_si512(_mm512_or_si512(a, b), c);
}

// Q5_K: ors the fifth bits of sub-block pair p into lo (sub-block 2p) and
// hi (2p + 1, as nibble values 0..15): bits 2p and 2p + 1 of qh become bit 4.
static inline void q5_k_fifth_bits16(__m512i qh, int p, __m512i& lo, __m512i& hi) {
  const __m512i bl = _mm512_and_si512(qh, _mm512_set1_epi8(static_cast<char>(1 << (2 * p))));
  const __m512i bh = _mm512_and_si512(qh, _mm512_set1_epi8(static_cast<char>(1 << (2 * p + 1))));
  lo = _mm512_or_si512(lo, 2 * p <= 4 ? _mm512_slli_epi16(bl, 4 - 2 * p) : _mm512_srli_epi16(bl, 2 * p - 4));
  hi = _mm512_or_si512(hi, 2 * p + 1 <= 4 ? _mm512_slli_epi16(bh, 3 - 2 * p) : _mm512_srli_epi16(bh, 2 * p - 3));
}

}  // namespace
}  // namespace tessera::kernels
