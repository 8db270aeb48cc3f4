// AVX-512 sparse kernels (kernels/sparse.h): a super-block's 64 values
// expanded into place by one VPEXPANDB (AVX-512 VBMI2) under its mask, and
// the integer dots by VPDPBUSD on |w| and x with w's sign, as the dense
// AVX-512 kernels do. On CPUs with AVX-512 but without VBMI2 (Skylake-X,
// Cascade Lake) the AVX2 kernels run instead.
#pragma GCC optimize("fp-contract=off")

#include "core/cpu.h"
#include "kernels/sparse_impl.h"

namespace tessera::kernels {
namespace {

inline __m512i expand64(bool q4, const uint8_t* vp, uint64_t m) {
  if (!q4) return _mm512_maskz_expandloadu_epi8(m, vp);
  const __m512i x = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(vp)));
  const __m512i m4 = _mm512_set1_epi16(15);
  const __m512i v = _mm512_or_si512(_mm512_and_si512(x, m4), _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(x, 4), m4), 8));
  return _mm512_maskz_expand_epi8(m, _mm512_sub_epi8(v, _mm512_set1_epi8(8)));
}

// p[r]: 16 int32 lanes, 0..7 from the super-block's first 32-block, 8..15
// from its second. Returns the 8 rows' sums of the first (*s0) and second
// (*s1) halves, lane r = row r.
inline void reduce8x2(const __m512i* p, __m256i* s0, __m256i* s1) {
  __m512i a[4], b[2];
  for (int k = 0; k < 4; ++k) {
    a[k] = _mm512_add_epi32(_mm512_unpacklo_epi32(p[2 * k], p[2 * k + 1]), _mm512_unpackhi_epi32(p[2 * k], p[2 * k + 1]));
  }
  for (int k = 0; k < 2; ++k) {
    b[k] = _mm512_add_epi32(_mm512_unpacklo_epi64(a[2 * k], a[2 * k + 1]), _mm512_unpackhi_epi64(a[2 * k], a[2 * k + 1]));
  }
  // 128-bit lane L of b[k] holds rows 4k..4k+3's sums of int32 lanes 4L..4L+3.
  const __m512i c = _mm512_shuffle_i32x4(b[0], b[1], 0x88), d = _mm512_shuffle_i32x4(b[0], b[1], 0xdd);
  const __m512i e = _mm512_add_epi32(c, d);  // [s0 r0-3, s1 r0-3, s0 r4-7, s1 r4-7]
  const __m512i f = _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 12, 13, 14, 15), e);
  *s0 = _mm512_castsi512_si256(f);
  *s1 = _mm512_extracti64x4_epi64(f, 1);
}

struct Avx512Sparse {
  static void expand(bool q4, const uint8_t* vp, uint64_t m, int8_t* out) {
    _mm512_store_si512(out, expand64(q4, vp, m));
  }

  template <int T>
  static void decode(const SparseView& w, const MatmulArgs& a, int64_t g0, int64_t r1, int64_t t0) {
    const bool q4 = w.type == DType::kSpQ4_0;
    const int64_t nb = w.cols / kSparseBlock;
    const uint8_t* p = group_stream(w, g0 / kRowTile);
    StreamPrefetch pf{p};
    const int8_t* xq[T];
    const float* dx[T];
    __m256 acc[T];
    for (int t = 0; t < T; ++t) {
      xq[t] = act_q(a, t0 + t);
      dx[t] = act_d(a, t0 + t);
      acc[t] = _mm256_setzero_ps();
    }
    const int16_t* xs[T];  // the activation's sums over each 32-block
    for (int t = 0; t < T; ++t) xs[t] = act_sums(a, t0 + t);
    const __m512i zero = _mm512_setzero_si512(), offset = _mm512_set1_epi8(static_cast<char>(0x80));
    for (int64_t b = 0; b < nb; ++b) {
      if (T == 1) pf.ahead(p);
      // w + 128 as unsigned bytes (pruned: 128), so VPDPBUSD multiplies it by
      // x directly; 128 * sum(x) comes off after the sum.
      __m512i wu[8];
      const uint8_t* vp = p + kSparseBlockHead;
      for (int r = 0; r < 8; ++r) {
        const uint64_t m = head_mask(p, r);
        wu[r] = _mm512_xor_si512(expand64(q4, vp, m), offset);
        vp += block_value_bytes(q4, m);
      }
      const __m256 dw = _mm256_cvtph_ps(head_scales(p));
      p = vp;
      for (int t = 0; t < T; ++t) {
        const __m512i x = _mm512_loadu_si512(xq[t] + 64 * b);
        __m512i pr[8];
        for (int r = 0; r < 8; ++r) pr[r] = _mm512_dpbusd_epi32(zero, wu[r], x);
        __m256i s0, s1;
        reduce8x2(pr, &s0, &s1);
        s0 = _mm256_sub_epi32(s0, _mm256_set1_epi32(128 * xs[t][2 * b]));
        s1 = _mm256_sub_epi32(s1, _mm256_set1_epi32(128 * xs[t][2 * b + 1]));
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s0), _mm256_mul_ps(dw, _mm256_set1_ps(dx[t][2 * b])), acc[t]);
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s1), _mm256_mul_ps(dw, _mm256_set1_ps(dx[t][2 * b + 1])), acc[t]);
      }
    }
    for (int t = 0; t < T; ++t) store_rows(acc[t], a.y + (t0 + t) * a.y_stride + g0, r1 - g0);
  }
};

}  // namespace

void sparse_range_avx512(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  if (!cpu_features().avx512vbmi2) {
    sparse_range_avx2(a, r0, r1, t0, t1);
    return;
  }
  sparse_range_impl<Avx512Sparse>(a, r0, r1, t0, t1);
}

}  // namespace tessera::kernels
