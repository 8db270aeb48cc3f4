// GPTQ (Frantar et al. 2022): quantize a linear layer's columns in order
// and spread each column's rounding error over the columns not yet
// quantized, weighted by the inverse Hessian H^-1 of the layer's input
// (H = sum x x^T over calibration tokens), which minimises the growth of
// the output error sum_r (w_r - q_r)^T H (w_r - q_r).
//
// As in the paper: dampening (H += damp * mean(diag H) * I), dead inputs
// (H_ii = 0) zeroed, the Cholesky factor U of H^-1 (H^-1 = U^T U), updates
// inside a batch of `batch` columns applied at once to the columns after it
// (lazy batch updates), and optional act-order (columns by decreasing
// H_ii). A block's scale is computed from the block's current (updated)
// values when its first column is reached; with act-order every scale is
// fixed from the original weights first ("static groups"), since the
// columns of a block are no longer reached together. Each scale is chosen
// among shrunk and mirrored versions of the block's own by its error
// weighted with H's diagonal block (as AWQ's clipping search does). Rows are independent
// and run in parallel.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "core/thread_pool.h"
#include "quant/grid.h"

namespace tessera::quant {

struct GptqOptions {
  double damp = 0.01;
  int64_t batch = 128;  // columns per lazy batch
  bool act_order = false;
  // Block scales searched (quant/grid.h search_block_scale, this many ratios
  // per side) against H's diagonal block; 0: each block's own max-based scale.
  int scale_steps = 10;
};

// The shared part of GPTQ for any grid: H prepared (dead inputs set to 1,
// act-order permutation, dampening raised until H is positive definite)
// and U, the upper Cholesky factor of its inverse.
struct GptqHessian {
  int64_t n = 0;
  std::vector<double> h;       // H with dead inputs' diagonal set to 1 (not permuted)
  std::vector<bool> dead;      // [n] inputs no calibration token touched
  std::vector<int64_t> perm;   // [n] the order columns are quantized in
  std::vector<double> u;       // [n, n] U of the permuted, damped H
};
GptqHessian gptq_hessian(std::span<const double> h, int64_t n, const GptqOptions& opt, ThreadPool* pool);

// The sweep: rows of w ([rows, hs.n], independent, in parallel), columns in
// hs.perm order in lazy batches of `batch`; quantize(row, i, x) returns the
// value the column perm[i] of the row is stored as, given the row's current
// values x (permuted, earlier errors spread onto them); start_row(row) (may
// be empty) runs first for each row.
using GptqRowStart = std::function<void(int64_t row)>;
using GptqQuantize = std::function<double(int64_t row, int64_t i, const double* x)>;
void gptq_sweep(const GptqHessian& hs, const float* w, int64_t rows, int64_t batch, ThreadPool* pool,
                const GptqRowStart& start_row, const GptqQuantize& quantize);

// w: [rows, cols] row-major (cols a multiple of g.unit()); h: [cols, cols]
// symmetric. Writes levels [rows, cols], scales [rows, cols / g.block] and,
// for an affine grid (Q4_K), mins of the same shape: a super-block's
// scales and mins are fitted to its current values when its first column
// is reached (super_params; scale_steps does not apply). Throws
// Error(kInvalidArgument) if H stays not positive definite after raising
// the dampening.
void gptq(const Grid& g, const float* w, int64_t rows, int64_t cols, std::span<const double> h,
          const GptqOptions& opt, int8_t* levels, float* scales, ThreadPool* pool, float* mins = nullptr);

// W4A8's per-output-channel 4-bit codes (kernels::quantize_rows_w4's
// grid: q in [-8, 7] times one scale per row) chosen by GPTQ: each row's
// scale from quantize_rows_w4's clipping search on the original row, then
// the columns in order with the errors spread. q: [rows, cols]; sw: [rows].
void gptq_w4(const float* w, int64_t rows, int64_t cols, std::span<const double> h, const GptqOptions& opt,
             int8_t* q, float* sw, ThreadPool* pool);

// sum_r (a_r - b_r)^T H (a_r - b_r): the squared output error over the
// calibration tokens of using b instead of a. a, b: [rows, cols].
double output_error(const float* a, const float* b, int64_t rows, int64_t cols, std::span<const double> h);

}  // namespace tessera::quant
