// Vector layer ops for avx512 (see ops_impl.h). No floating-point
// contraction in this file: each mul and add rounds as written, as in the
// scalar reference (GCC would otherwise fuse intrinsic mul + add into FMA).
#pragma GCC optimize("fp-contract=off")
// GCC 12 warns about _mm512_undefined_*() inside its own headers.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "kernels/simd_avx512.h"
#include "kernels/ops_impl.h"

namespace tessera::kernels {

const OpsKernels& ops_kernels_avx512() { return OpsSet<Avx512F>::table; }

}  // namespace tessera::kernels
