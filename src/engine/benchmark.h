// `tessera bench`, like llama-bench: prompt processing (ppN: N prompt
// tokens in one forward pass from an empty cache) and text generation (tgN:
// N single-token steps from an empty cache), repeated; medians reported.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "model/model.h"

namespace tessera::engine {

struct BenchOptions {
  int64_t n_prompt = 128;
  int64_t n_gen = 64;
  int reps = 5;
  DType kv_type = DType::kF16;
  int64_t n_batch = 512;  // tokens per forward pass for pp
  // Called right before each timed tg repetition (e.g. to measure the
  // machine's bandwidth at that moment, for a roofline fraction per
  // repetition); its own time is not counted.
  std::function<void()> before_tg;
};

struct BenchResult {
  double pp_tps = 0.0;               // median
  double tg_tps = 0.0;               // median
  std::vector<double> pp_samples;    // tokens/s of each repetition
  std::vector<double> tg_samples;
};

// Median of v (mean of the middle two for an even count; 0 if empty).
double median(std::vector<double> v);

BenchResult run_bench(const Model& model, const BenchOptions& opt, ThreadPool& pool);

}  // namespace tessera::engine
