// Block layouts of the quantized GGUF types, byte for byte as ggml defines
// them (the file is the contract). Plain structs, no code: safe to include
// from every per-ISA translation unit (it deliberately does not include
// core/fp16.h, whose inline functions must not be emitted from ISA files;
// see docs/KERNELS.md, "ODR rule").
#pragma once

#include <cstdint>

namespace tessera {
using fp16_t = uint16_t;  // raw IEEE binary16 bits (same alias as core/fp16.h)
}  // namespace tessera

namespace tessera::kernels {

constexpr int kQK = 32;    // elements per block of the *_0 types
constexpr int kQK_K = 256; // elements per super-block of the K types

// 32 weights = d * (q - 8), q in 0..15; element j in the low nibble of
// qs[j], element j+16 in the high nibble.
struct BlockQ4_0 {
  fp16_t d;
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockQ4_0) == 18);

// 32 weights = d * q, q in -127..127.
struct BlockQ8_0 {
  fp16_t d;
  int8_t qs[kQK];
};
static_assert(sizeof(BlockQ8_0) == 34);

// 256 weights in 8 sub-blocks of 32: w = d * sc[s] * q - dmin * m[s], with
// 6-bit sc and m packed into `scales` and 4-bit q.
struct BlockQ4_K {
  fp16_t d;
  fp16_t dmin;
  uint8_t scales[12];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockQ4_K) == 144);

// Q4_K with a fifth bit: w = d * sc[s] * q - dmin * m[s], q 5-bit (0..31):
// the low 4 bits as in Q4_K's qs, the high bit of value 64j + i (i < 32) in
// bit 2j of qh[i], of value 64j + 32 + i in bit 2j + 1.
struct BlockQ5_K {
  fp16_t d;
  fp16_t dmin;
  uint8_t scales[12];
  uint8_t qh[kQK_K / 8];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockQ5_K) == 176);

// 256 weights in 16 sub-blocks of 16: w = d * (sc[s] - 32) * (q - 4), q 3-bit
// and sc 6-bit. Value 128 n + 32 j + l (l < 32): low 2 bits in bits 2j of
// qs[32 n + l], the third bit in bit 4 n + j of hmask[l]. sc[s]: low 4 bits
// in the low (s < 8) or high (s >= 8) nibble of scales[s % 8], top 2 bits
// in bits 2 (s / 4) of scales[8 + s % 4].
struct BlockQ3_K {
  uint8_t hmask[kQK_K / 8];
  uint8_t qs[kQK_K / 4];
  uint8_t scales[12];
  fp16_t d;
};
static_assert(sizeof(BlockQ3_K) == 110);

// 256 weights in 16 sub-blocks of 16: w = d * scales[s] * (q - 32), q 6-bit:
// low 4 bits in ql, high 2 bits in qh.
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];
  uint8_t qh[kQK_K / 4];
  int8_t scales[kQK_K / 16];
  fp16_t d;
};
static_assert(sizeof(BlockQ6_K) == 210);

// Activation format for dot products with K-type weights: 256 int8 values,
// one float scale, and the sums of each group of 16 (for the min terms).
struct BlockQ8_K {
  float d;
  int8_t qs[kQK_K];
  int16_t bsums[kQK_K / 16];
};
static_assert(sizeof(BlockQ8_K) == 292);

}  // namespace tessera::kernels
