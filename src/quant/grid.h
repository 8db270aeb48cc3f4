// The value grids the quantizers round to, and packing rounded levels into
// GGUF blocks. A method (RTN, GPTQ, AWQ) chooses each block's scale and each
// weight's level; the storage is a standard GGUF type, so what Tessera
// writes is what llama.cpp reads:
//   Q4_0 (4 bits): w = d * q, q in -8..7, d = (signed max) / -8
//   Q4_0 (3 bits): the same block with q in -4..3, d = (signed max) / -4
//                  (3-bit values in 4-bit storage: 4.5 bits per weight)
//   Q8_0:          q in -127..127, d = max|w| / 127
//   Q4_K (4 bits): super-blocks of 256 values, 8 sub-blocks of 32 each with
//                  w = d_j q - m_j, q in 0..15, m_j >= 0; d_j = D sc_j and
//                  m_j = Dmin mn_j with 6-bit sc_j, mn_j and fp16 D, Dmin
//                  per super-block (llama.cpp's layout and dequantization)
//   Q3_K (3 bits): super-blocks of 256 values, 16 blocks of 16 each with
//                  w = d_j q, q in -4..3; d_j = D sc_j with 6-bit signed
//                  sc_j in -32..31 and fp16 D per super-block
//   Q5_K (5 bits): Q4_K with q in 0..31 (a fifth bit per value)
//   Q2_K (2 bits): Q4_K's affine grid on 16 blocks of 16, q in 0..3, the
//                  scales and mins in 4 bits (0..15 units)
//   Q6_K (6 bits): Q3_K's shape with q in -32..31 and 8-bit signed scales
//                  sc_j in -128..127
// d is stored as fp16; levels are chosen against the stored d. Functions
// take the blocks' scales and, for an affine grid (Q4_K), their mins (one
// per block of g.block values; null for the other grids). Super-block grids
// (Q3_K..Q6_K) fit all of a super-block's parameters at once (super_params).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/dtype.h"

namespace tessera::quant {

struct Grid {
  DType type = DType::kQ4_0;
  int bits = 4;
  int qmin = -8, qmax = 7;
  int block = 32;      // elements sharing a scale
  bool signed_max = true;  // d from the signed value of largest magnitude (Q4_0) or max|w| (Q8_0)
  bool affine = false;     // w = d q - m (Q4_K), not w = d q
  int super = 0;           // > 0: blocks' scales (and mins) are stored per super-block of this many values
  int scale_bits = 0;      // super-block grids: bits of each block's stored scale (and min)

  // Values that share stored parameters: what a row's width must be a multiple of.
  int unit() const { return super > 0 ? super : block; }
};

// The grid of `type` at `bits` (0: the type's own). Throws
// Error(kInvalidArgument) for a type or bit width Tessera cannot quantize to.
Grid make_grid(DType type, int bits);

// Whether `type` is a block type these grids write (else a plain float type).
bool is_grid_type(DType type);

// The scale of one block (w: block values, clip in (0, 1] shrinks the
// range), rounded to fp16 as stored.
float block_scale(const Grid& g, const float* w, int64_t n, float clip = 1.0f);

// The scale of one block chosen by search: among the block's own scale and
// its mirror (mapping the extreme to qmax instead of qmin: signed grids
// only), each times 1, 0.95, ..., 1 - 0.05 (steps - 1), the one whose
// rounding error d = w - s q(w / s) has the least d^T H d, with H the
// block's [n, n] second moments at h (row stride h_stride; null: identity).
// Ties go to the earlier candidate.
float search_block_scale(const Grid& g, const float* w, int64_t n, const double* h, int64_t h_stride, int steps);

// The level nearest (w + m) / d, clamped to the grid (d == 0: 0); m = 0
// but for affine grids.
inline int level(const Grid& g, float w, float d, float m = 0.0f) {
  if (d == 0.0f) return 0;
  float q = (m == 0.0f ? w : w + m) / d;
  if (q != q) return 0;  // NaN (callers refuse non-finite weights; this keeps the cast defined)
  q = q < static_cast<float>(g.qmin) ? static_cast<float>(g.qmin) : q;
  q = q > static_cast<float>(g.qmax) ? static_cast<float>(g.qmax) : q;
  return static_cast<int>(__builtin_nearbyintf(q));
}

// Super-block grids: the scales (and, affine, mins) of the g.super /
// g.block blocks of one super-block of g.super values, as stored, each
// value's squared error weighted by importance[i] when given (e.g. H_ii:
// how much input i moves the output).
//   Q2_K, Q4_K, Q5_K: each block's (d, m) is fitted to its values (range, then
//     alternating least squares of w on the levels), then both are stored in
//     6 bits against the super-block's fp16 D = max d / 63 and Dmin = max m /
//     63, and returned as llama.cpp dequantizes them: D sc_j and Dmin mn_j.
//   Q3_K, Q6_K: each block's d is the best (least error) of the scales mapping its
//     value of largest magnitude to qmin or qmax, each scaled by 1 + 0.1 t
//     for t in -9..9 and then refitted by least squares on its levels; then
//     stored in 6 bits against fp16 D = (the d of largest |d|) / -32, which
//     stores as -32 exactly: D sc_j, sc_j in -32..31 (Q6_K: 8 bits, -128).
void super_params(const Grid& g, const float* w, float* scales, float* mins, const float* importance = nullptr);

// H_ii of an [n, n] H as float: the importance super_params weights by.
std::vector<float> hessian_diagonal(std::span<const double> h, int64_t n);

// Rounds a row of n (a multiple of g.unit()) values to nearest with each
// block's own scale, or with the scales in `chosen` (one per block, not for
// super-block grids) when it is not empty. importance (super_params):
// super-block grids only; mins: affine grids only.
void rtn_row(const Grid& g, const float* w, int64_t n, std::span<const float> chosen, int8_t* levels, float* scales,
             float* mins = nullptr, const float* importance = nullptr);

// Dequantized values of a row given its levels, scales (and mins).
void dequant_row(const Grid& g, const int8_t* levels, const float* scales, int64_t n, float* out,
                 const float* mins = nullptr);

// Packs a row of levels and scales (and mins) as row_bytes(g.type, n)
// bytes at dst. For super-block grids the scales and mins must be those of
// super_params (each super-block's largest sc and mn is 63 (Q4_K, Q5_K) or 15 (Q2_K), its
// scale of largest magnitude -32 (Q3_K) or -128 (Q6_K), or all are 0, so D and Dmin are
// recovered exactly).
void pack_row(const Grid& g, const int8_t* levels, const float* scales, int64_t n, uint8_t* dst,
              const float* mins = nullptr);

}  // namespace tessera::quant
