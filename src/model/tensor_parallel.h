// Tensor parallelism across ranks (docs/DISTRIBUTED.md). Every rank loads
// its shard (model/tensor_split.h). Rank 0 runs everything else — the
// engine, its scheduler and KV manager, sampling, HTTP — on a
// TensorParallelModel: before computing a step on its own shard, it hands
// the step (ForwardBatch: tokens, positions, slots, block tables,
// copy-on-write copies, RoPE regimes, skipped layers, logit rows) to the
// other ranks. They run follow_steps(): the same forward pass on their shard
// and their own KV cache (the same blocks, holding their heads), so the
// all-reduces inside the pass meet rank 0's; each computes its vocabulary
// slice of the logits, which rank 0 gathers.
//
// LoRA adapters travel once: the first step that uses an adapter (rank 0's,
// whole) sends its weights; every rank keeps its part (adapters::lora_part)
// under an index, and steps carry each sequence's index. When the whole
// adapter is freed (unloaded, evicted from serve's pool), the next step
// first tells every rank to free its part.
//
// Soft prompts' rows travel by value in the steps that hold them. Per-step
// state that is not in the batch's numbers is refused with a clear error
// rather than computed wrongly: bounded KV policies (key positions, scores,
// shifts, SpAtten's depths), and writes into the cache outside a step
// (Prompt Cache modules, the KV store).
#pragma once

#include <memory>

#include "core/thread_pool.h"
#include "dist/group.h"
#include "format/model_config.h"
#include "model/model.h"

namespace tessera {

class TensorParallelModel final : public Model {
 public:
  // shard: rank 0's shard of the model; group: every rank's (rank 0 is this one).
  TensorParallelModel(std::unique_ptr<Model> shard, dist::Group& group);
  ~TensorParallelModel() override;  // tells the other ranks to stop

  const ModelConfig& config() const override { return shard_->config(); }
  ModelConfig whole_config() const override { return shard_->whole_config(); }
  void forward(const ForwardBatch& batch, KvCache& kv, ForwardState& state) const override;
  size_t bytes_per_token() const override { return shard_->bytes_per_token(); }
  MatmulWork matmul_work() const override { return shard_->matmul_work(); }
  int64_t long_rope_after() const override { return shard_->long_rope_after(); }
  // Adapters whose parts the ranks hold now.
  size_t adapter_parts() const;
  const std::vector<std::vector<float>>& key_mean() const override { return shard_->key_mean(); }

 private:
  std::unique_ptr<Model> shard_;
  dist::Group& group_;
  struct Adapters;  // rank 0's parts of the adapters sent and not yet freed
  std::unique_ptr<Adapters> adapters_;
  void drop_freed_adapters() const;  // under adapters_->mu
};

// Ranks 1..N-1: runs the steps rank 0 hands out on `shard` until rank 0 says
// stop. Returns the number of steps run.
int64_t follow_steps(const Model& shard, dist::Group& group, ThreadPool& pool);

}  // namespace tessera
