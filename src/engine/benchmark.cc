#include "engine/benchmark.h"

#include <algorithm>
#include <chrono>

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
  SequenceRunner runner(model, {.n_ctx = n_ctx, .kv_type = opt.kv_type, .max_batch_tokens = opt.n_batch}, pool);
  const int32_t V = static_cast<int32_t>(model.config().n_vocab);
  // Token ids do not change the cost; use a fixed, varied sequence.
  std::vector<int32_t> prompt;
  for (int64_t i = 0; i < opt.n_prompt; ++i) prompt.push_back(static_cast<int32_t>((i * 7919 + 1) % V));
  BenchResult res;
  auto now = [] { return std::chrono::steady_clock::now(); };
  // One untimed warm-up of each, so page faults on the mapped weights are not counted.
  if (opt.n_prompt > 0) runner.append(prompt);
  runner.reset();
  for (int r = 0; r < opt.reps; ++r) {
    if (opt.n_prompt > 0) {
      runner.reset();
      const auto t0 = now();
      runner.append(prompt);
      res.pp_samples.push_back(static_cast<double>(opt.n_prompt) / std::chrono::duration<double>(now() - t0).count());
    }
    if (opt.n_gen > 0) {
      runner.reset();
      if (opt.before_tg) opt.before_tg();
      int32_t tok = 1;
      const auto t0 = now();
      for (int64_t i = 0; i < opt.n_gen; ++i) {
        const int32_t ids[1] = {tok};
        const auto logits = runner.append(ids);
        // Greedy, with the vector argmax kernel: a scalar scan of 32000
        // logits is a visible serial share of a 110m token (llama-bench's
        // tg does not sample at all).
        tok = static_cast<int32_t>(kernels::argmax(logits.data(), static_cast<int64_t>(logits.size()), active_isa()));
      }
      res.tg_samples.push_back(static_cast<double>(opt.n_gen) / std::chrono::duration<double>(now() - t0).count());
    }
  }
  res.pp_tps = median(res.pp_samples);
  res.tg_tps = median(res.tg_samples);
  return res;
}

}  // namespace tessera::engine
