// AWQ (Lin et al., MLSys 2024): activation-aware scaling. Linears that read
// one input (q/k/v; gate/up; down alone) are multiplied column-wise by s =
// mean|x|^alpha (normalised to a geometric mean of 1 over its extremes) and
// their input by 1/s, which is folded into what produces it (the RMSNorm
// weight, or the rows of ffn_up for ffn_down). Salient input channels
// (large mean |x|) then get finer steps. alpha is searched on a grid,
// minimising the output error after quantization over the calibration
// tokens, sum_r dw_r^T H dw_r with dw = w - Q(w s) / s (H = sum x x^T, so
// the error of every token is counted exactly without keeping the tokens).
// alpha = 0 (s = 1, plain rounding) is on the grid, so the search never
// does worse than RTN on that error.
//
// Optional clipping search (AWQ's auto-clip): each block's scale chosen
// among its own shrunk by 1, 0.95, ..., 0.55 and their mirrors (the
// extreme on the grid's other end) by the block's output error (H
// restricted to the block's columns): quant/grid.h search_block_scale.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "quant/calibration.h"
#include "quant/grid.h"

namespace tessera::quant {

struct AwqOptions {
  int grid = 20;          // alpha in {0, 1/grid, ..., (grid-1)/grid}
  int64_t max_rows = 512; // rows of each linear whose error the search sums (evenly spaced)
  bool clip = true;
  int clip_steps = 10;    // ratios 1, 0.95, ..., 1 - 0.05 (clip_steps - 1) = 0.55
};

// One linear of a group: [rows, cols] row-major f32.
struct LinearRef {
  const float* w;
  int64_t rows;
};

struct AwqScale {
  std::vector<float> s;   // [cols]; all ones when alpha = 0 won
  float alpha = 0.0f;
  double error = 0.0;     // the output error at the chosen alpha
  double rtn_error = 0.0; // at alpha = 0
};

// The scale for linears sharing one input of `cols` channels with
// statistics `st`.
AwqScale awq_search_scale(const Grid& g, std::span<const LinearRef> linears, int64_t cols, const InputStats& st,
                          const AwqOptions& opt);

// Per-block scales ([rows, cols / block]) for w ([rows, cols]) whose
// input has second moments h ([cols, cols]), for rtn_row's `chosen`.
std::vector<float> awq_search_clip(const Grid& g, const float* w, int64_t rows, int64_t cols,
                                   std::span<const double> h, const AwqOptions& opt);

// H of the scaled input x / s: H_ij / (s_i s_j).
std::vector<double> scale_hessian(std::span<const double> h, std::span<const float> s);

}  // namespace tessera::quant
