// AVX2 W8A8 kernels (w8a8_kernels.h): no VNNI, so the exact int8 dot is
// VPMADDUBSW of |q| by a with q's sign (pairs of at most 2 * 127 * 127, no
// saturation), then VPMADDWD by ones into int32; a register tile of up to 4
// tokens x one row group (two ymm of 8 rows each). The activations are
// quantized by the scalar reference (the bytes are the same).
#include <immintrin.h>

#include <cstring>

#include "kernels/w8a8_kernels.h"

namespace tessera::kernels {
namespace {

template <int NT>
void tile(const W8A8Args& a, int64_t g, int64_t t) {
  __m256i acc[NT][2];
  for (int i = 0; i < NT; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_si256();
  const int8_t* w = a.q + g * a.cols4 * kW8Group * 4;
  const uint8_t* x = a.act + t * a.act_stride;
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  for (int64_t c = 0; c < a.cols4; ++c) {
    const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + c * 64));
    const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + c * 64 + 32));
    const __m256i a0 = _mm256_abs_epi8(w0), a1 = _mm256_abs_epi8(w1);
    for (int i = 0; i < NT; ++i) {
      int32_t v;
      std::memcpy(&v, x + i * a.act_stride + 4 * c, 4);
      const __m256i b = _mm256_xor_si256(_mm256_set1_epi32(v), flip);  // a + 128 -> a (signed)
      const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(a0, _mm256_sign_epi8(b, w0)), ones);
      const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(a1, _mm256_sign_epi8(b, w1)), ones);
      acc[i][0] = _mm256_add_epi32(acc[i][0], p0);
      acc[i][1] = _mm256_add_epi32(acc[i][1], p1);
    }
  }
  const int64_t r0 = g * kW8Group;
  for (int h = 0; h < 2; ++h) {
    const int64_t rh = r0 + 8 * h;
    if (rh >= a.rows) break;
    const __m256 sw = _mm256_loadu_ps(a.sw + rh);
    for (int i = 0; i < NT; ++i) {
      const __m256 yv = _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(acc[i][h]), _mm256_set1_ps(a.sx[t + i])), sw);
      float* out = a.y + (t + i) * a.y_stride + rh;
      if (a.rows - rh >= 8) {
        _mm256_storeu_ps(out, yv);
      } else {
        alignas(32) float tmp[8];
        _mm256_store_ps(tmp, yv);
        std::memcpy(out, tmp, sizeof(float) * static_cast<size_t>(a.rows - rh));
      }
    }
  }
}

using TileFn = void (*)(const W8A8Args&, int64_t, int64_t);
constexpr TileFn kTiles[4] = {tile<1>, tile<2>, tile<3>, tile<4>};

void run_avx2(const W8A8Args& a, int64_t g0, int64_t g1, int64_t t0, int64_t t1) {
  for (int64_t g = g0; g < g1; ++g) {
    for (int64_t t = t0; t < t1; t += 4) kTiles[(t1 - t < 4 ? t1 - t : 4) - 1](a, g, t);
  }
}

float quantize_avx2(const float* x, int64_t cols, int64_t cols4, float amax_floor, uint8_t* act) {
  return w8a8_kernels_ref().quantize(x, cols, cols4, amax_floor, act);
}

// As w4_unpack_ref: low nibbles are the even k group, high nibbles the odd.
void unpack4_avx2(const uint8_t* nib, int64_t cols4, int8_t* q) {
  const __m256i m = _mm256_set1_epi8(15), eight = _mm256_set1_epi8(8);
  for (int64_t c = 0; c < cols4; c += 2) {
    for (int h = 0; h < 2; ++h) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(nib + (c / 2) * 64 + 32 * h));
      const __m256i lo = _mm256_sub_epi8(_mm256_and_si256(v, m), eight);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + c * 64 + 32 * h), lo);
      if (c + 1 < cols4) {
        const __m256i hi = _mm256_sub_epi8(_mm256_and_si256(_mm256_srli_epi16(v, 4), m), eight);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + (c + 1) * 64 + 32 * h), hi);
      }
    }
  }
}

constexpr W8A8Kernels kTable = {"avx2", run_avx2, quantize_avx2, unpack4_avx2, nullptr};

}  // namespace

const W8A8Kernels& w8a8_kernels_avx2() { return kTable; }

}  // namespace tessera::kernels
