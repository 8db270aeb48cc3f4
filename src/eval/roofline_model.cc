#include "eval/roofline_model.h"

#include <algorithm>

#include "core/error.h"

namespace tessera::engine {
namespace {

struct StepCost {
  const RooflineModelShape& m;
  const RooflineMachine& hw;
  double memory() const { return static_cast<double>(m.weight_bytes) / hw.bytes_per_s; }
  double compute(int64_t tokens, int64_t logit_rows) const {
    return (static_cast<double>(tokens) * static_cast<double>(m.macs_per_token) +
            static_cast<double>(logit_rows) * static_cast<double>(m.macs_per_logit_row)) /
           hw.macs_per_s;
  }
  double step(int64_t tokens, int64_t logit_rows) const { return std::max(compute(tokens, logit_rows), memory()); }
};

// The prompts of `reqs`, packed in order into steps of at most `budget`
// tokens; a prompt's logit row is in the step holding its last token.
double prefill_time(const StepCost& cost, const WorkloadRequest* reqs, size_t n, int64_t budget) {
  double t = 0.0;
  int64_t in_step = 0, rows = 0;
  for (size_t i = 0; i < n; ++i) {
    int64_t left = reqs[i].prompt_tokens;
    while (left > 0) {
      const int64_t take = std::min(left, budget - in_step);
      in_step += take;
      left -= take;
      if (left == 0) ++rows;
      if (in_step == budget) {
        t += cost.step(in_step, rows);
        in_step = rows = 0;
      }
    }
  }
  if (in_step > 0) t += cost.step(in_step, rows);
  return t;
}

}  // namespace

RooflineTimes roofline_times(const std::vector<WorkloadRequest>& requests, const RooflineModelShape& model,
                             const RooflineMachine& machine, int static_batch, int64_t max_batch_tokens) {
  TESSERA_CHECK(machine.macs_per_s > 0 && machine.bytes_per_s > 0 && static_batch >= 1 && max_batch_tokens >= 1,
                kInvalidArgument, "roofline model: peak, bandwidth, batch and budget must be positive");
  const StepCost cost{model, machine};
  RooflineTimes t;
  double total_macs_time = 0.0;
  int64_t total_tokens = 0, longest_output = 0;
  for (const WorkloadRequest& r : requests) {
    TESSERA_CHECK(r.prompt_tokens >= 1 && r.output_tokens >= 1, kInvalidArgument,
                  "roofline model: every request needs a prompt token and an output token");
    t.one_at_a_time += prefill_time(cost, &r, 1, max_batch_tokens) +
                       static_cast<double>(r.output_tokens - 1) * cost.step(1, 1);
    total_macs_time += cost.compute(r.prompt_tokens, 1) + cost.compute(r.output_tokens - 1, r.output_tokens - 1);
    total_tokens += r.prompt_tokens + r.output_tokens - 1;
    longest_output = std::max(longest_output, r.output_tokens);
  }
  for (size_t b0 = 0; b0 < requests.size(); b0 += static_cast<size_t>(static_batch)) {
    const size_t n = std::min(requests.size() - b0, static_cast<size_t>(static_batch));
    t.static_batches += prefill_time(cost, requests.data() + b0, n, max_batch_tokens);
    int64_t longest = 0;
    for (size_t i = 0; i < n; ++i) longest = std::max(longest, requests[b0 + i].output_tokens);
    for (int64_t s = 1; s < longest; ++s) {  // decode step s: requests with more than s outputs
      int64_t k = 0;
      for (size_t i = 0; i < n; ++i) k += requests[b0 + i].output_tokens > s;
      t.static_batches += cost.step(k, k);
    }
  }
  // Continuous batching can do no better than all the arithmetic at peak,
  // nor take fewer steps than the token budget or the longest request allow.
  const int64_t min_steps = std::max((total_tokens + max_batch_tokens - 1) / max_batch_tokens, longest_output);
  t.continuous = std::max(total_macs_time, static_cast<double>(min_steps) * cost.memory());
  return t;
}

}  // namespace tessera::engine
