#include "eval/benchmark.h"

#include <algorithm>
#include <chrono>

#include "engine/engine.h"
#include "engine/sequence_runner.h"
#include "kernels/ops.h"

namespace tessera::engine {
double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

BenchResult run_bench(const Model& model, const BenchOptions& opt, ThreadPool& pool) {
  const int64_t n_ctx = std::max<int64_t>(opt.n_prompt, opt.n_gen) + 1;
  SequenceRunner runner(model, {.n_ctx = n_ctx, .kv_type = opt.kv_type, .kv_hadamard = opt.kv_hadamard, .max_batch_tokens = opt.n_batch}, pool);
  const int32_t V = static_cast<int32_t>(model.config().n_vocab);
  // Token ids do not change the cost; use a fixed, varied sequence.
  std::vector<int32_t> prompt;
  for (int64_t i = 0; i < opt.n_prompt; ++i) prompt.push_back(static_cast<int32_t>((i * 7919 + 1) % V));
  BenchResult res;
  auto now = [] { return std::chrono::steady_clock::now(); };
  auto comm = [&opt] { return opt.comm_clock ? opt.comm_clock() : 0.0; };
  // One untimed warm-up of each, so page faults on the mapped weights are not counted.
  if (opt.n_prompt > 0) runner.append(prompt);
  runner.reset();
  ForwardState& st = runner.state();
  st.ffn_neurons = st.ffn_kept = st.ffn_union_rows = st.ffn_layer_steps = 0;
  int64_t neurons = 0, kept = 0, union_rows = 0;
  for (int r = 0; r < opt.reps; ++r) {
    if (opt.n_prompt > 0) {
      runner.reset();
      const double c0 = comm();
      const auto t0 = now();
      runner.append(prompt);
      const double s = std::chrono::duration<double>(now() - t0).count();
      res.pp_samples.push_back(static_cast<double>(opt.n_prompt) / s);
      res.pp_seconds += s;
      res.pp_comm_seconds += comm() - c0;
    }
    if (opt.n_gen > 0) {
      runner.reset();
      if (opt.before_tg) opt.before_tg();
      int32_t tok = 1;
      st.ffn_neurons = st.ffn_kept = st.ffn_union_rows = 0;
      const double c0 = comm();
      const auto t0 = now();
      for (int64_t i = 0; i < opt.n_gen; ++i) {
        const int32_t ids[1] = {tok};
        const auto logits = runner.append(ids);
        // Greedy, with the vector argmax kernel: a scalar scan of 32000
        // logits is a visible serial share of a 110m token (llama-bench's
        // tg does not sample at all).
        tok = static_cast<int32_t>(kernels::argmax(logits.data(), static_cast<int64_t>(logits.size()), active_isa()));
      }
      const double s = std::chrono::duration<double>(now() - t0).count();
      res.tg_samples.push_back(static_cast<double>(opt.n_gen) / s);
      res.tg_seconds += s;
      res.tg_comm_seconds += comm() - c0;
      neurons += st.ffn_neurons;
      kept += st.ffn_kept;
      union_rows += st.ffn_union_rows;
    }
  }
  res.pp_tps = median(res.pp_samples);
  res.tg_tps = median(res.tg_samples);
  res.expert_tokens = runner.state().expert_tokens;
  res.ffn_neurons = neurons;
  res.ffn_kept = kept;
  res.ffn_union_rows = union_rows;
  return res;
}

std::vector<BatchedBenchRow> run_batched_bench(const Model& model, const BatchedBenchOptions& opt) {
  const int32_t V = static_cast<int32_t>(model.config().n_vocab);
  std::vector<BatchedBenchRow> rows;
  using Seconds = std::chrono::duration<double>;
  for (const int32_t B : opt.batch_sizes) {
    EngineConfig cfg;
    cfg.max_num_seqs = B;
    // Every prompt in one step where the budget allows, as the batched
    // bench's one llama_decode of all prompts (chunked by its n_batch 2048).
    cfg.max_num_batched_tokens = static_cast<int32_t>(std::clamp<int64_t>(opt.n_prompt * B, 512, 2048));
    cfg.max_model_len = opt.n_prompt + opt.n_gen + 2;
    cfg.kv_memory_bytes = 0;
    cfg.kv_type = opt.kv_type;
    cfg.kv_hadamard = opt.kv_hadamard;
    cfg.enable_prefix_caching = false;
    cfg.threads = opt.threads;
    cfg.seed = 1;
    Engine eng(model, nullptr, cfg);
    BatchedBenchRow row;
    row.batch = B;
    // One untimed warm-up repetition (page faults on the mapped weights).
    for (int r = -1; r < opt.reps; ++r) {
      SamplingParams p;
      p.temperature = 0.0f;
      p.ignore_eos = true;
      p.max_tokens = static_cast<int32_t>(opt.n_gen + 1);
      for (int32_t b = 0; b < B; ++b) {
        std::vector<int32_t> prompt;
        for (int64_t i = 0; i < opt.n_prompt; ++i) {
          prompt.push_back(static_cast<int32_t>((i * 7919 + b * 104729 + r * 13 + 1000003) % V));
        }
        eng.add_request(std::move(prompt), p);
      }
      const int64_t generated_before = eng.stats().generation_tokens_total;
      const auto t0 = Clock::now();
      std::optional<Clock::time_point> prompts_done;
      while (eng.has_unfinished()) {
        eng.step();
        if (!prompts_done && eng.stats().generation_tokens_total - generated_before >= B) {
          prompts_done = Clock::now();
        }
      }
      const auto t1 = Clock::now();
      if (r < 0 || !prompts_done) continue;
      row.pp_samples.push_back(static_cast<double>(B * opt.n_prompt) / Seconds(*prompts_done - t0).count());
      row.tg_samples.push_back(static_cast<double>(B * opt.n_gen) / Seconds(t1 - *prompts_done).count());
    }
    row.pp_tps = median(row.pp_samples);
    row.tg_tps = median(row.tg_samples);
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace tessera::engine
