// AVX2 sparse-input kernel (sparse_input_kernels.h), compiled with those
// flags by the *_avx2.cc rule. Per block and 16 output columns: each pair
// of a group's rows is widened to int16 and interleaved (unpack of words),
// so VPMADDWD against the pair's two broadcast hq sums both rows in each
// int32 lane; lanes hold columns 0-3 8-11 (low) and 4-7 12-15 (high),
// swapped back at the end of the block. No floating-point contraction.
#pragma GCC optimize("fp-contract=off")

#include <immintrin.h>

#include <cstring>

#include "kernels/sparse_input_kernels.h"

namespace tessera::kernels {
namespace {

constexpr int64_t kAhead = 2;  // blocks whose rows are prefetched ahead

inline int32_t pair(uint32_t packed, int r) {  // hq of rows r and r + 1 as two int16
  const int16_t lo = static_cast<int8_t>(static_cast<uint8_t>(packed >> (8 * r)));
  const int16_t hi = static_cast<int8_t>(static_cast<uint8_t>(packed >> (8 * r + 8)));
  return static_cast<int32_t>(static_cast<uint16_t>(lo) | static_cast<uint32_t>(static_cast<uint16_t>(hi)) << 16);
}

inline __m256i widen(const uint8_t* p) { return _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }

template <int T>
void block_pieces(const SparseInputArgs& a, int64_t b, int64_t j0, int64_t j1) {
  const int64_t g = a.blocks[b], gr0 = a.gstart[b], gr1 = a.gstart[b + 1];
  for (int64_t j = j0; j < j1; j += 16) {
    __m256i lo[T], hi[T];
    for (int t = 0; t < T; ++t) lo[t] = hi[t] = _mm256_setzero_si256();
    for (int64_t grp = gr0; grp < gr1; ++grp) {
      const int32_t* r = a.rows + 4 * grp;
      const __m256i w0 = widen(a.u + static_cast<int64_t>(r[0]) * a.stride + j);
      const __m256i w1 = widen(a.u + static_cast<int64_t>(r[1]) * a.stride + j);
      const __m256i w2 = widen(a.u + static_cast<int64_t>(r[2]) * a.stride + j);
      const __m256i w3 = widen(a.u + static_cast<int64_t>(r[3]) * a.stride + j);
      const __m256i l01 = _mm256_unpacklo_epi16(w0, w1), h01 = _mm256_unpackhi_epi16(w0, w1);
      const __m256i l23 = _mm256_unpacklo_epi16(w2, w3), h23 = _mm256_unpackhi_epi16(w2, w3);
      for (int t = 0; t < T; ++t) {
        const uint32_t packed = static_cast<uint32_t>(a.hq4[t * a.n_groups + grp]);
        const __m256i p01 = _mm256_set1_epi32(pair(packed, 0)), p23 = _mm256_set1_epi32(pair(packed, 2));
        lo[t] = _mm256_add_epi32(lo[t], _mm256_add_epi32(_mm256_madd_epi16(l01, p01), _mm256_madd_epi16(l23, p23)));
        hi[t] = _mm256_add_epi32(hi[t], _mm256_add_epi32(_mm256_madd_epi16(h01, p01), _mm256_madd_epi16(h23, p23)));
      }
    }
    const uint16_t* d = a.d + g * a.stride + j;
    const __m256 d0 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(d)));
    const __m256 d1 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(d + 8)));
    for (int t = 0; t < T; ++t) {
      const __m256i corr = _mm256_set1_epi32(a.hsum[t * a.n_blocks + b]);
      const __m256 dx = _mm256_set1_ps(a.dx[t * a.dx_stride + g]);
      const __m256i c0 = _mm256_permute2x128_si256(lo[t], hi[t], 0x20), c1 = _mm256_permute2x128_si256(lo[t], hi[t], 0x31);
      float* y = a.y + t * a.y_stride + j;
      const __m256 f0 = _mm256_cvtepi32_ps(_mm256_sub_epi32(c0, corr)), f1 = _mm256_cvtepi32_ps(_mm256_sub_epi32(c1, corr));
      _mm256_storeu_ps(y, _mm256_fmadd_ps(f0, _mm256_mul_ps(d0, dx), _mm256_loadu_ps(y)));
      _mm256_storeu_ps(y + 8, _mm256_fmadd_ps(f1, _mm256_mul_ps(d1, dx), _mm256_loadu_ps(y + 8)));
    }
  }
}

void run_avx2(const SparseInputArgs& a, int64_t j0, int64_t j1) {
  const int64_t T = a.n_tokens;
  for (int64_t t = 0; t < T; ++t) std::memset(a.y + t * a.y_stride + j0, 0, static_cast<size_t>(j1 - j0) * sizeof(float));
  for (int64_t b = 0; b < a.n_blocks; ++b) {
    if (b + kAhead < a.n_blocks) {
      for (int64_t k = 4 * a.gstart[b + kAhead]; k < 4 * a.gstart[b + kAhead + 1]; ++k) {
        const char* p = reinterpret_cast<const char*>(a.u + static_cast<int64_t>(a.rows[k]) * a.stride + j0);
        for (int64_t off = 0; off < j1 - j0; off += 64) _mm_prefetch(p + off, _MM_HINT_T0);
      }
    }
    switch (T) {
      case 1: block_pieces<1>(a, b, j0, j1); break;
      case 2: block_pieces<2>(a, b, j0, j1); break;
      case 3: block_pieces<3>(a, b, j0, j1); break;
      default: block_pieces<4>(a, b, j0, j1); break;
    }
  }
}

constexpr SparseInputKernels kAvx2 = {"avx2", run_avx2};

}  // namespace

const SparseInputKernels& sparse_input_kernels_avx2() { return kAvx2; }

}  // namespace tessera::kernels
