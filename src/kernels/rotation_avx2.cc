// AVX2 rotate_row (kernels/rotation_impl.h).
// Separate multiplies and adds, as the reference: no contraction into FMAs.
#pragma GCC optimize("fp-contract=off")

#include "kernels/rotation_impl.h"
#include "kernels/simd_avx2.h"

namespace tessera::kernels {
namespace {

struct Avx2Swap {
  static __m256 swap(__m256 v, int h) {
    if (h == 1) return _mm256_permute_ps(v, 0xb1);
    if (h == 2) return _mm256_permute_ps(v, 0x4e);
    return _mm256_permute2f128_ps(v, v, 1);
  }
  // Lanes with bit h of their index clear take `lo`, the others `hi`.
  static __m256 blend_low(int h, __m256 lo, __m256 hi) {
    if (h == 1) return _mm256_blend_ps(lo, hi, 0xaa);
    if (h == 2) return _mm256_blend_ps(lo, hi, 0xcc);
    return _mm256_blend_ps(lo, hi, 0xf0);
  }
};

void rotate_row(const RotationArgs& a, float* x) { rotate_row_vec<Avx2F, Avx2Swap>(a, x); }

}  // namespace

RotateRowFn rotate_row_avx2() { return rotate_row; }

}  // namespace tessera::kernels
