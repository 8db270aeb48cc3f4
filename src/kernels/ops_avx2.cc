// Vector layer ops for avx2 (see ops_impl.h). No floating-point
// contraction in this file: each mul and add rounds as written, as in the
// scalar reference (GCC would otherwise fuse intrinsic mul + add into FMA).
#pragma GCC optimize("fp-contract=off")


#include "kernels/simd_avx2.h"
#include "kernels/ops_impl.h"

namespace tessera::kernels {

const OpsKernels& ops_kernels_avx2() { return OpsSet<Avx2F>::table; }

}  // namespace tessera::kernels
