// Calibration: the statistics of every linear layer's input over a
// calibration text, gathered in a forward pass of the unquantized model
// (debug taps, model/model.h), for AWQ (per-channel mean |x|) and GPTQ
// (H = sum x x^T). A pass may keep a window of layers only (LayerWindows:
// memory bounded by a budget, one pass per window); a ResidualStream lets
// each window start where the previous one stopped, so that windows in
// layer order run each layer once in all. Linears that share an
// input share one entry: attn_q/k/v ("attn_norm"), ffn_gate/up
// ("ffn_norm"); attn_output reads "attn_out", ffn_down "ffn_act", output
// "result_norm". A mixture's expert e: "ffn_moe_in.<e>" (the rows routed to
// it: the input of its gate and up) and "ffn_moe_act.<e>" (its down's input).
//
// Memory: dim^2 doubles per input, whatever the number of calibration
// tokens (stories1M: 5 inputs x 6 layers of 64..256 wide; a 1B model's
// ffn_act H is 5632^2 x 8 bytes = 254 MB per layer).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
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
  std::vector<float> abs_max;   // [dim] max over rows of |x| (SmoothQuant's statistic)

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
  int64_t first_layer = 0, end_layer = 0;  // the layers the pass ran: [first_layer, end_layer)

  // The tap names whose statistics are kept.
  static bool wanted(std::string_view tap);

 private:
  std::map<std::pair<std::string, int64_t>, InputStats> stats_;
};

// The layer a tensor belongs to: N for "blk.N.*", -1 for the output and
// its norm, none otherwise.
std::optional<int64_t> layer_of_tensor(const std::string& tensor);

// The tap and layer whose statistics the linear named `tensor` reads
// ("blk.3.ffn_down.weight" -> {"ffn_act", 3}; "output.weight" ->
// {"result_norm", -1}), or {"", 0} for a tensor no linear input feeds.
std::pair<std::string, int64_t> tap_for_tensor(const std::string& tensor);

// The statistics of the linear named `tensor`, or null when none were
// gathered for it.
const InputStats* stats_for_tensor(const Calibration& c, const std::string& tensor);

// Where the quantizer finds input statistics. A returned pointer stays
// valid until statistics of another layer are asked for.
class StatsSource {
 public:
  virtual ~StatsSource() = default;
  // Tap `tap` of `layer` (-1: result_norm), or null.
  virtual const InputStats* find(const std::string& tap, int64_t layer) = 0;
  const InputStats* for_tensor(const std::string& tensor) {
    const auto [tap, layer] = tap_for_tensor(tensor);
    return tap.empty() ? nullptr : find(tap, layer);
  }
};

// Every layer's statistics, gathered at once.
class WholeCalibration : public StatsSource {
 public:
  explicit WholeCalibration(const Calibration& c) : c_(c) {}
  const InputStats* find(const std::string& tap, int64_t layer) override { return c_.find(tap, layer); }

 private:
  const Calibration& c_;
};

// Statistics gathered a window of layers at a time: `run(begin, end,
// result_norm)` returns those of layers [begin, end) (and result_norm's when
// asked); windows hold as many layers as `budget_bytes` allows at
// `layer_bytes` each (at least one), and the result_norm statistics get a
// pass of their own. Asking for a layer outside the window drops it and
// runs the window that holds the layer: quantizing in file order (layer by
// layer) runs each window once.
class LayerWindows : public StatsSource {
 public:
  using Run = std::function<Calibration(int64_t begin, int64_t end, bool result_norm)>;
  LayerWindows(Run run, int64_t n_layers, size_t layer_bytes, size_t budget_bytes);
  const InputStats* find(const std::string& tap, int64_t layer) override;
  int64_t layers_per_window() const { return per_window_; }
  int64_t passes() const { return passes_; }

 private:
  Run run_;
  int64_t n_layers_, per_window_;
  int64_t begin_ = 0, end_ = 0;  // the window held ([0, 0): none)
  bool result_norm_ = false;     // whether it is result_norm's
  int64_t passes_ = 0;
  Calibration cur_;
};

// Bytes of the statistics of one layer's inputs with these widths (H in
// doubles plus the mean |x|).
size_t input_stats_bytes(std::span<const int64_t> dims);

// The calibration text used when none is given: short children's stories
// written for Tessera (src/quant/default_calibration.cc), in the style of
// TinyStories but not taken from it, so no evaluation text is ever seen.
std::string_view default_calibration_text();

// The residual stream of every calibration token as it enters layer
// `layer` ([tokens, n_embd]; empty: none kept yet).
struct ResidualStream {
  int64_t layer = 0;
  std::vector<float> x;
};

struct CalibrationOptions {
  int64_t n_ctx = 128;        // tokens per chunk (each from an empty cache, BOS first)
  int64_t max_tokens = 16384; // calibration tokens at most
  int32_t bos = -1;           // put first in every chunk when >= 0
  // Statistics kept: layers [layer_begin, layer_end) and result_norm's.
  int64_t layer_begin = 0, layer_end = INT64_MAX;
  bool result_norm = true;
  // When set: a pass whose first wanted layer (layer_begin; the last layer
  // for result_norm alone) is at or after resume->layer starts there from
  // resume->x instead of at the embeddings, and runs only up to the last
  // layer it needs; either way resume then holds the stream after the last
  // layer run. Its statistics are those of a pass from the embeddings, bit
  // for bit. n_tokens x n_embd floats (a 2048-wide model: 8 KiB a token).
  ResidualStream* resume = nullptr;
};

// Runs `model` over `tokens` in chunks and gathers every linear's input
// statistics. progress(tokens done, tokens total).
Calibration calibrate(const Model& model, std::span<const int32_t> tokens, const CalibrationOptions& opt,
                      ThreadPool& pool, const std::function<void(int64_t, int64_t)>& progress = {});

}  // namespace tessera::quant
