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

// ---- 16-row packed Q8_0 / Q4_0 prompt tile ------------------------------------
// Two consecutive 8-row groups of the packed layout (matmul_kernels.h) side
// by side in one zmm: lanes 0-7 = the first group's rows, 8-15 the second's,
// so each vpdpbusd does 16 rows x 4 values for one token, with the token's 4
// activation bytes as an embedded broadcast. Against the 8-row ymm tile this
// halves the instructions per multiply-add: on Zen 4 that tile is bound by
// issuing them, not by the dot units (docs/KERNELS.md). Per lane the
// arithmetic is ptile's: the same exact int32 block sums, then
// acc += float(sum - offset * xsum) * (d_w * d_x) per block, so the bits are
// those of the 8-row tile and of the scalar reference.

static inline __m512i join256(const uint8_t* lo, const uint8_t* hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(loadu256(lo)), loadu256(hi), 1);
}

static inline __m512i bcast4_512(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

template <bool kQ4, int T>
static void ptile16(const uint8_t* group, size_t group_bytes, int64_t nb, const ActPtrs* x, float* const* y,
                    int nvalid) {
  constexpr size_t kBytes = kQ4 ? kPackedQ4_0Block : kPackedQ8_0Block;
  constexpr int kOffset = kQ4 ? 8 : Avx512VnniDot::kQ8Offset;
  const __m512i m4 = _mm512_set1_epi8(0x0f), flip = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* b0 = group + static_cast<size_t>(b) * kBytes;
    const uint8_t* b1 = b0 + group_bytes;
    __m512i isum[T];
    for (int t = 0; t < T; ++t) isum[t] = _mm512_setzero_si512();
    if constexpr (kQ4) {
      for (int h = 0; h < 4; ++h) {
        const __m512i v = join256(b0 + 16 + 32 * h, b1 + 16 + 32 * h);
        const __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        for (int t = 0; t < T; ++t) {
          isum[t] = _mm512_dpbusd_epi32(isum[t], lo, bcast4_512(x[t].q + b * 32 + 4 * h));
          isum[t] = _mm512_dpbusd_epi32(isum[t], hi, bcast4_512(x[t].q + b * 32 + 16 + 4 * h));
        }
      }
    } else {
      for (int j = 0; j < 8; ++j) {
        const __m512i w = _mm512_xor_si512(join256(b0 + 16 + 32 * j, b1 + 16 + 32 * j), flip);
        for (int t = 0; t < T; ++t) isum[t] = _mm512_dpbusd_epi32(isum[t], w, bcast4_512(x[t].q + b * 32 + 4 * j));
      }
    }
    const __m512 ws = _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(loadu128(b0)), loadu128(b1), 1));
    for (int t = 0; t < T; ++t) {
      const __m512i v = _mm512_sub_epi32(isum[t], _mm512_set1_epi32(kOffset * x[t].sum[b]));
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(v), _mm512_mul_ps(ws, _mm512_set1_ps(x[t].d[b])), acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) {
    if (nvalid == 16) {
      _mm512_storeu_ps(y[t], acc[t]);
    } else {
      Avx512F::store_tail(y[t], acc[t], nvalid);
    }
  }
}

struct Avx512Cfg {
  static constexpr const char* kName = "avx512";
  static constexpr int kMaxT = 4;
  static constexpr int kPairT = 8;  // tokens of the 16-row packed Q8_0 / Q4_0 prompt tile
  template <bool kQ4>
  static void pair_tile(int n, const uint8_t* group, size_t group_bytes, int64_t nb, const ActPtrs* x,
                        float* const* y, int nvalid) {
    switch (n) {
      case 1: ptile16<kQ4, 1>(group, group_bytes, nb, x, y, nvalid); break;
      case 2: ptile16<kQ4, 2>(group, group_bytes, nb, x, y, nvalid); break;
      case 3: ptile16<kQ4, 3>(group, group_bytes, nb, x, y, nvalid); break;
      case 4: ptile16<kQ4, 4>(group, group_bytes, nb, x, y, nvalid); break;
      case 5: ptile16<kQ4, 5>(group, group_bytes, nb, x, y, nvalid); break;
      case 6: ptile16<kQ4, 6>(group, group_bytes, nb, x, y, nvalid); break;
      case 7: ptile16<kQ4, 7>(group, group_bytes, nb, x, y, nvalid); break;
      default: ptile16<kQ4, 8>(group, group_bytes, nb, x, y, nvalid); break;
    }
  }
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
