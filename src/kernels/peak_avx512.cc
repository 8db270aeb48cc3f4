// Peak loops for AVX-512 (VNNI's vpdpbusd for int8, 512-bit FMAs).
#include "kernels/peak_impl.h"
#include "kernels/simd_avx512.h"

namespace tessera::kernels {

const PeakLoops& peak_loops_avx512() {
  static constexpr PeakLoops loops = {int8_loop<Avx512VnniDot>, Avx512VnniDot::kQ8Offset, f32_loop<Avx512F>};
  return loops;
}

}  // namespace tessera::kernels
