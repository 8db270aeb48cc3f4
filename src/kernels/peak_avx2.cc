// Peak loops for AVX2 + FMA (compiled with those flags by the *_avx2.cc rule).
#include "kernels/peak_impl.h"
#include "kernels/simd_avx2.h"

namespace tessera::kernels {

const PeakLoops& peak_loops_avx2() {
  static constexpr PeakLoops loops = {int8_loop<Avx2Dot>, Avx2Dot::kQ8Offset, f32_loop<Avx2F>};
  return loops;
}

}  // namespace tessera::kernels
