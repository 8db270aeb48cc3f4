// Per-step input to a model's forward pass: the flattened ragged batch the
// scheduler built. Passed explicitly to forward(); nothing lives in globals.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/attention.h"
#include "kv/kv_manager.h"

namespace tessera {

struct LoraAdapter;  // adapters/lora.h

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
  // Each sequence's LoRA adapter (adapters/lora.h; nullptr: none), or empty
  // when no sequence of the step has one.
  std::vector<const LoraAdapter*> seq_lora;
  // Input embedding rows that replace token embeddings (soft prompts'
  // virtual tokens; adapters/soft_prompt.h): [n_tokens], nullptr for a token
  // looked up as usual; empty when no token of the step has one.
  std::vector<const float*> embd_rows;
  // Copy-on-write copies the KV manager asked for this step, carried out
  // before anything else (so the step's whole effect on the cache travels
  // with it: model/tensor_parallel.h).
  std::vector<kv::CopyOp> copies;
  // Kept keys of bounded caches that moved to new positions (kv/kv_policy.h):
  // rotated in every layer before the step's tokens run. Empty: none.
  std::vector<kv::KeyShift> key_shifts;
  // SpAtten's cascade (kv/kv_policy.h): per sequence, the number of layers
  // that see each of its slots (layer il sees slot j iff key_depth[j] > il),
  // nullptr for a sequence every layer sees whole; empty when no sequence of
  // the step has one.
  std::vector<const uint8_t*> key_depth;
  // Two-regime RoPE (Model::long_rope_after): per sequence, 1 when it runs
  // in the long regime. Empty: a sequence is long when its keys outnumber
  // the original context (a whole sequence in one step, as transformers).
  std::vector<uint8_t> long_rope;

  int64_t n_tokens() const { return static_cast<int64_t>(tokens.size()); }
  void clear() {
    tokens.clear();
    positions.clear();
    slots.clear();
    seqs.clear();
    logit_rows.clear();
    seq_lora.clear();
    embd_rows.clear();
    key_shifts.clear();
    copies.clear();
    key_depth.clear();
    long_rope.clear();
  }  // skip_layers stays: it describes the caller, not the step's tokens
};

// The attention entry of a sequence whose tokens [first, first + q_len)
// are the rows [q_begin, q_begin + q_len) of the step (all reserved in t).
// forward() adds to t.key_score when t is scored.
inline kernels::AttentionSeq attention_seq(kv::BlockTable& t, int32_t q_begin, int64_t first, int64_t q_len,
                                           int32_t block_size) {
  if (!t.mapped()) {
    return {q_begin, static_cast<int32_t>(q_len), static_cast<int32_t>(first + q_len), t.blocks.data()};
  }
  // A scored table (H2O, SpAtten) collects the attention mass of its keys
  // (into the table's own vector: nothing resizes it before forward()).
  int64_t* mass = t.scored() ? t.key_score.data() : nullptr;
  return {q_begin, static_cast<int32_t>(q_len), static_cast<int32_t>(t.key_pos.size()), t.blocks.data(),
          t.key_pos.data(), t.position(first, block_size), mass};
}

}  // namespace tessera
