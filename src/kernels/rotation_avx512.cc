// AVX-512 rotate_row (kernels/rotation_impl.h).
// Separate multiplies and adds, as the reference: no contraction into FMAs.
#pragma GCC optimize("fp-contract=off")

#include "kernels/rotation_impl.h"
#include "kernels/simd_avx512.h"

namespace tessera::kernels {
namespace {

struct Avx512Swap {
  static __m512 swap(__m512 v, int h) {
    if (h == 1) return _mm512_permute_ps(v, 0xb1);
    if (h == 2) return _mm512_permute_ps(v, 0x4e);
    if (h == 4) return _mm512_shuffle_f32x4(v, v, 0xb1);
    return _mm512_shuffle_f32x4(v, v, 0x4e);
  }
  // Lanes with bit h of their index clear take `lo`, the others `hi`.
  static __m512 blend_low(int h, __m512 lo, __m512 hi) {
    const __mmask16 m = h == 1 ? 0xaaaa : h == 2 ? 0xcccc : h == 4 ? 0xf0f0 : 0xff00;
    return _mm512_mask_blend_ps(m, lo, hi);
  }
};

void rotate_row(const RotationArgs& a, float* x) { rotate_row_vec<Avx512F, Avx512Swap>(a, x); }

}  // namespace

RotateRowFn rotate_row_avx512() { return rotate_row; }

}  // namespace tessera::kernels
