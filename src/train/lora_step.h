// A LoRA training step's loss and gradients over a Llama-family decoder
// (RMSNorm, RoPE, grouped-query attention, SwiGLU; tied or untied output),
// its base weights frozen: the forward of one sequence keeping what the
// backward needs, then the backward down to every LoRA pair's A and B.
// Written with the scalar ops of train/ops.h (the reference the faster
// paths will be checked against); tests/train_lora_step_test.cc compares
// it with PyTorch (Debian's python3-torch) on stories260K.
//
// Base weights are dequantized to F32 when the model is read (a quantized
// base is QLoRA: the gradient flows through the rounded weights).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "adapters/lora.h"
#include "format/gguf.h"
#include "format/model_config.h"

namespace tessera::train {

class LoraTrainModel {
 public:
  // Throws Error(kInvalidArgument) for an architecture or feature it does
  // not train yet (naming it).
  explicit LoraTrainModel(const gguf::File& file);

  const ModelConfig& config() const { return cfg_; }
  const std::vector<float>& token_embeddings() const { return embd_; }  // [n_vocab][n_embd]

  // The mean cross-entropy of predicting tokens[1..] from the tokens before
  // them, the base model with `lora` applied; adds the gradient of that loss
  // with respect to each pair's A and B into `grads` (an adapter of the same
  // shapes, F32; its scales are ignored). `lora` must be F32.
  double loss_and_grads(std::span<const int32_t> tokens, const LoraAdapter& lora, LoraAdapter* grads) const;

  // Prompt tuning: the same loss after n_virtual learned input rows
  // `prompt` ([n_virtual][n_embd], at positions 0..n_virtual-1, read as the
  // engine reads a soft prompt); adds its gradient into `grad` (same shape).
  double prompt_loss_and_grads(std::span<const int32_t> tokens, const std::vector<float>& prompt,
                               std::vector<float>* grad) const;

  // The logits [positions][vocab] of the same forward (no gradients); with
  // a prompt, its virtual positions come first.
  std::vector<float> logits(std::span<const int32_t> tokens, const LoraAdapter* lora,
                            const std::vector<float>* prompt = nullptr) const;

 private:
  struct Layer {
    std::vector<float> attn_norm, ffn_norm;
    std::vector<float> w[kNumLoraTargets];  // [out][in] per LoraTarget
  };
  struct Tape;
  // One forward (and, with lora_grads or prompt_grad, backward) of the
  // prompt's rows (optional) then the tokens.
  struct Pass {
    std::span<const int32_t> tokens;
    const LoraAdapter* lora = nullptr;
    const std::vector<float>* prompt = nullptr;
    LoraAdapter* lora_grads = nullptr;
    std::vector<float>* prompt_grad = nullptr;
    std::vector<float>* logits = nullptr;
  };
  double run(const Pass& pass) const;

  ModelConfig cfg_;
  std::vector<float> embd_, out_norm_, output_;  // output_ empty: tied to embd_
  std::vector<Layer> layers_;
};

}  // namespace tessera::train
