// Calibration: the statistics of every linear layer's input over a
// calibration text, gathered in one forward pass of the unquantized model
// (debug taps, model/model.h), for AWQ (per-channel mean |x|) and GPTQ
// (H = sum x x^T). Linears that share an input share one entry: attn_q/k/v
// ("attn_norm"), ffn_gate/up ("ffn_norm"); attn_output reads "attn_out",
// ffn_down "ffn_act", output "result_norm".
//
// Memory: dim^2 doubles per input, whatever the number of calibration
// tokens (stories1M: 5 inputs x 6 layers of 64..256 wide; a 1B model's
// ffn_act H is 5632^2 x 8 bytes = 254 MB per layer).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/thread_pool.h"
#include "model/model.h"

namespace tessera::quant {

struct InputStats {
  int64_t dim = 0;
  int64_t n = 0;                // rows (tokens) seen
  std::vector<double> h;        // [dim, dim] sum over rows of x x^T (upper triangle until finish())
  std::vector<double> abs_sum;  // [dim] sum over rows of |x|

  void add(const float* x, int64_t rows, int64_t cols, int64_t stride);
  std::vector<float> mean_abs() const;  // [dim]
};

class Calibration {
 public:
  // The input statistics of linears reading tap `name` of layer `layer`
  // (-1 for result_norm), or null when the calibration did not see it.
  const InputStats* find(const std::string& name, int64_t layer) const;
  InputStats& at(const std::string& name, int64_t layer) { return stats_[{name, layer}]; }
  // Mirrors each H's upper triangle (which add() fills) into the lower.
  void finish();
  int64_t n_tokens = 0;

  // The tap names whose statistics are kept.
  static bool wanted(std::string_view tap);

 private:
  std::map<std::pair<std::string, int64_t>, InputStats> stats_;
};

// The statistics of the linear named `tensor` ("blk.3.ffn_down.weight"), or
// null when none were gathered for it.
const InputStats* stats_for_tensor(const Calibration& c, const std::string& tensor);

// The calibration text used when none is given: short children's stories
// written for Tessera (src/quant/default_calibration.cc), in the style of
// TinyStories but not taken from it, so no evaluation text is ever seen.
std::string_view default_calibration_text();

struct CalibrationOptions {
  int64_t n_ctx = 128;        // tokens per chunk (each from an empty cache, BOS first)
  int64_t max_tokens = 16384; // calibration tokens at most
  int32_t bos = -1;           // put first in every chunk when >= 0
};

// Runs `model` over `tokens` in chunks and gathers every linear's input
// statistics. progress(tokens done, tokens total).
Calibration calibrate(const Model& model, std::span<const int32_t> tokens, const CalibrationOptions& opt,
                      ThreadPool& pool, const std::function<void(int64_t, int64_t)>& progress = {});

}  // namespace tessera::quant
