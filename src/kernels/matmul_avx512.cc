// AVX-512 (F/BW/VL/DQ + VNNI) matmul kernels, compiled with those flags by the
// *_avx512.cc rule. Only called after CPUID reports them (see matmul.cc).
// Float types use 16-lane vectors; the quantized types keep the 256-bit tile
// of matmul_impl.h (a Q8_0/Q4_0 block is 32 bytes) with vpdpbusd dots and
// the 32 vector registers allowing 4 tokens per tile.
// GCC 12's AVX-512 headers build some intrinsics from _mm512_undefined_*()
// and warn about it at every use: not a problem in this file's code.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// The contract (matmul_kernels.h) fixes every rounding: no contraction of
// a separate multiply and add into an FMA behind the code's back.
#pragma GCC optimize("fp-contract=off")

#include "kernels/matmul_impl.h"
#include "kernels/simd_avx512.h"

namespace tessera::kernels {
namespace {

struct Avx512Cfg {
  static constexpr const char* kName = "avx512";
  static constexpr int kMaxT = 4;
  static constexpr int kFloatRows = 4;
  static constexpr int kPrefetch = 512;  // bytes ahead in each weight row (0: none)
#ifndef TESSERA_PACKED_PF
#define TESSERA_PACKED_PF 4096
#endif
  // Bytes ahead in a packed row group's stream, decode only (measured: docs/KERNELS.md).
  static constexpr int kPackedPrefetch = TESSERA_PACKED_PF;
  // Row groups per pass of the packed decode tiles (Q8_0 / Q4_0, K types).
  static constexpr int kDecodeGroups = 1;
  static constexpr int kDecodeGroupsK = 1;
  static constexpr size_t kActChunkBytes = 256 * 1024;
};

}  // namespace

const MatmulKernels& matmul_kernels_avx512() { return KernelSet<Avx512F, Avx512VnniDot, Avx512Cfg>::table; }

}  // namespace tessera::kernels
