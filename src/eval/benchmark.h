// `tessera bench`, like llama-bench: prompt processing (ppN: N prompt
// tokens in one forward pass from an empty cache) and text generation (tgN:
// N single-token steps from an empty cache), repeated; medians reported.
// And like llama-batched-bench: B sequences through the serving engine, each
// with its own N-token prompt, then M decode steps of all B together.
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
  bool kv_hadamard = false;  // Hadamard-rotated q8_0 / q4_0 K and V (kernels/attention.h)
  int64_t n_batch = 512;  // tokens per forward pass for pp
  // Called right before each timed tg repetition (e.g. to measure the
  // machine's bandwidth at that moment, for a roofline fraction per
  // repetition); its own time is not counted.
  std::function<void()> before_tg;
  // Seconds this process has spent communicating so far (tensor
  // parallelism's all-reduces: dist::World::sum_stats), read around each
  // timed pass; null: none.
  std::function<double()> comm_clock;
};

struct BenchResult {
  double pp_tps = 0.0;               // median
  double tg_tps = 0.0;               // median
  std::vector<double> pp_samples;    // tokens/s of each repetition
  std::vector<double> tg_samples;
  // Timed passes' seconds, and their communication seconds (comm_clock).
  double pp_seconds = 0.0, tg_seconds = 0.0, pp_comm_seconds = 0.0, tg_comm_seconds = 0.0;
  // A mixture's load over every pass: tokens per (layer, expert), [n_layer * n_expert].
  std::vector<int64_t> expert_tokens;
  // Contextual sparsity over the tg repetitions (model/ffn_sparsity.h):
  // neurons considered, kept, and in the steps' unions (ForwardState).
  int64_t ffn_neurons = 0, ffn_kept = 0, ffn_union_rows = 0;
};

// Median of v (mean of the middle two for an even count; 0 if empty).
double median(std::vector<double> v);

BenchResult run_bench(const Model& model, const BenchOptions& opt, ThreadPool& pool);

struct BatchedBenchOptions {
  int64_t n_prompt = 128;  // per sequence (llama-batched-bench -npp)
  int64_t n_gen = 128;     // decode steps after the prompts (-ntg)
  std::vector<int32_t> batch_sizes = {1, 4, 16, 32};  // sequences (-npl)
  int reps = 1;
  int threads = 0;
  DType kv_type = DType::kF16;
  bool kv_hadamard = false;  // Hadamard-rotated q8_0 / q4_0 K and V (kernels/attention.h)
};

struct BatchedBenchRow {
  int32_t batch = 0;
  double pp_tps = 0.0;  // prompt tokens of all sequences / time until every sequence has its first token
  double tg_tps = 0.0;  // batch * n_gen / time of the decode steps after that (llama-batched-bench's S_TG)
  std::vector<double> pp_samples, tg_samples;
};

// Runs the continuous-batching engine (engine.h) as llama-batched-bench runs
// llama_decode: B requests of distinct random n_prompt-token prompts, greedy,
// ignore_eos, n_gen + 1 tokens each (the first comes from the prompt's
// logits, as the batched bench's prompt pass computes its last row); no
// prefix caching, no speculation. Medians over reps.
std::vector<BatchedBenchRow> run_batched_bench(const Model& model, const BatchedBenchOptions& opt);

}  // namespace tessera::engine
