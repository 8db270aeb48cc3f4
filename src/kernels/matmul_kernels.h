// The interface between matmul.cc (argument checks, threads, workspace) and
// the kernel implementations: the scalar reference (matmul_ref.cc) and one
// file per ISA (matmul_avx2.cc, matmul_avx512.cc). Plain data and function
// pointers only, so the per-ISA files can include it without emitting any
// inline function (see docs/KERNELS.md, "ODR rule").
//
// Arithmetic contract, shared by every implementation so that results are
// bit-identical across ISAs for the quantized types and identical across
// batch sizes and thread counts for all types:
//
//  * Quantized weights (Q8_0, Q4_0, Q3_K, Q4_K, Q5_K, Q6_K) multiply int8
//    activations. Each token's row is quantized per block of `act.block`
//    values (32 for Q8_0/Q4_0, 256 for the K types): d = amax / 127,
//    q = round_half_even(clamp(x * (1 / d), -127, 127)) (NaN -> -127), and
//    the sum of q over each group of `act.group` values is stored beside it.
//    For each weight block b the exact integer dot product isum_b (and for
//    Q4_K / Q5_K the exact min term msum_b) is formed, then, for b in order,
//        acc = fma(float(isum_b), fl(dw_b * dx_b), acc)
//        acc = fma(-float(msum_b), fl(dmin_b * dx_b), acc)      (Q4_K, Q5_K only)
//    starting from acc = +0. y = acc.
//  * Float weights (F32, F16, BF16) multiply the f32 activations directly:
//    lane l of one accumulator per output sums w[k] * x[k] for k = l mod W
//    by fused multiply-add in increasing k (W = the ISA's vector width in
//    floats), then a fixed horizontal sum. The scalar reference sums
//    w[k] * x[k] in increasing k with a separate multiply and add. So float
//    results agree across ISAs only within rounding, but never depend on
//    the batch or the threads.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tessera::kernels {

// Weight types with kernels, in table order.
enum class WType : int {
  kF32 = 0, kF16, kBF16, kQ8_0, kQ4_0, kQ4_K, kQ6_K, kQ5_K, kQ3_K,
  // issue 35 (kernels/matmul_fmt_more.h): unpacked rows only
  kQ4_1, kQ5_0, kQ5_1, kIQ4_NL, kMXFP4, kQ2_K, kIQ4_XS, kTQ1_0, kTQ2_0,
};
constexpr int kNumWTypes = 18;

// Quantized activations for one call, one row of `row_bytes` per token:
//   int8_t  q[k]                at offset 0
//   float   d[k / block]        at d_offset     (x ~ d * q)
//   int16_t sum[k / group]      at sum_offset   (sum of q over each group)
struct ActLayout {
  int64_t k = 0;
  int32_t block = 32;
  int32_t group = 32;
  size_t d_offset = 0;
  size_t sum_offset = 0;
  size_t row_bytes = 0;
};

// One matmul call as the kernels see it: y[t, r] = sum_k x[t, k] * W[r, k].
struct MatmulArgs {
  const uint8_t* w = nullptr;  // [rows, row_bytes]
  int64_t rows = 0;
  int64_t cols = 0;
  size_t row_bytes = 0;
  const float* x = nullptr;  // [n_tokens, x_stride], float weight types
  int64_t x_stride = 0;
  const uint8_t* act = nullptr;  // [n_tokens, act.row_bytes], quantized types
  ActLayout act_layout;
  float* y = nullptr;  // [n_tokens, y_stride]
  int64_t y_stride = 0;
  // Sparse weights (kernels/sparse.h): the table's packed Q8_0 / Q4_0 kernel
  // that the sparse kernel runs on rows it expands for long inputs (null:
  // none; it then multiplies them itself).
  using RangeFn = void (*)(const MatmulArgs&, int64_t, int64_t, int64_t, int64_t);
  RangeFn dense = nullptr;
  // Gathered rows (matmul_rows, contextual sparsity): output row r of the
  // kernel reads weight row row_index[r] (null: row r). Only the kernels on
  // the original rows (MatmulKernels::range) read it.
  const int32_t* row_index = nullptr;
};

// Computes y for rows [r0, r1) and tokens [t0, t1). r0 is a multiple of
// kRowTile (except that any r0 works for float types).
using MatmulRangeFn = void (*)(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1);

// Quantizes tokens [t0, t1) of x ([n, x_stride] f32) into act.
using QuantizeActFn = void (*)(const float* x, int64_t x_stride, int64_t t0, int64_t t1, uint8_t* act,
                               const ActLayout& layout);

// Rows per tile of the quantized kernels (one output lane per row).
constexpr int64_t kRowTile = 8;

