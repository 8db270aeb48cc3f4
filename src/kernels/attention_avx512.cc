// AVX-512 attention kernel (see attention_impl.h). Head dims that are not a
// multiple of 16 run the 256-bit instantiation, compiled here too.
#include "kernels/attention_impl.h"
#include "kernels/simd_avx512.h"

namespace tessera::kernels {
namespace {

// As Avx2Math (same range reduction and polynomial); vscalefps applies 2^n.
struct Avx512Math {
  static __m512 exp(__m512 x) {
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.0f)), _mm512_set1_ps(88.0f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.0f / 720.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
  }
  static float exp1(float x) { return _mm512_cvtss_f32(exp(_mm512_set1_ps(x))); }
};

struct Avx2MathIn512 {
  static __m256 exp(__m256 x) {
    return _mm512_castps512_ps256(Avx512Math::exp(_mm512_castps256_ps512(x)));
  }
  static float exp1(float x) { return Avx512Math::exp1(x); }
};

void attend_avx512(const AttnUnitArgs& a) {
  if (a.head_dim % Avx512F::kW == 0) return attend_tiled<Avx512F, Avx512Math>(a);
  if (a.head_dim % Avx2F::kW == 0) return attend_tiled<Avx2F, Avx2MathIn512>(a);
  attention_kernels_ref().attend(a);
}

constexpr AttentionKernels kTable = {"avx512", attend_avx512, to_kv_256};

}  // namespace

const AttentionKernels& attention_kernels_avx512() { return kTable; }

}  // namespace tessera::kernels
