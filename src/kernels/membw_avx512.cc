// The bandwidth probe's read loop for AVX-512: 512-bit loads, four cache
// lines per trip into four independent accumulators.
#include <immintrin.h>

#include "kernels/membw_kernels.h"

namespace tessera::kernels {

uint64_t read_sum_avx512(const uint64_t* p, size_t words) {
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + 32 <= words; i += 32) {
    a0 = _mm512_add_epi64(a0, _mm512_loadu_si512(p + i));
    a1 = _mm512_add_epi64(a1, _mm512_loadu_si512(p + i + 8));
    a2 = _mm512_add_epi64(a2, _mm512_loadu_si512(p + i + 16));
    a3 = _mm512_add_epi64(a3, _mm512_loadu_si512(p + i + 24));
  }
  // Lanes summed as unsigned words: GCC's _mm512_reduce_add_epi64 adds
  // them as signed long long, which overflows (undefined; UBSan's find on
  // the first AVX-512 machine) for sums that wrap.
  alignas(64) uint64_t lanes[8];
  _mm512_store_si512(lanes, _mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3)));
  uint64_t sum = 0;
  for (uint64_t v : lanes) sum += v;
  for (; i < words; ++i) sum += p[i];
  return sum;
}

}  // namespace tessera::kernels
