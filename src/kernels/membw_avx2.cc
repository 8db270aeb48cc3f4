// The bandwidth probe's read loop for AVX2: 256-bit loads, two cache lines
// per trip into four independent accumulators, the way the decode kernels
// stream weights (the scalar loop issues 8-byte loads, and where the
// compiler does not vectorise it, a quarter of the bytes per load).
#include <immintrin.h>

#include "kernels/membw_kernels.h"

namespace tessera::kernels {

uint64_t read_sum_avx2(const uint64_t* p, size_t words) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + 16 <= words; i += 16) {
    a0 = _mm256_add_epi64(a0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_add_epi64(a1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 4)));
    a2 = _mm256_add_epi64(a2, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 8)));
    a3 = _mm256_add_epi64(a3, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 12)));
  }
  const __m256i s = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), s);
  uint64_t sum = lanes[0] + lanes[1] + lanes[2] + lanes[3];
  for (; i < words; ++i) sum += p[i];
  return sum;
}

}  // namespace tessera::kernels
