// Scalar decoding of block layouts (blocks.h) shared by the scalar code that
// reads them: the loader's dequantization (quant.cc), the reference matmul
// (matmul_ref.cc) and the repacking for the vector kernels (matmul.cc).
// Inline functions: include only from translation units built without ISA
// flags (docs/KERNELS.md, "ODR rule"); the per-ISA files decode in vectors.
#pragma once

#include "kernels/blocks.h"

namespace tessera::kernels {

// Q3_K: sub-block s's scale, -32..31 (the 6-bit value minus 32).
inline int q3_k_scale(const BlockQ3_K& b, int s) {
  const int nibble = s < 8 ? b.scales[s] & 15 : b.scales[s - 8] >> 4;
  return (nibble | ((b.scales[8 + s % 4] >> (2 * (s / 4))) & 3) << 4) - 32;
}

// Q3_K: value i (0..255) in -4..3.
inline int q3_k_value(const BlockQ3_K& b, int i) {
  const int n = i / 128, j = (i % 128) / 32, l = i % 32;
  const int low = (b.qs[32 * n + l] >> (2 * j)) & 3;
  return ((b.hmask[l] >> (4 * n + j)) & 1) != 0 ? low : low - 4;
}

}  // namespace tessera::kernels
