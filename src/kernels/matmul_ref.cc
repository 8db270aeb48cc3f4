// Scalar reference kernels: the arithmetic contract of matmul_kernels.h
// written as plainly as possible. Weight values are decoded element by
// element from the format definitions (not with the vector kernels' bit
// tricks), so the vector kernels are checked against an independent decoder;
// the integer dot products are exact, so for the quantized types every ISA
// must agree with this file bit for bit.
#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "kernels/block_values.h"
#include "kernels/blocks.h"
#include "kernels/matmul_kernels.h"
#include "kernels/sparse_kernels.h"

namespace tessera::kernels {
namespace {

// ---- activation quantization -------------------------------------------------

void quantize_act_ref(const float* x, int64_t x_stride, int64_t t0, int64_t t1, uint8_t* act,
                      const ActLayout& lay) {
  for (int64_t t = t0; t < t1; ++t) {
    const float* xr = x + t * x_stride;
    uint8_t* row = act + static_cast<size_t>(t) * lay.row_bytes;
    auto* q = reinterpret_cast<int8_t*>(row);
    auto* d = reinterpret_cast<float*>(row + lay.d_offset);
    auto* sum = reinterpret_cast<int16_t*>(row + lay.sum_offset);
    for (int64_t b = 0; b < lay.k / lay.block; ++b) {
      const float* xb = xr + b * lay.block;
      float amax = 0.0f;
      for (int j = 0; j < lay.block; ++j) amax = std::fmax(amax, std::fabs(xb[j]));  // ignores NaN
      const float db = amax / 127.0f;
      const float id = db != 0.0f ? 1.0f / db : 0.0f;
      d[b] = db;
      for (int j = 0; j < lay.block; ++j) {
        const float v = std::fmin(std::fmax(xb[j] * id, -127.0f), 127.0f);  // NaN -> -127
        q[b * lay.block + j] = static_cast<int8_t>(std::nearbyint(v));
      }
    }
    for (int64_t g = 0; g < lay.k / lay.group; ++g) {
      int s = 0;
      for (int j = 0; j < lay.group; ++j) s += q[g * lay.group + j];
      sum[g] = static_cast<int16_t>(s);
    }
  }
}

// ---- element decoders: integer weight value i of a block ---------------------

int q8_0_value(const BlockQ8_0& b, int i) { return b.qs[i]; }

int q4_0_value(const BlockQ4_0& b, int i) {
  return (i < 16 ? (b.qs[i] & 0x0f) : (b.qs[i - 16] >> 4)) - 8;
}

// The 6-bit scale (min) of sub-block s of a Q4_K block: sub-blocks 0..3 keep
// theirs in the low 6 bits of bytes s (s + 4); 4..7 in the nibbles of byte
// s + 4 with the top two bits taken from bytes s - 4 (s).
// (Q5_K packs them the same way.)
template <class Block>
int q4_k_scale(const Block& b, int s) {
  return s < 4 ? (b.scales[s] & 63) : ((b.scales[s + 4] & 0x0f) | ((b.scales[s - 4] >> 6) << 4));
}
template <class Block>
int q4_k_min(const Block& b, int s) {
  return s < 4 ? (b.scales[s + 4] & 63) : ((b.scales[s + 4] >> 4) | ((b.scales[s] >> 6) << 4));
}
// Value i (0..255) in 0..15: each 64 values share 32 bytes, the first 32 in
// the low nibbles, the next 32 in the high nibbles.
int q4_k_value(const BlockQ4_K& b, int i) {
  const int byte = (i / 64) * 32 + i % 32;
  return (i % 64) < 32 ? (b.qs[byte] & 0x0f) : (b.qs[byte] >> 4);
}

// Q5_K: Q4_K's value plus the high bit, for value 64j + i in bit 2j (i < 32)
// or 2j + 1 (i >= 32) of qh[i % 32]. Scales and mins as Q4_K's.
int q5_k_value(const BlockQ5_K& b, int i) {
  const int byte = (i / 64) * 32 + i % 32;
  const int lo = (i % 64) < 32 ? (b.qs[byte] & 0x0f) : (b.qs[byte] >> 4);
  const int bit = 2 * (i / 64) + ((i % 64) < 32 ? 0 : 1);
  return lo | (((b.qh[i % 32] >> bit) & 1) << 4);
}

// Value i (0..255) in -32..31: per 128 values, 64 bytes of low nibbles (value
// j of the 128 in byte j % 64, low nibble if j < 64) and 32 bytes of 2-bit
// highs (byte j % 32, bit pair j / 32).
int q6_k_value(const BlockQ6_K& b, int i) {
  const int half = i / 128, j = i % 128;
  const uint8_t l = b.ql[half * 64 + j % 64];
  const int lo = j < 64 ? (l & 0x0f) : (l >> 4);
  const int hi = (b.qh[half * 32 + j % 32] >> (2 * (j / 32))) & 3;
  return (lo | (hi << 4)) - 32;
}

// ---- quantized matmul -------------------------------------------------------

struct ActRow {
  const int8_t* q;
  const float* d;
};

ActRow act_row(const MatmulArgs& a, int64_t t) {
  const uint8_t* row = a.act + static_cast<size_t>(t) * a.act_layout.row_bytes;
  return {reinterpret_cast<const int8_t*>(row), reinterpret_cast<const float*>(row + a.act_layout.d_offset)};
}

// y[t, r] for rows [r0, r1), tokens [t0, t1): acc starts at +0 and
// block_step(block, x values of the block, x scale, acc) returns the next acc.
template <class Block, int kBlock, float (*block_step)(const Block&, const int8_t*, float, float)>
void range_blocks(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  const int64_t nb = a.cols / kBlock;
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* row = a.w + static_cast<size_t>(a.row_index != nullptr ? a.row_index[r] : r) * a.row_bytes;
    for (int64_t t = t0; t < t1; ++t) {
      const ActRow x = act_row(a, t);
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        Block blk;
        std::memcpy(&blk, row + b * sizeof(Block), sizeof blk);  // weight rows need not be aligned
        acc = block_step(blk, x.q + b * kBlock, x.d[b], acc);
      }
      a.y[t * a.y_stride + r] = acc;
    }
  }
}

