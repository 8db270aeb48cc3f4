// Turns a SchedulerOutput into one forward pass: the flattened ragged batch
// (token ids, positions, per-sequence query ranges, block tables, slot
// mapping, rows that need logits), copy-on-write copies first, then
// model.forward() with one matmul per weight for every token of the step.
#pragma once

#include <span>

#include "engine/scheduler.h"
#include "model/kv_cache.h"
#include "model/model.h"

namespace tessera::engine {

class ModelRunner {
 public:
  ModelRunner(const Model& model, KvCache& kv, ThreadPool& pool);

  // Logits [number of scheduled entries with sample, n_vocab], in the order
  // of out.scheduled.
  std::span<float> execute(const SchedulerOutput& out);

  ForwardState& state() { return state_; }

 private:
  const Model& model_;
  KvCache& kv_;
  ForwardBatch batch_;
  ForwardState state_;
};

}  // namespace tessera::engine
