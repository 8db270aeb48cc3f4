// Peak loops for AVX-512 (VNNI's vpdpbusd for int8, 512-bit FMAs).
#include "kernels/peak_impl.h"
#include "kernels/simd_avx512.h"

namespace tessera::kernels {
namespace {

// zmm vpdpbusd alone: 64 byte products summed in fours into 16 int32 lanes.
PeakLoopResult int8_hw_loop(int64_t iters, int8_t a, int8_t b) {
  constexpr int kChains = 12;
  __m512i acc[kChains], w[kChains];
  for (int i = 0; i < kChains; ++i) {
    acc[i] = _mm512_setzero_si512();
    w[i] = _mm512_set1_epi8(static_cast<char>(a));
    __asm__ volatile("" : "+v"(w[i]));
  }
  __m512i x = _mm512_set1_epi8(static_cast<char>(b));
  for (int64_t it = 0; it < iters; ++it) {
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_dpbusd_epi32(acc[i], w[i], x);
    __asm__ volatile("" : "+v"(x));
  }
  alignas(64) int32_t lanes[16];
  int64_t sum = 0;
  for (int i = 0; i < kChains; ++i) {
    _mm512_store_si512(lanes, acc[i]);
    for (int32_t v : lanes) sum += v;
  }
  return {iters * kChains * 64, sum};
}

}  // namespace

const PeakLoops& peak_loops_avx512() {
  static constexpr PeakLoops loops = {int8_loop<Avx512VnniDot>, Avx512VnniDot::kQ8Offset, f32_loop<Avx512F>,
                                      int8_hw_loop};
  return loops;
}

}  // namespace tessera::kernels