// Q8_0 / Q4_0 / Q3_K / Q4_K / Q5_K / Q6_K weights repacked by prepare_weight(): rows in groups of 8
// (the last group padded with copies of the last row); per group, for each
// block of 32 in order: the 8 rows' fp16 scales (16 bytes), then the values
// with the 8 rows interleaved in 4-value groups, so that one 32-byte load
// holds 4 consecutive values of each of the 8 rows (int32 lane r = row r):
//   Q8_0: 8 loads; byte 32 j + 4 r + i = q_r[4 j + i]                     (256 bytes)
//   Q4_0: 4 loads; byte 32 h + 4 r + i = the Q4_0 byte qs_r[4 h + i] (low
//         nibble value 4 h + i, high nibble value 16 + 4 h + i)          (128 bytes)
// Group g starts at g * (cols / 32) * bytes-per-block.
constexpr size_t kPackedQ8_0Block = 16 + 256;
constexpr size_t kPackedQ4_0Block = 16 + 128;
// Q4_K the same way, per group and super-block of 256 values in order (the
// 6-bit scales and mins unpacked to bytes, so the kernel only widens them):
//   bytes    0..15   the 8 rows' fp16 d
//   bytes   16..31   the 8 rows' fp16 dmin
//   bytes   32..95   scales: byte 32 + 8 j + r = sc_r[j]            (j < 8)
//   bytes   96..159  mins in pairs: byte 96 + 16 i + 2 r + e = m_r[2 i + e]
//   bytes  160..1183 values: for p < 4 and h < 8, 32 bytes at 160 + 256 p +
//                    32 h with byte 4 r + i = the Q4_K byte qs_r[32 p + 4 h + i]
//                    (low nibble value 64 p + 4 h + i, of sub-block 2 p; high
//                    nibble value 64 p + 32 + 4 h + i, of sub-block 2 p + 1)
constexpr size_t kPackedQ4_KBlock = 32 + 64 + 64 + 1024;
// Q5_K: Q4_K's packed block, then the fifth bits: for h < 8, 32 bytes at
// 1184 + 32 h with byte 4 r + i = qh_r[4 h + i] (bit 2 p: value 64 p + 4 h
// + i; bit 2 p + 1: value 64 p + 32 + 4 h + i).
constexpr size_t kPackedQ5_KBlock = kPackedQ4_KBlock + 256;
// Q6_K (w = d * sc[s] * (q - 32), 16 sub-blocks of 16), the same size as 8
// plain blocks, per group and super-block:
//   bytes    0..15   the 8 rows' fp16 d
//   bytes   16..143  int8 scales in pairs: byte 16 + 16 i + 2 r + e = sc_r[2 i + e]
//   bytes  144..1679 the 6-bit q, 4 values in 3 bytes: for n < 2, g < 8 and
//                    k < 3, 32 bytes at 144 + 768 n + 96 g + 32 k with byte
//                    4 r + i = q_r[128 n + 32 k + 4 g + i]
//                          | (bits 2k, 2k + 1 of q_r[128 n + 96 + 4 g + i]) << 6
// (value 128 n + 32 j + l is in sub-block 8 n + 2 j + l / 16). So three
// ands give the first three values, and the fourth is the top bits of the
// three bytes: no nibble shuffling of Q6_K's ql / qh at run time.
constexpr size_t kPackedQ6_KBlock = 16 + 128 + 1024 + 512;
// Q3_K (w = d * sc[s] * (q - 4), 16 sub-blocks of 16, sc = the 6-bit
// scale - 32), Q6_K's scales and value order with 3-bit values u = q + 4
// (0..7), per group and super-block:
//   bytes    0..15   the 8 rows' fp16 d
//   bytes   16..143  int8 scales in pairs, as Q6_K's
//   bytes  144..911  for n < 2 and p < 4, 96 bytes at 144 + 384 n + 96 p:
//                    for e < 2 (value vector g = 2 p + e), 32 bytes at
//                    + 32 e with byte 4 r + i holding in bits 2 j, 2 j + 1
//                    (j < 4) the low 2 bits of u_r[128 n + 32 j + 4 g + i],
//                    and 32 bytes at + 64 whose byte 4 r + i holds the
//                    third bit of that value in bit j + 4 e.
// Each load of low bits gives four value vectors, each load of third bits
// eight: 3 bits a value in the kernel's own order.
constexpr size_t kPackedQ3_KBlock = 16 + 128 + 768;
// IQ4_NL and MXFP4: Q4_0's packed layout (an MXFP4 block's E8M0 scale
// stored as the fp16 of 2^(e - 128), packed only where every block's is
// exact in fp16), each nibble standing for its level in the format's table.
// Q4_1, Q5_0, Q5_1: Q4_0's packed block with, after the 8 fp16 d, the 8
// rows' fp16 m (Q4_1, Q5_1: 16 bytes), then (Q5_0, Q5_1) 32 bytes of fifth
// bits, byte 4 r + i of which holds in bit h (h < 4) the fifth bit of row
// r's value 4 h + i and in bit 4 + h that of value 16 + 4 h + i (so one
// shift and an and give a 32-byte load's fifth bits), then the nibbles.
constexpr size_t kPackedQ4_1Block = kPackedQ4_0Block + 16;
constexpr size_t kPackedQ5_0Block = kPackedQ4_0Block + 32;
constexpr size_t kPackedQ5_1Block = kPackedQ4_0Block + 48;
// IQ4_XS, per group and super-block of 256:
//   bytes    0..15   the 8 rows' fp16 d
//   bytes   16..79   scales: byte 16 + 8 s + r = ls_r[s] - 32 (int8, s < 8)
//   bytes  80..1103  per sub-block s, Q4_0's packed values: for h < 4, 32
//                    bytes at 80 + 128 s + 32 h with byte 4 r + i = row r's
//                    qs[16 s + 4 h + i] (low nibble value 32 s + 4 h + i,
//                    high nibble value 32 s + 16 + 4 h + i)
constexpr size_t kPackedIQ4_XSBlock = 16 + 64 + 1024;
// Q2_K, per group and super-block of 256:
//   bytes    0..15   the 8 rows' fp16 d          16..31  the 8 rows' fp16 dmin
//   bytes   32..159  scales: byte 32 + 8 s + r = sc_r[s] (s < 16, 0..15)
//   bytes  160..287  mins:   byte 160 + 8 s + r = m_r[s]
//   bytes  288..799  values: for n < 2 and q < 8, 32 bytes at 288 + 256 n +
//                    32 q with byte 4 r + i holding in bits 2 j, 2 j + 1
//                    (j < 4) row r's value 128 n + 32 j + 4 q + i
// (Q3_K's packed low bits; a load gives four value vectors).
constexpr size_t kPackedQ2_KBlock = 32 + 128 + 128 + 512;
// TQ2_0 and TQ1_0 (ternary t = q in 0..2, w = d (t - 1)): the 8 rows' fp16
// d, then Q2_K's packed values (bytes 16..527); TQ1_0's base-3 digits are
// re-coded as 2-bit t at load (528 bytes against its 432).
constexpr size_t kPackedTQ2_0Block = 16 + 512;
enum class Packed : int {
  kQ8_0 = 0, kQ4_0, kQ4_K, kQ6_K, kQ5_K, kQ3_K, kIQ4_NL, kMXFP4, kQ4_1, kQ5_0, kQ5_1, kIQ4_XS, kQ2_K, kTQ2_0,
};
constexpr int kNumPacked = 14;
// Per packed kind (table order): values and bytes of one block of 8 rows.
constexpr int64_t kPackedValues[kNumPacked] = {32, 32, 256, 256, 256, 256, 32, 32, 32, 32, 32, 256, 256, 256};
constexpr size_t kPackedBytes[kNumPacked] = {
    kPackedQ8_0Block, kPackedQ4_0Block, kPackedQ4_KBlock,  kPackedQ6_KBlock, kPackedQ5_KBlock,
    kPackedQ3_KBlock, kPackedQ4_0Block, kPackedQ4_0Block,  kPackedQ4_1Block, kPackedQ5_0Block,
    kPackedQ5_1Block, kPackedIQ4_XSBlock, kPackedQ2_KBlock, kPackedTQ2_0Block};

struct MatmulKernels {
  const char* name;
  MatmulRangeFn range[kNumWTypes];
  QuantizeActFn quantize_act;
  // Kernels on the packed layouts (a.w = the packed data); null: the table
  // has none and the original rows are used.
  MatmulRangeFn packed_range[kNumPacked];
  // SP_Q8_0 and SP_Q4_0 (kernels/sparse_kernels.h), both: a.w = the tensor.
  MatmulRangeFn sparse_range;
};

// Each is defined in its own file; call the ISA ones only where the CPU has
// the ISA. matmul_kernels_avx2_vnni_emulated() runs the AVX-512 kernels'
// integer-dot strategy (unsigned-offset, as vpdpbusd needs) with AVX2
// instructions, so that logic is tested on machines without AVX-512.
const MatmulKernels& matmul_kernels_ref();
const MatmulKernels& matmul_kernels_avx2();
const MatmulKernels& matmul_kernels_avx2_vnni_emulated();
const MatmulKernels& matmul_kernels_avx512();
// The AVX-512 table with AMX-INT8 prompt tiles for the packed 32-value
// kinds (matmul_amx.cc): only where amx_usable().
const MatmulKernels& matmul_kernels_amx();

}  // namespace tessera::kernels
