// A roofline model of a serving workload: every forward step costs at least
// max(its weight multiply-adds / compute peak, its weight bytes / read
// bandwidth). Attention, sampling and scheduling are left out (they only add
// time), so for each way of batching the model gives the least time any
// engine could take on this machine, and the ratios between batching
// policies that perfect implementations of each would show. bench/throughput
// prints it next to what it measured: where a target ratio exceeds the
// model's, no engine can reach it on this machine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tessera::engine {

struct RooflineMachine {
  double macs_per_s = 0.0;   // measured compute peak (kernels/peak.h)
  double bytes_per_s = 0.0;  // measured read bandwidth (kernels/membw.h)
};

struct RooflineModelShape {
  int64_t macs_per_token = 0;      // Model::MatmulWork::per_token
  int64_t macs_per_logit_row = 0;  // Model::MatmulWork::per_logit_row
  size_t weight_bytes = 0;         // read once per step (Model::bytes_per_token)
};

struct WorkloadRequest {
  int64_t prompt_tokens = 0;
  int64_t output_tokens = 0;  // >= 1: the first comes from the prompt's last step
};

struct RooflineTimes {
  double one_at_a_time = 0.0;   // (a): each request alone, prompt in chunks then one token per step
  double static_batches = 0.0;  // (b): batches of `static_batch` in order, each to its longest request
  double continuous = 0.0;      // (c): lower bound, all work at peak in the fewest possible steps
};

// max_batch_tokens: tokens per forward step (prompt chunks). static_batch >= 1.
RooflineTimes roofline_times(const std::vector<WorkloadRequest>& requests, const RooflineModelShape& model,
                             const RooflineMachine& machine, int static_batch, int64_t max_batch_tokens);

}  // namespace tessera::engine
