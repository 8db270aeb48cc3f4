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

// ---- the other types llama-quantize writes (issue 35) ----------------------

// 32 weights = d * q + m, q in 0..15 (nibbles as Q4_0's).
struct BlockQ4_1 {
  fp16_t d;
  fp16_t m;
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockQ4_1) == 20);

// 32 weights = d * (q - 16), q in 0..31: the low 4 bits as Q4_0's nibbles,
// the fifth bit of value i in bit i of the little-endian 32-bit qh.
struct BlockQ5_0 {
  fp16_t d;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockQ5_0) == 22);

// 32 weights = d * q + m, q in 0..31 stored as Q5_0's.
struct BlockQ5_1 {
  fp16_t d;
  fp16_t m;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockQ5_1) == 24);

// 256 weights in 16 sub-blocks of 16: w = d * (sc[s] & 15) * q - dmin *
// (sc[s] >> 4), q 2-bit: value 128 n + 32 j + l (l < 32) in bits 2j of
// qs[32 n + l] (Q3_K's low bits).
struct BlockQ2_K {
  uint8_t scales[kQK_K / 16];
  uint8_t qs[kQK_K / 4];
  fp16_t d;
  fp16_t dmin;
};
static_assert(sizeof(BlockQ2_K) == 84);

// The 16 levels of IQ4_NL / IQ4_XS (a non-uniform 4-bit grid, int8).
constexpr int8_t kIQ4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// 32 weights = d * kIQ4Values[q], q 4-bit (nibbles as Q4_0's).
struct BlockIQ4_NL {
  fp16_t d;
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockIQ4_NL) == 18);

// 256 weights in 8 sub-blocks of 32: w = d * (ls[s] - 32) * kIQ4Values[q];
// ls 6-bit: low 4 bits in nibble s % 2 of scales_l[s / 2], top 2 bits in
// bits 2s of scales_h; each sub-block's 16 bytes of nibbles as Q4_0's.
struct BlockIQ4_XS {
  fp16_t d;
  uint16_t scales_h;
  uint8_t scales_l[kQK_K / 64];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockIQ4_XS) == 136);

// OCP MX FP4 (E2M1) values, doubled so they are integers: 0, 0.5, 1, 1.5,
// 2, 3, 4, 6 and their negatives (sign bit 3).
constexpr int8_t kMXFP4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// 32 weights = 2^(e - 128) * kMXFP4Values[q] (e an E8M0 exponent: half the
// block scale 2^(e - 127), to undo the doubling; e = 0 and 1 give 2^-128
// and 2^-127 as the subnormals they are), nibbles as Q4_0's.
struct BlockMXFP4 {
  uint8_t e;
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockMXFP4) == 17);

// 256 ternary weights = d * (t - 1), t in 0..2, five base-3 digits a byte:
// byte value v holds digits t_n = ((uint8_t)(v * 3^n) * 3) >> 8 (n < 5; the
// byte is the 5-digit base-3 number scaled by 256/243, rounded up).
// Values 0..159: byte m < 32 of qs, digit n: value 32 n + m; 160..239:
// byte 32 + m (m < 16), digit n: 160 + 16 n + m; 240..255: byte m < 4 of
// qh, digit n < 4: 240 + 4 n + m.
struct BlockTQ1_0 {
  uint8_t qs[48];
  uint8_t qh[4];
  fp16_t d;
};
static_assert(sizeof(BlockTQ1_0) == 54);

// 256 weights = d * (q - 1), q 2-bit: value 128 n + 32 j + l in bits 2j of
// qs[32 n + l] (Q2_K's order; q = 3 gives 2, outside the ternary set but
// defined).
struct BlockTQ2_0 {
  uint8_t qs[kQK_K / 4];
  fp16_t d;
};
static_assert(sizeof(BlockTQ2_0) == 66);

}  // namespace tessera::kernels