// Q8_0 and Q4_0: one scale per block of 32.
template <class Block, int (*value)(const Block&, int)>
float step_simple(const Block& blk, const int8_t* xq, float dx, float acc) {
  int isum = 0;
  for (int i = 0; i < kQK; ++i) isum += value(blk, i) * xq[i];
  return std::fma(static_cast<float>(isum), fp16_to_f32(blk.d) * dx, acc);
}

// Q4_K and Q5_K: a scale and a min per sub-block of 32.
template <class Block, int (*value)(const Block&, int)>
float step_k_min(const Block& blk, const int8_t* xq, float dx, float acc) {
  int isum = 0, msum = 0;
  for (int s = 0; s < 8; ++s) {
    int dot = 0, xs = 0;
    for (int i = 32 * s; i < 32 * s + 32; ++i) {
      dot += value(blk, i) * xq[i];
      xs += xq[i];
    }
    isum += q4_k_scale(blk, s) * dot;
    msum += q4_k_min(blk, s) * xs;
  }
  acc = std::fma(static_cast<float>(isum), fp16_to_f32(blk.d) * dx, acc);
  return std::fma(-static_cast<float>(msum), fp16_to_f32(blk.dmin) * dx, acc);
}

float step_q6_k(const BlockQ6_K& blk, const int8_t* xq, float dx, float acc) {
  int isum = 0;
  for (int s = 0; s < 16; ++s) {
    int dot = 0;
    for (int i = 16 * s; i < 16 * s + 16; ++i) dot += q6_k_value(blk, i) * xq[i];
    isum += blk.scales[s] * dot;
  }
  return std::fma(static_cast<float>(isum), fp16_to_f32(blk.d) * dx, acc);
}

float step_q3_k(const BlockQ3_K& blk, const int8_t* xq, float dx, float acc) {
  int isum = 0;
  for (int s = 0; s < 16; ++s) {
    int dot = 0;
    for (int i = 16 * s; i < 16 * s + 16; ++i) dot += q3_k_value(blk, i) * xq[i];
    isum += q3_k_scale(blk, s) * dot;
  }
  return std::fma(static_cast<float>(isum), fp16_to_f32(blk.d) * dx, acc);
}

// ---- the types of issue 35 (values from block_values.h) -----------------------

// Q4_1 / Q5_1: w = d * q + m per block of 32: acc + isum * fl(d dx) + sum(x) * fl(m dx).
template <class Block, bool kFifth>
float step_affine32(const Block& blk, const int8_t* xq, float dx, float acc) {
  int isum = 0, xsum = 0;
  for (int i = 0; i < kQK; ++i) {
    int q;
    if constexpr (kFifth) {
      q = q5_value(blk.qh, blk.qs, i);
    } else {
      q = nibble32(blk.qs, i);
    }
    isum += q * xq[i];
    xsum += xq[i];
  }
  acc = std::fma(static_cast<float>(isum), fp16_to_f32(blk.d) * dx, acc);
  return std::fma(static_cast<float>(xsum), fp16_to_f32(blk.m) * dx, acc);
}

float step_q5_0(const BlockQ5_0& blk, const int8_t* xq, float dx, float acc) {
  int isum = 0;
  for (int i = 0; i < kQK; ++i) isum += (q5_value(blk.qh, blk.qs, i) - 16) * xq[i];
  return std::fma(static_cast<float>(isum), fp16_to_f32(blk.d) * dx, acc);
}

float step_iq4_nl(const BlockIQ4_NL& blk, const int8_t* xq, float dx, float acc) {
  int isum = 0;
  for (int i = 0; i < kQK; ++i) isum += kIQ4Values[nibble32(blk.qs, i)] * xq[i];
  return std::fma(static_cast<float>(isum), fp16_to_f32(blk.d) * dx, acc);
}

