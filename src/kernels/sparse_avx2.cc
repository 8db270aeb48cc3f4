// AVX2 + FMA + F16C sparse kernels (kernels/sparse.h): super-blocks expanded
// with byte shuffles from a table, integer dots by maddubs as the dense
// AVX2 kernels do them. Called only after CPUID reports AVX2; also the
// AVX-512 table's kernels on CPUs without VBMI2.
#pragma GCC optimize("fp-contract=off")

#include "kernels/sparse_impl.h"

namespace tessera::kernels {
namespace {

struct Avx2Sparse {
  static void expand(bool q4, const uint8_t* vp, uint64_t m, int8_t* out) {
    if (q4) {
      alignas(32) int8_t t[64];
      unpack_nibbles(vp, t);
      expand_lut(t, m, out, false);
    } else {
      expand_lut(reinterpret_cast<const int8_t*>(vp), m, out, true);
    }
  }

  // 16 rows x T tokens as two halves of 8 (a ymm each): each tile expanded
  // once, then per token and half maddubs on |w| and x with w's sign
  // against the input's 4 values broadcast (lane r: row r's products),
  // summed exactly in int32 over the block, then the contract's fma.
  static constexpr bool kPairs = false;
  static void decode_pair(const SparseView&, const MatmulArgs&, int64_t, int64_t, int64_t) {}

  template <int T>
  static void decode(const SparseView& w, const MatmulArgs& a, int64_t g0, int64_t r1, int64_t t0) {
    const bool q4 = w.type == DType::kSpQ4_0;
    const int64_t nb = w.cols / kSparseBlock;
    const uint8_t* p = group_stream(w, g0 / kSparseGroupRows);
    StreamPrefetch pf{p};
    const int8_t* xq[T];
    const float* dx[T];
    __m256 acc[T][2];
    for (int t = 0; t < T; ++t) {
      xq[t] = act_q(a, t0 + t);
      dx[t] = act_d(a, t0 + t);
      acc[t][0] = acc[t][1] = _mm256_setzero_ps();
    }
    const __m256i ones = _mm256_set1_epi16(1);
    alignas(64) int8_t e[64];
    for (int64_t b = 0; b < nb; ++b) {
      if (T == 1) pf.ahead(p);
      const __m256 dw[2] = {_mm256_cvtph_ps(head_scales(p, 0)), _mm256_cvtph_ps(head_scales(p, 1))};
      const uint8_t* vp = p + kSparseBlockHead;
      for (int h = 0; h < 2; ++h) {
        __m256i is[T][2];
        for (int t = 0; t < T; ++t) is[t][0] = is[t][1] = _mm256_setzero_si256();
        for (int j = 8 * h; j < 8 * h + 8; ++j) {
          const uint64_t m = head_mask(p, j);
          expand(q4, vp, m, e);
          vp += block_value_bytes(q4, m);
          for (int half = 0; half < 2; ++half) {
            const __m256i wv = _mm256_load_si256(reinterpret_cast<const __m256i*>(e + 32 * half));
            const __m256i wa = _mm256_abs_epi8(wv);
            for (int t = 0; t < T; ++t) {
              const __m256i x = _mm256_set1_epi32(x_dword(xq[t], b, j));
              is[t][half] = _mm256_add_epi32(is[t][half], _mm256_madd_epi16(_mm256_maddubs_epi16(wa, _mm256_sign_epi8(x, wv)), ones));
            }
          }
        }
        for (int t = 0; t < T; ++t) {
          for (int half = 0; half < 2; ++half) {
            acc[t][half] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[t][half]),
                                           _mm256_mul_ps(dw[half], _mm256_set1_ps(dx[t][2 * b + h])), acc[t][half]);
          }
        }
      }
      p = vp;
    }
    for (int t = 0; t < T; ++t) {
      float* y = a.y + (t0 + t) * a.y_stride + g0;
      store_rows(acc[t][0], y, r1 - g0);
      store_rows(acc[t][1], y + 8, r1 - g0 - 8);
    }
  }
};

}  // namespace

void sparse_range_avx2(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  sparse_range_impl<Avx2Sparse>(a, r0, r1, t0, t1);
}

}  // namespace tessera::kernels
