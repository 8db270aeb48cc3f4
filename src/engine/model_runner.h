// Turns a SchedulerOutput into one forward pass: the flattened ragged batch
// (token ids, positions, per-sequence query ranges, block tables, slot
// mapping, rows that need logits), copy-on-write copies first, then
// model.forward() with one matmul per weight for every token of the step.
#pragma once

#include <span>

#include "engine/scheduler.h"
#include "kv/kv_manager.h"
#include "model/kv_cache.h"
#include "model/model.h"

namespace tessera::engine {

class ModelRunner {
 public:
  ModelRunner(const Model& model, KvCache& kv, ThreadPool& pool);

  // Logits [sum of num_logit_rows() over out.scheduled, n_vocab], in the
  // order of out.scheduled (a verifying request: 1 + num_draft rows).
  std::span<float> execute(const SchedulerOutput& out);

  ForwardState& state() { return state_; }

  // Seconds of one forward step of n_tokens tokens (one sequence, every row
  // with logits, as a decode or verify batch has) on scratch blocks taken
  // from `kv` and given back: the cost model of speculative decoding. 0 if
  // the pool cannot hold them.
  double time_scratch_step(int64_t n_tokens, kv::KvManager& kv);

 private:
  const Model& model_;
  KvCache& kv_;
  ForwardBatch batch_;
  ForwardState state_;
};

}  // namespace tessera::engine
