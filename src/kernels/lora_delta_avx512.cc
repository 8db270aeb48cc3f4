// AVX-512 LoRA delta kernels (see lora_delta_impl.h), compiled with those
// flags by the *_avx512.cc rule; only called after CPUID reports them. No
// floating-point contraction: each rounding is the one the code writes.
#pragma GCC optimize("fp-contract=off")
// GCC 12 warns about _mm512_undefined_*() inside its own headers.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "kernels/lora_delta_impl.h"
#include "kernels/simd_avx512.h"

namespace tessera::kernels {
namespace {

// Tile widths, indexed by the tile's token count (1..4). 32 zmm registers:
// up to 18 accumulators plus the weight vectors and a broadcast. Chosen by
// register count from the AVX2 measurements (12-16 independent FMA chains),
// not measured: no AVX-512 machine here.
struct LoraAvx512Cfg {
  static constexpr const char* kName = "avx512";
  static constexpr int kShrinkRanks[5] = {0, 8, 8, 6, 4};
  static constexpr int kExpandVectors[5] = {0, 8, 8, 4, 4};
};

}  // namespace

const LoraKernels& lora_kernels_avx512() { return LoraDeltaSet<Avx512F, LoraAvx512Cfg>::table; }

}  // namespace tessera::kernels
