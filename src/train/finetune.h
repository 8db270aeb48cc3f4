// LoRA fine-tuning on text (tessera finetune --method lora | qlora): the
// tokenized text is cut into windows of ctx + 1 tokens (each window
// predicts its last ctx tokens), shuffled by the seed every epoch, taken
// `batch` at a time; a step averages its windows' gradients (summed in
// window order, so the result is the same for any thread count) and takes
// one AdamW step on every A and B. QLoRA is the same over a quantized base
// (train/lora_step.h reads any type).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "adapters/lora.h"
#include "core/thread_pool.h"
#include "format/model_config.h"
#include "train/lora_step.h"
#include "train/ops.h"

namespace tessera::train {

struct LoraTrainOptions {
  int64_t rank = 8;
  float alpha = 16.0f;
  uint32_t targets = (1u << kNumLoraTargets) - 1;  // adapters::parse_lora_targets
  AdamW adamw{.lr = 2e-3f};
  int64_t batch = 8;   // windows per step
  int64_t ctx = 128;   // predicted tokens per window
  int64_t epochs = 1;
  int64_t steps = 0;   // > 0: stop after this many steps
  uint64_t seed = 1;
};

// A fresh adapter on `targets` of every layer: A uniform in ±1/sqrt(in)
// (PEFT's Kaiming-uniform), B zero, so training starts from the base
// model; scale alpha / rank (not folded into A).
LoraAdapter init_lora(const ModelConfig& base, int64_t rank, float alpha, uint32_t targets, uint64_t seed);

// The windows of ctx + 1 tokens of `tokens` (non-overlapping, the last
// partial one dropped). Throws Error(kInvalidArgument) when there is none.
std::vector<std::vector<int32_t>> text_windows(const std::vector<int32_t>& tokens, int64_t ctx);

struct TrainReport {
  int64_t step = 0, steps = 0;
  double loss = 0.0;       // the step's mean loss over its windows
  double seconds = 0.0;    // since training began
  int64_t tokens = 0;      // predicted tokens so far
};

// Trains `a` (from init_lora) in place on `windows`; `on_step` after each step.
void train_lora(const LoraTrainModel& m, const std::vector<std::vector<int32_t>>& windows, LoraAdapter& a,
                const LoraTrainOptions& o, ThreadPool& pool, const std::function<void(const TrainReport&)>& on_step);

// Mean cross-entropy of the windows' predicted tokens with adapter `a`
// (null: the base); exp of it is their perplexity.
double mean_loss(const LoraTrainModel& m, const std::vector<std::vector<int32_t>>& windows, const LoraAdapter* a,
                 ThreadPool& pool);

// Writes `a` (F32, scale alpha / rank unfolded) as llama.cpp's adapter
// GGUF: general.type "adapter", adapter.type "lora", adapter.lora.alpha;
// blk.N.<linear>.weight.lora_a [rank][in] and .lora_b [out][rank], F32.
void write_lora_gguf(const LoraAdapter& a, const ModelConfig& base, const std::string& path);

}  // namespace tessera::train
