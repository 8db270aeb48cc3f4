// Fine-tuning on text (tessera finetune --method lora | qlora | prompt): the
// tokenized text is cut into windows of ctx + 1 tokens (each window
// predicts its last ctx tokens), shuffled by the seed every epoch, taken
// `batch` at a time; a step averages its windows' gradients (summed in
// window order, so the result is the same for any thread count) and takes
// one AdamW step on every trained tensor: a LoRA adapter's A and B, or a
// soft prompt's rows (prompt tuning, Lester et al. 2021). QLoRA is LoRA
// over a quantized base (train/lora_step.h reads any type).
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

struct TrainOptions {
  int64_t rank = 8;             // LoRA
  float alpha = 16.0f;
  int64_t n_virtual = 16;       // prompt tuning
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

// What a method trains and one window's gradient of it.
struct Trainable {
  std::vector<std::vector<float>*> params;
  // The window's loss; its gradients added into grads[i] (params[i]'s
  // shape, zeroed by the caller).
  std::function<double(const std::vector<int32_t>& window, std::vector<std::vector<float>>& grads)> window_grad;
};

using StepCallback = std::function<void(const TrainReport&)>;

// Trains t.params in place on `windows`; `on_step` after each step.
void train(const std::vector<std::vector<int32_t>>& windows, const Trainable& t, const TrainOptions& o,
           ThreadPool& pool, const StepCallback& on_step);

// Trains `a` (from init_lora) in place.
void train_lora(const LoraTrainModel& m, const std::vector<std::vector<int32_t>>& windows, LoraAdapter& a,
                const TrainOptions& o, ThreadPool& pool, const StepCallback& on_step);

// A soft prompt of n_virtual rows, each the embedding of a random token
// of the vocabulary (Lester et al.'s initialization from the vocabulary).
std::vector<float> init_prompt(const LoraTrainModel& m, int64_t n_virtual, uint64_t seed);

// Trains `prompt` ([n_virtual][n_embd]) in place.
void train_prompt(const LoraTrainModel& m, const std::vector<std::vector<int32_t>>& windows, std::vector<float>& prompt,
                  const TrainOptions& o, ThreadPool& pool, const StepCallback& on_step);

// Mean cross-entropy of the windows' predicted tokens with adapter `a`
// and soft prompt `prompt` (null: none); exp of it is their perplexity.
double mean_loss(const LoraTrainModel& m, const std::vector<std::vector<int32_t>>& windows, const LoraAdapter* a,
                 ThreadPool& pool, const std::vector<float>* prompt = nullptr);

// Writes a soft prompt as the .npy file `serve --soft-prompt` and
// `generate --soft-prompt` read (float32 [n_virtual][n_embd]).
void write_soft_prompt_npy(const std::vector<float>& prompt, int64_t n_embd, const std::string& path);

// Writes a soft prompt as the .npy file `serve --soft-prompt` and
// `generate --soft-prompt` read (float32 [n_virtual][n_embd]).
void write_soft_prompt_npy(const std::vector<float>& prompt, int64_t n_embd, const std::string& path);

// Writes `a` (F32, scale alpha / rank unfolded) as llama.cpp's adapter
// GGUF: general.type "adapter", adapter.type "lora", adapter.lora.alpha;
// blk.N.<linear>.weight.lora_a [rank][in] and .lora_b [out][rank], F32.
void write_lora_gguf(const LoraAdapter& a, const ModelConfig& base, const std::string& path);

}  // namespace tessera::train
