// Register-only peak loops, instantiated per ISA by peak_avx2.cc and
// peak_avx512.cc with the matmul kernels' own integer-dot strategy D
// (simd_*.h: q8_prep / q8_dot, the Q8_0 inner step) and float vector traits
// F. Internal linkage, as the matmul templates; no std:: templates here (the
// ODR rule of docs/KERNELS.md): the caller times the loops.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "kernels/peak.h"

namespace tessera::kernels {
namespace {

template <class D>
PeakLoopResult int8_loop(int64_t iters, int8_t a, int8_t b) {
  constexpr int kChains = 8;
  __m256i acc[kChains];
  typename D::Q8 w[kChains];
  for (int i = 0; i < kChains; ++i) {
    acc[i] = _mm256_setzero_si256();
    __m256i wi = _mm256_set1_epi8(static_cast<char>(a));
    // Opaque per chain: equal weights must not let the compiler compute
    // one dot and add it eight times.
    __asm__ volatile("" : "+x"(wi));
    w[i] = D::q8_prep(wi);
  }
  __m256i x = _mm256_set1_epi8(static_cast<char>(b));
  for (int64_t it = 0; it < iters; ++it) {
    for (int i = 0; i < kChains; ++i) acc[i] = D::q8_dot_acc(acc[i], w[i], x);
    // x "changes" every trip, so nothing is hoisted out of the loop.
    __asm__ volatile("" : "+x"(x));
  }
  alignas(32) int32_t lanes[8];
  __m256i s = acc[0];
  for (int i = 1; i < kChains; ++i) s = _mm256_add_epi32(s, acc[i]);
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), s);
  int64_t sum = 0;
  for (int32_t v : lanes) sum += v;
  return {iters * kChains * 32, sum};
}

template <class F>
PeakLoopResult f32_loop(int64_t iters, int8_t a, int8_t b) {
  constexpr int kChains = 12;  // >= FMA latency x pipes
  using V = typename F::V;
  V acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = F::zero();
  V va = F::set1(static_cast<float>(a)), vb = F::set1(static_cast<float>(b) / 64.0f);
  for (int64_t it = 0; it < iters; ++it) {
    for (int i = 0; i < kChains; ++i) acc[i] = F::fmadd(va, vb, acc[i]);
    __asm__ volatile("" : "+x"(va), "+x"(vb));
  }
  double sum = 0;
  for (int i = 0; i < kChains; ++i) sum += static_cast<double>(F::hsum(acc[i]));
  return {iters * kChains * F::kW, static_cast<int64_t>(sum + (sum < 0 ? -0.5 : 0.5))};
}

}  // namespace
}  // namespace tessera::kernels
