// Per-step input to a model's forward pass: the flattened ragged batch the
// scheduler built. Passed explicitly to forward(); nothing lives in globals.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/attention.h"

namespace tessera {

struct LoraAdapter;  // model/lora.h

struct ForwardBatch {
  std::vector<int32_t> tokens;     // [n_tokens] token ids, sequences back to back
  std::vector<int32_t> positions;  // [n_tokens] RoPE position of each token
  std::vector<int64_t> slots;      // [n_tokens] KV slot each token's K/V is written to
  // One entry per sequence: its query rows and block table (the pointers
  // refer to block tables owned by the caller and must outlive forward()).
  std::vector<kernels::AttentionSeq> seqs;
  std::vector<int32_t> logit_rows;  // rows whose logits are wanted, in output order
  // Layers this step skips (self-speculative drafting: the target with some
  // layers left out; their K/V are not written). Empty: every layer runs.
  std::vector<uint8_t> skip_layers;  // [n_layer] 0/1, or empty
  // Each sequence's LoRA adapter (model/lora.h; nullptr: none), or empty
  // when no sequence of the step has one.
  std::vector<const LoraAdapter*> seq_lora;
  // Input embedding rows that replace token embeddings (soft prompts'
  // virtual tokens; model/soft_prompt.h): [n_tokens], nullptr for a token
  // looked up as usual; empty when no token of the step has one.
  std::vector<const float*> embd_rows;

  int64_t n_tokens() const { return static_cast<int64_t>(tokens.size()); }
  void clear() {
    tokens.clear();
    positions.clear();
    slots.clear();
    seqs.clear();
    logit_rows.clear();
    seq_lora.clear();
    embd_rows.clear();
  }  // skip_layers stays: it describes the caller, not the step's tokens
};

}  // namespace tessera
