// AVX-512 sparse-input kernel (sparse_input_kernels.h), compiled with those
// flags by the *_avx512.cc rule; only called after CPUID reports them.
// Per block and 64 output columns: the 64 stored bytes of each group's four
// input rows are interleaved (two unpacks of bytes, two of words) so that
// int32 lane m of 128-bit lane L of vector s holds the four rows' values of
// column 16 L + 4 s + m; VPDPBUSD against the group's four broadcast hq sums
// them. At the end of the block the four vectors are transposed by 128-bit
// lanes back to column order, corrected by 128 * sum(hq), converted and
// scaled. No floating-point contraction.
#pragma GCC optimize("fp-contract=off")
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include <cstring>

#include "kernels/sparse_input_kernels.h"

namespace tessera::kernels {
namespace {

constexpr int kPrefetch = 512;  // bytes ahead in each row
constexpr _mm_hint kHint = _MM_HINT_T0;

// Four rows' 64 bytes at `off` interleaved: int32 lane m of 128-bit lane L
// of vector s holds the rows' values of column 16 L + 4 s + m.
inline void interleave(const uint8_t* const* p, int64_t off, __m512i* v) {
  const __m512i a0 = _mm512_loadu_si512(p[0] + off), a1 = _mm512_loadu_si512(p[1] + off);
  const __m512i a2 = _mm512_loadu_si512(p[2] + off), a3 = _mm512_loadu_si512(p[3] + off);
  const __m512i lo01 = _mm512_unpacklo_epi8(a0, a1), hi01 = _mm512_unpackhi_epi8(a0, a1);
  const __m512i lo23 = _mm512_unpacklo_epi8(a2, a3), hi23 = _mm512_unpackhi_epi8(a2, a3);
  v[0] = _mm512_unpacklo_epi16(lo01, lo23);
  v[1] = _mm512_unpackhi_epi16(lo01, lo23);
  v[2] = _mm512_unpacklo_epi16(hi01, hi23);
  v[3] = _mm512_unpackhi_epi16(hi01, hi23);
}

// The block's sums for output columns [j0, j1) into isum ([T][64-column
// piece][4 vectors][16] int32), two groups (eight row streams) at a time,
// each row prefetched kPrefetch bytes ahead of its loads and the next
// pair's first kPrefetch bytes at the start (as the gathered-row matmul).
template <int T>
void block_sums(const SparseInputArgs& a, int64_t b, int64_t j0, int64_t j1, int32_t* isum) {
  const int64_t np = (j1 - j0) / 64, gr0 = a.gstart[b], gr1 = a.gstart[b + 1];
  const auto row = [&](int64_t k) { return a.u + static_cast<int64_t>(a.rows[k]) * a.stride + j0; };
  for (int64_t grp = gr0; grp < gr1; grp += 2) {
    const bool two = grp + 1 < gr1;
    const uint8_t* p[8];
    for (int r = 0; r < 8; ++r) p[r] = row(4 * grp + (two || r < 4 ? r : r - 4));
    __m512i h0[T], h1[T];
    for (int t = 0; t < T; ++t) {
      h0[t] = _mm512_set1_epi32(a.hq4[t * a.n_groups + grp]);
      h1[t] = two ? _mm512_set1_epi32(a.hq4[t * a.n_groups + grp + 1]) : _mm512_setzero_si512();
    }
    const bool first = grp == gr0;
    for (int64_t k = 4 * (grp + 2); k < 4 * (grp + 4) && k < 4 * a.n_groups; ++k) {
      const char* f = reinterpret_cast<const char*>(row(k));
      for (int off = 0; off < kPrefetch && off < j1 - j0; off += 64) _mm_prefetch(f + off, kHint);
    }
    for (int64_t q = 0; q < np; ++q) {
      if (64 * q + kPrefetch < j1 - j0) {
        for (int r = 0; r < 8; ++r) _mm_prefetch(reinterpret_cast<const char*>(p[r] + 64 * q + kPrefetch), kHint);
      }
      __m512i v0[4], v1[4];
      interleave(p, 64 * q, v0);
      interleave(p + 4, 64 * q, v1);
      for (int t = 0; t < T; ++t) {
        int32_t* is = isum + (t * kSparseInputChunk / 64 + q) * 64;
        for (int s = 0; s < 4; ++s) {
          const __m512i acc = first ? _mm512_setzero_si512() : _mm512_load_si512(is + 16 * s);
          _mm512_store_si512(is + 16 * s, _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(acc, v0[s], h0[t]), v1[s], h1[t]));
        }
      }
    }
  }
}

// y += the block's scaled sums: vector s lane (L, m) of a piece = column
// 16 L + 4 s + m, so 128-bit lane L of the output is lane L of vectors 0..3.
template <int T>
void block_finish(const SparseInputArgs& a, int64_t b, int64_t j0, int64_t j1, const int32_t* isum) {
  const int64_t g = a.blocks[b], np = (j1 - j0) / 64;
  for (int t = 0; t < T; ++t) {
    const __m512i corr = _mm512_set1_epi32(a.hsum[t * a.n_blocks + b]);
    const __m512 dx = _mm512_set1_ps(a.dx[t * a.dx_stride + g]);
    for (int64_t p = 0; p < np; ++p) {
      const int32_t* is = isum + (t * kSparseInputChunk / 64 + p) * 64;
      const __m512i v0 = _mm512_load_si512(is), v1 = _mm512_load_si512(is + 16);
      const __m512i v2 = _mm512_load_si512(is + 32), v3 = _mm512_load_si512(is + 48);
      const __m512i t0 = _mm512_shuffle_i32x4(v0, v1, 0x44), t1 = _mm512_shuffle_i32x4(v2, v3, 0x44);
      const __m512i t2 = _mm512_shuffle_i32x4(v0, v1, 0xEE), t3 = _mm512_shuffle_i32x4(v2, v3, 0xEE);
      const __m512i o[4] = {_mm512_shuffle_i32x4(t0, t1, 0x88), _mm512_shuffle_i32x4(t0, t1, 0xDD),
                            _mm512_shuffle_i32x4(t2, t3, 0x88), _mm512_shuffle_i32x4(t2, t3, 0xDD)};
      float* y = a.y + t * a.y_stride + j0 + 64 * p;
      const uint16_t* d = a.d + g * a.stride + j0 + 64 * p;
      for (int q = 0; q < 4; ++q) {
        const __m512 f = _mm512_cvtepi32_ps(_mm512_sub_epi32(o[q], corr));
        const __m512 sc = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(d + 16 * q))), dx);
        _mm512_storeu_ps(y + 16 * q, _mm512_fmadd_ps(f, sc, _mm512_loadu_ps(y + 16 * q)));
      }
    }
  }
}

template <int T>
void block(const SparseInputArgs& a, int64_t b, int64_t j0, int64_t j1, int32_t* isum) {
  block_sums<T>(a, b, j0, j1, isum);
  block_finish<T>(a, b, j0, j1, isum);
}

void run_avx512(const SparseInputArgs& a, int64_t j0, int64_t j1) {
  const int64_t T = a.n_tokens;
  alignas(64) int32_t isum[kSparseInputMaxTokens * kSparseInputChunk];
  for (int64_t t = 0; t < T; ++t) std::memset(a.y + t * a.y_stride + j0, 0, static_cast<size_t>(j1 - j0) * sizeof(float));
  for (int64_t b = 0; b < a.n_blocks; ++b) {
    switch (T) {
      case 1: block<1>(a, b, j0, j1, isum); break;
      case 2: block<2>(a, b, j0, j1, isum); break;
      case 3: block<3>(a, b, j0, j1, isum); break;
      default: block<4>(a, b, j0, j1, isum); break;
    }
  }
}

constexpr SparseInputKernels kAvx512 = {"avx512", run_avx512};

}  // namespace

const SparseInputKernels& sparse_input_kernels_avx512() { return kAvx512; }

}  // namespace tessera::kernels
