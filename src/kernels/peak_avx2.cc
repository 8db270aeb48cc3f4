// Peak loops for AVX2 + FMA (compiled with those flags by the *_avx2.cc rule).
#include "kernels/peak_impl.h"
#include "kernels/simd_avx2.h"

namespace tessera::kernels {
namespace {

// vpmaddubsw alone: 32 byte products summed in pairs into 16 int16 lanes.
PeakLoopResult int8_hw_loop(int64_t iters, int8_t a, int8_t b) {
  constexpr int kChains = 12;
  __m256i acc[kChains], w[kChains];
  for (int i = 0; i < kChains; ++i) {
    acc[i] = _mm256_setzero_si256();
    w[i] = _mm256_set1_epi8(static_cast<char>(a));
    __asm__ volatile("" : "+x"(w[i]));
  }
  __m256i x = _mm256_set1_epi8(static_cast<char>(b));
  for (int64_t it = 0; it < iters; ++it) {
    for (int i = 0; i < kChains; ++i) acc[i] = _mm256_add_epi16(acc[i], _mm256_maddubs_epi16(w[i], x));
    __asm__ volatile("" : "+x"(x));
  }
  alignas(32) int16_t lanes[16];
  int64_t sum = 0;
  for (int i = 0; i < kChains; ++i) {
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), acc[i]);
    for (int16_t v : lanes) sum += v;
  }
  return {iters * kChains * 32, sum};
}

}  // namespace

const PeakLoops& peak_loops_avx2() {
  static constexpr PeakLoops loops = {int8_loop<Avx2Dot>, Avx2Dot::kQ8Offset, f32_loop<Avx2F>, int8_hw_loop};
  return loops;
}

}  // namespace tessera::kernels