float step_mxfp4(const BlockMXFP4& blk, const int8_t* xq, float dx, float acc) {
  int isum = 0;
  for (int i = 0; i < kQK; ++i) isum += kMXFP4Values[nibble32(blk.qs, i)] * xq[i];
  return std::fma(static_cast<float>(isum), e8m0_half(blk.e) * dx, acc);
}

float step_q2_k(const BlockQ2_K& blk, const int8_t* xq, float dx, float acc) {
  int isum = 0, msum = 0;
  for (int s = 0; s < 16; ++s) {
    int dot = 0, xs = 0;
    for (int i = 16 * s; i < 16 * s + 16; ++i) {
      dot += two_bit_value(blk.qs, i) * xq[i];
      xs += xq[i];
    }
    isum += (blk.scales[s] & 15) * dot;
    msum += (blk.scales[s] >> 4) * xs;
  }
  acc = std::fma(static_cast<float>(isum), fp16_to_f32(blk.d) * dx, acc);
  return std::fma(-static_cast<float>(msum), fp16_to_f32(blk.dmin) * dx, acc);
}

float step_iq4_xs(const BlockIQ4_XS& blk, const int8_t* xq, float dx, float acc) {
  int isum = 0;
  for (int s = 0; s < 8; ++s) {
    int dot = 0;
    for (int i = 32 * s; i < 32 * s + 32; ++i) dot += iq4_xs_value(blk, i) * xq[i];
    isum += iq4_xs_scale(blk, s) * dot;
  }
  return std::fma(static_cast<float>(isum), fp16_to_f32(blk.d) * dx, acc);
}

float step_tq1_0(const BlockTQ1_0& blk, const int8_t* xq, float dx, float acc) {
  int isum = 0;
  for (int i = 0; i < kQK_K; ++i) isum += tq1_0_value(blk, i) * xq[i];
  return std::fma(static_cast<float>(isum), fp16_to_f32(blk.d) * dx, acc);
}

float step_tq2_0(const BlockTQ2_0& blk, const int8_t* xq, float dx, float acc) {
  int isum = 0;
  for (int i = 0; i < kQK_K; ++i) isum += (two_bit_value(blk.qs, i) - 1) * xq[i];
  return std::fma(static_cast<float>(isum), fp16_to_f32(blk.d) * dx, acc);
}

// ---- float weights ----------------------------------------------------------

float load_f32(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}
float load_f16(const uint8_t* p) {
  fp16_t h;
  std::memcpy(&h, p, 2);
  return fp16_to_f32(h);
}
float load_bf16(const uint8_t* p) {
  bf16_t h;
  std::memcpy(&h, p, 2);
  return bf16_to_f32(h);
}

template <int kBytes, float (*load)(const uint8_t*)>
void range_float(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* w = a.w + static_cast<size_t>(a.row_index != nullptr ? a.row_index[r] : r) * a.row_bytes;
    for (int64_t t = t0; t < t1; ++t) {
      const float* x = a.x + t * a.x_stride;
      float acc = 0.0f;
      for (int64_t k = 0; k < a.cols; ++k) {
        const float p = load(w + k * kBytes) * x[k];
        acc += p;
      }
      a.y[t * a.y_stride + r] = acc;
    }
  }
}

constexpr MatmulKernels kRef = {
    "scalar",
    {
        range_float<4, load_f32>,
        range_float<2, load_f16>,
        range_float<2, load_bf16>,
        range_blocks<BlockQ8_0, kQK, step_simple<BlockQ8_0, q8_0_value>>,
        range_blocks<BlockQ4_0, kQK, step_simple<BlockQ4_0, q4_0_value>>,
        range_blocks<BlockQ4_K, kQK_K, step_k_min<BlockQ4_K, q4_k_value>>,
        range_blocks<BlockQ6_K, kQK_K, step_q6_k>,
        range_blocks<BlockQ5_K, kQK_K, step_k_min<BlockQ5_K, q5_k_value>>,
        range_blocks<BlockQ3_K, kQK_K, step_q3_k>,
        range_blocks<BlockQ4_1, kQK, step_affine32<BlockQ4_1, false>>,
        range_blocks<BlockQ5_0, kQK, step_q5_0>,
        range_blocks<BlockQ5_1, kQK, step_affine32<BlockQ5_1, true>>,
        range_blocks<BlockIQ4_NL, kQK, step_iq4_nl>,
        range_blocks<BlockMXFP4, kQK, step_mxfp4>,
        range_blocks<BlockQ2_K, kQK_K, step_q2_k>,
        range_blocks<BlockIQ4_XS, kQK_K, step_iq4_xs>,
        range_blocks<BlockTQ1_0, kQK_K, step_tq1_0>,
        range_blocks<BlockTQ2_0, kQK_K, step_tq2_0>,
    },
    quantize_act_ref,
    {},  // no packed kernels: the reference reads the original rows
    sparse_range_ref,
};

}  // namespace

const MatmulKernels& matmul_kernels_ref() { return kRef; }

}  // namespace tessera::kernels
