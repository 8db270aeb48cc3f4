// AVX2 + FMA + F16C matmul kernels (compiled with those flags by the
// *_avx2.cc rule). Only called after CPUID reports AVX2 (see matmul.cc).
// The contract (matmul_kernels.h) fixes every rounding: no contraction of
// a separate multiply and add into an FMA behind the code's back.
#pragma GCC optimize("fp-contract=off")

#include "kernels/matmul_impl.h"
#include "kernels/sparse_kernels.h"
#include "kernels/simd_avx2.h"

namespace tessera::kernels {
namespace {

// 16 ymm registers: 8 rows x 3 tokens keeps most of the quantized tile's partial
// trees in registers; 4 rows x 3 tokens of float accumulators (12) plus a
// weight and the token vectors. Chosen by measurement (docs/KERNELS.md).
struct Avx2Cfg {
  static constexpr const char* kName = "avx2";
  static constexpr int kMaxT = 3;
  // No 16-row packed prompt tiles (matmul_avx512.cc): 16 ymm registers are too few.
  static constexpr int pair_tokens(Packed) { return 0; }
  static constexpr bool decode_pairs(Packed) { return false; }
  static constexpr int kFloatRows = 4;
  static constexpr int kPrefetch = 512;  // bytes ahead in each weight row (0: none)
#ifndef TESSERA_PACKED_PF
#define TESSERA_PACKED_PF 4096
#endif
  // Bytes ahead in a packed row group's stream, decode only (measured: docs/KERNELS.md).
  static constexpr int kPackedPrefetch = TESSERA_PACKED_PF;
  // Row groups per pass of the packed decode tiles (Q8_0 / Q4_0, K types).
  static constexpr int kDecodeGroups = 2;
  static constexpr int kDecodeGroupsK = 2;
  static constexpr size_t kActChunkBytes = 128 * 1024;
  static constexpr MatmulRangeFn kSparseRange = sparse_range_avx2;
};

struct Avx2VnniEmulatedCfg : Avx2Cfg {
  static constexpr const char* kName = "avx2-vnni-emulated";
};

}  // namespace

const MatmulKernels& matmul_kernels_avx2() { return KernelSet<Avx2F, Avx2Dot, Avx2Cfg>::table; }

const MatmulKernels& matmul_kernels_avx2_vnni_emulated() {
  return KernelSet<Avx2F, Avx2VnniEmulatedDot, Avx2VnniEmulatedCfg>::table;
}

}  // namespace tessera::kernels
