// AVX2 + FMA + F16C sparse kernels (kernels/sparse.h): super-blocks expanded
// with byte shuffles from a table, integer dots by maddubs as the dense
// AVX2 kernels do them. Called only after CPUID reports AVX2; also the
// AVX-512 table's kernels on CPUs without VBMI2.
#pragma GCC optimize("fp-contract=off")

#include "kernels/sparse_impl.h"

namespace tessera::kernels {
namespace {

// Sum of each of 8 vectors' 8 int32 lanes: lane r = sum of p[r].
inline __m256i reduce8(const __m256i* p) {
  const __m256i h01 = _mm256_hadd_epi32(p[0], p[1]), h23 = _mm256_hadd_epi32(p[2], p[3]);
  const __m256i h45 = _mm256_hadd_epi32(p[4], p[5]), h67 = _mm256_hadd_epi32(p[6], p[7]);
  const __m256i a = _mm256_hadd_epi32(h01, h23), b = _mm256_hadd_epi32(h45, h67);
  return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
}

struct Avx2Sparse {
  static void expand(bool q4, const uint8_t* vp, uint64_t m, int8_t* out) {
    if (q4) {
      alignas(32) int8_t t[64];
      unpack_nibbles(vp, t);
      expand_lut(t, m, out);
    } else {
      expand_lut(reinterpret_cast<const int8_t*>(vp), m, out);
    }
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
    const __m256i ones = _mm256_set1_epi16(1);
    alignas(64) int8_t e[8][64];
    for (int64_t b = 0; b < nb; ++b) {
      if (T == 1) pf.ahead(p);
      const uint8_t* vp = p + kSparseBlockHead;
      for (int r = 0; r < 8; ++r) {
        const uint64_t m = head_mask(p, r);
        expand(q4, vp, m, e[r]);
        vp += block_value_bytes(q4, m);
      }
      const __m256 dw = _mm256_cvtph_ps(head_scales(p));
      p = vp;
      for (int h = 0; h < 2; ++h) {
        __m256i wv[8], wa[8];
        for (int r = 0; r < 8; ++r) {
          wv[r] = _mm256_load_si256(reinterpret_cast<const __m256i*>(e[r] + 32 * h));
          wa[r] = _mm256_abs_epi8(wv[r]);
        }
        for (int t = 0; t < T; ++t) {
          const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq[t] + 64 * b + 32 * h));
          __m256i p[8];
          for (int r = 0; r < 8; ++r) p[r] = _mm256_madd_epi16(_mm256_maddubs_epi16(wa[r], _mm256_sign_epi8(x, wv[r])), ones);
          const __m256 s = _mm256_cvtepi32_ps(reduce8(p));
          acc[t] = _mm256_fmadd_ps(s, _mm256_mul_ps(dw, _mm256_set1_ps(dx[t][2 * b + h])), acc[t]);
        }
      }
    }
    for (int t = 0; t < T; ++t) store_rows(acc[t], a.y + (t0 + t) * a.y_stride + g0, r1 - g0);
  }
};

}  // namespace

void sparse_range_avx2(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  sparse_range_impl<Avx2Sparse>(a, r0, r1, t0, t1);
}

}  // namespace tessera::kernels
