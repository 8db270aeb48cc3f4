// AVX2 + FMA LoRA delta kernels (see lora_delta_impl.h), compiled with those
// flags by the *_avx2.cc rule; only called after CPUID reports AVX2. No
// floating-point contraction: each rounding is the one the code writes.
#pragma GCC optimize("fp-contract=off")

#include "kernels/lora_delta_impl.h"
#include "kernels/simd_avx2.h"

namespace tessera::kernels {
namespace {

// Tile widths, indexed by the tile's token count (1..4). 16 ymm registers:
// up to 12 accumulators plus the weight vectors and a token's x (a
// broadcast). Measured on Zen 3 (rank 16 and 64, in/out 768 and 2048):
// shrink 4 x 3 runs at 75-90 GFLOP/s where 4 x 2 (8 FMA chains of 4-cycle
// latency) ran at 45-50 and 4 x 4 spilled; 3 x 4 beat 3 x 3 by 5-20%.
// Expand 4 x 2 beat 4 x 3 by 10-20%.
struct LoraAvx2Cfg {
  static constexpr const char* kName = "avx2";
  static constexpr int kShrinkRanks[5] = {0, 8, 6, 4, 3};
  static constexpr int kExpandVectors[5] = {0, 8, 4, 3, 2};
};

}  // namespace

const LoraKernels& lora_kernels_avx2() { return LoraDeltaSet<Avx2F, LoraAvx2Cfg>::table; }

}  // namespace tessera::kernels
