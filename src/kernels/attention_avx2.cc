// AVX2 + FMA + F16C attention kernel (see attention_impl.h).
#include "kernels/attention_impl.h"
#include "kernels/simd_avx2.h"

namespace tessera::kernels {
namespace {

// exp(x) = 2^n * e^r with n = round(x / ln 2), |r| <= ln 2 / 2, e^r by a
// degree-6 Taylor polynomial (relative error below 2e-7 on that range).
struct Avx2Math {
  static __m256 exp(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(88.0f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.0f / 720.0f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
  }
  static float exp1(float x) { return _mm256_cvtss_f32(exp(_mm256_set1_ps(x))); }
};

void attend_avx2(const AttnUnitArgs& a) {
  if (a.head_dim % Avx2F::kW != 0) return attention_kernels_ref().attend(a);
  attend_tiled<Avx2F, Avx2Math>(a);
}

constexpr AttentionKernels kTable = {"avx2", attend_avx2, to_kv_256};

}  // namespace

const AttentionKernels& attention_kernels_avx2() { return kTable; }

}  // namespace tessera::kernels
