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

// Nibble-packed 32-value blocks (Q4_0's order): value i's 4 bits.
inline int nibble32(const uint8_t* qs, int i) { return i < 16 ? qs[i] & 0x0f : qs[i - 16] >> 4; }

// Q5_0 / Q5_1: value i (0..31) in 0..31, the fifth bit from qh.
inline int q5_value(const uint8_t* qh, const uint8_t* qs, int i) {
  return nibble32(qs, i) | (((qh[i / 8] >> (i % 8)) & 1) << 4);
}

// Q2_K / TQ2_0: value i (0..255) in 0..3 (Q3_K's low bits).
inline int two_bit_value(const uint8_t* qs, int i) {
  const int n = i / 128, j = (i % 128) / 32, l = i % 32;
  return (qs[32 * n + l] >> (2 * j)) & 3;
}

// IQ4_XS: sub-block s's scale, -32..31.
inline int iq4_xs_scale(const BlockIQ4_XS& b, int s) {
  return (((b.scales_l[s / 2] >> (4 * (s % 2))) & 15) | (((b.scales_h >> (2 * s)) & 3) << 4)) - 32;
}

// IQ4_XS: value i (0..255), a kIQ4Values level.
inline int iq4_xs_value(const BlockIQ4_XS& b, int i) { return kIQ4Values[nibble32(b.qs + 16 * (i / 32), i % 32)]; }

// TQ1_0: base-3 digit n of byte v.
inline int base3_digit(uint8_t v, int n) {
  static constexpr uint8_t kPow3[5] = {1, 3, 9, 27, 81};
  const auto q = static_cast<uint8_t>(v * kPow3[n]);
  return (q * 3) >> 8;
}

// TQ1_0: value i (0..255) in -1..1.
inline int tq1_0_value(const BlockTQ1_0& b, int i) {
  if (i < 160) return base3_digit(b.qs[i % 32], i / 32) - 1;
  if (i < 240) return base3_digit(b.qs[32 + (i - 160) % 16], (i - 160) / 16) - 1;
  return base3_digit(b.qh[(i - 240) % 4], (i - 240) / 4) - 1;
}

// MXFP4: half the block scale, 2^(e - 128), as a float (exact: e = 0, 1 are
// the subnormals 2^-128, 2^-127).
inline float e8m0_half(uint8_t e) {
  const uint32_t bits = e >= 2 ? static_cast<uint32_t>(e - 1) << 23 : (e == 0 ? 0x00200000u : 0x00400000u);
  float f;
  __builtin_memcpy(&f, &bits, 4);
  return f;
}

}  // namespace tessera::kernels
