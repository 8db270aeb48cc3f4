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

// A tile's 64 weights as w + 128 (unsigned bytes; pruned: 128, a weight
// of 0): SP_Q8_0 stores q + 128, expanded over a vector of 128s; SP_Q4_0's
// nibbles q (w = q - 8) become q + 120 first.
inline __m512i expand64(bool q4, const uint8_t* vp, uint64_t m) {
  const __m512i zero_w = _mm512_set1_epi8(static_cast<char>(0x80));
  if (!q4) return _mm512_mask_expandloadu_epi8(zero_w, m, vp);
  const __m512i x = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(vp)));
  const __m512i m4 = _mm512_set1_epi16(15);
  const __m512i v = _mm512_or_si512(_mm512_and_si512(x, m4), _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(x, 4), m4), 8));
  return _mm512_mask_expand_epi8(zero_w, m, _mm512_add_epi8(v, _mm512_set1_epi8(120)));
}

struct Avx512Sparse {
  // Signed weights, 0 where pruned (the dense chunks).
  static void expand(bool q4, const uint8_t* vp, uint64_t m, int8_t* out) {
    _mm512_store_si512(out, _mm512_xor_si512(expand64(q4, vp, m), _mm512_set1_epi8(static_cast<char>(0x80))));
  }

  // G groups of 16 rows x T tokens: each tile expanded once (w + 128 as
  // unsigned bytes, pruned: 128: expand64), then per token one VPDPBUSD
  // against the input's 4 values broadcast: lane r accumulates row r's
  // 32-block exactly; 128 * sum(x) comes off after, then the contract's fma
  // per block. Two groups side by side (decode_pair) interleave two
  // streams and two chains of tile addresses.
  template <int T, int G>
  static void decode_groups(const SparseView& w, const MatmulArgs& a, int64_t g0, int64_t r1, int64_t t0) {
    const bool q4 = w.type == DType::kSpQ4_0;
    const int64_t nb = w.cols / kSparseBlock;
    const uint8_t* p[G];
    StreamPrefetch pf[G];
    for (int g = 0; g < G; ++g) {
      p[g] = group_stream(w, g0 / kSparseGroupRows + g);
      pf[g].next = p[g];
    }
    const int8_t* xq[T];
    const float* dx[T];
    const int16_t* xs[T];
    __m512 acc[G][T];
    for (int t = 0; t < T; ++t) {
      xq[t] = act_q(a, t0 + t);
      dx[t] = act_d(a, t0 + t);
      xs[t] = act_sums(a, t0 + t);
      for (int g = 0; g < G; ++g) acc[g][t] = _mm512_setzero_ps();
    }
    for (int64_t b = 0; b < nb; ++b) {
      for (int g = 0; g < G; ++g) {
        if (T == 1) pf[g].ahead(p[g]);
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p[g] + 8 * kSparseGroupRows)));
        const uint8_t* vp = p[g] + kSparseBlockHead;
        for (int h = 0; h < 2; ++h) {
          __m512i is[T];
          for (int t = 0; t < T; ++t) is[t] = _mm512_setzero_si512();
          for (int j = 8 * h; j < 8 * h + 8; ++j) {
            const uint64_t m = head_mask(p[g], j);
            const __m512i wu = expand64(q4, vp, m);
            vp += block_value_bytes(q4, m);
            for (int t = 0; t < T; ++t) is[t] = _mm512_dpbusd_epi32(is[t], wu, _mm512_set1_epi32(x_dword(xq[t], b, j)));
          }
          for (int t = 0; t < T; ++t) {
            const __m512i v = _mm512_sub_epi32(is[t], _mm512_set1_epi32(128 * xs[t][2 * b + h]));
            acc[g][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(v), _mm512_mul_ps(dw, _mm512_set1_ps(dx[t][2 * b + h])), acc[g][t]);
          }
        }
        p[g] = vp;
      }
    }
    for (int g = 0; g < G; ++g) {
      const int64_t first = g0 + g * kSparseGroupRows;
      for (int t = 0; t < T; ++t) {
        float* y = a.y + (t0 + t) * a.y_stride + first;
        store_rows(_mm512_castps512_ps256(acc[g][t]), y, r1 - first);
        store_rows(_mm512_extractf32x8_ps(acc[g][t], 1), y + 8, r1 - first - 8);
      }
    }
  }

  template <int T>
  static void decode(const SparseView& w, const MatmulArgs& a, int64_t g0, int64_t r1, int64_t t0) {
    decode_groups<T, 1>(w, a, g0, r1, t0);
  }
  static constexpr bool kPairs = true;
  static void decode_pair(const SparseView& w, const MatmulArgs& a, int64_t g0, int64_t r1, int64_t t0) {
    decode_groups<1, 2>(w, a, g0, r1, t0);
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
