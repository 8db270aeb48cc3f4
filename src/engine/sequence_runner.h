// Runs one sequence through a model without the scheduler: the path used by
// `tessera perplexity`, by tests that need logits of a single sequence, and
// by anything that wants "evaluate these tokens" without batching. Uses the
// same paged KV cache and forward pass as the engine.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "kv/kv_manager.h"
#include "kv/kv_policy.h"
#include "model/kv_cache.h"
#include "adapters/lora.h"
#include "model/model.h"

namespace tessera::engine {

struct SequenceRunnerOptions {
  int64_t n_ctx = 0;           // 0: the model's training context
  int32_t block_size = 16;
  DType kv_type = DType::kF32;
  bool kv_hadamard = false;  // Hadamard-rotated q8_0 / q4_0 K and V (kernels/attention.h)
  int64_t max_batch_tokens = 512;  // tokens per forward pass when appending many
  const LoraAdapter* lora = nullptr;  // an adapter every token runs with (adapters/lora.h)
  // A bounded cache (kv/kv_policy.h): the sequence may then run past n_ctx
  // (the cache holds at most the budget). kRecompute keeps the last budget
  // tokens and computes them again whenever a step would exceed it.
  kv::KvPolicy kv_policy{};
  // A two-regime RoPE (Phi-3's LongRoPE; model/model.h): by the sequence's
  // length (an append that makes it longer than the original context computes
  // the whole sequence again in the long regime) or by n_ctx (llama.cpp).
  LongRopeMode long_rope = LongRopeMode::kSequence;
};

class SequenceRunner {
 public:
  SequenceRunner(const Model& model, const SequenceRunnerOptions& options, ThreadPool& pool);

  int64_t n_past() const { return n_appended_; }
  // Keys in the cache (n_past() unless a policy evicted some), and the
  // cache's blocks in use.
  int64_t n_keys() const { return table_.num_keys(); }
  int64_t n_blocks() const { return static_cast<int64_t>(table_.blocks.size()); }
  const kv::KvManager& kv_manager() const { return kv_manager_; }
  int64_t n_ctx() const { return n_ctx_; }
  const Model& model() const { return model_; }

  // Drops the sequence (frees its blocks).
  void reset();

  // Appends tokens and computes them. Returns the logits of the last token
  // ([n_vocab]), or of every appended token ([n, n_vocab]) when all_logits.
  // `positions` (RoPE positions, one per token) defaults to their indices.
  // `embd_rows` (one per token, or empty) replaces tokens' input embeddings
  // (ForwardBatch::embd_rows). Throws Error(kOutOfRange) if the context
  // would overflow.
  std::span<const float> append(std::span<const int32_t> tokens, bool all_logits = false,
                                std::span<const int32_t> positions = {},
                                std::span<const float* const> embd_rows = {});

  // Layers every later forward pass leaves out ([n_layer] 0/1; empty: none),
  // as ForwardBatch::skip_layers.
  void set_skip_layers(std::vector<uint8_t> skip) { batch_.skip_layers = std::move(skip); }

  // K/V of tokens [from, to) of the sequence, out of the paged cache.
  DenseKv export_kv(int64_t from, int64_t to) const;

  // Appends kv.n_tokens tokens whose K/V are given (written, not computed),
  // e.g. Prompt Cache modules.
  void load(const DenseKv& kv);

  ForwardState& state() { return state_; }

 private:
  // One forward pass over tokens (all reserved in table_ at its end),
  // after the evictions a bounded policy asks for. Logits of every token
  // into all_logits_ at row `row0` when all_logits, else of the last.
  void run_chunk(std::span<const int32_t> tokens, std::span<const int32_t> positions,
                 std::span<const float* const> embd_rows, bool all_logits, bool want_last, int64_t row0);
  // kRecompute: the cache is emptied and the kept tokens computed again.
  void recompute_window(int64_t n_new);
  // Before appending n tokens: enters the long RoPE regime when the sequence
  // becomes long enough, computing the tokens so far again in it.
  void enter_rope_regime(int64_t n);

  const Model& model_;
  SequenceRunnerOptions opt_;
  int64_t n_ctx_;
  kv::KvManager kv_manager_;
  KvCache kv_cache_;
  kv::BlockTable table_;
  ForwardState state_;
  ForwardBatch batch_;
  AlignedBuffer<float> all_logits_;
  int64_t n_appended_ = 0;
  std::vector<int32_t> recent_;  // kRecompute: the last budget tokens of the sequence
  bool long_regime_ = false;     // the cache holds the long RoPE regime
  // A two-regime model under kSequence: the tokens so far and their
  // positions, to compute them again; opaque when some were loaded as K/V or
  // given as embedding rows (they cannot be recomputed).
  std::vector<int32_t> history_, history_pos_;
  bool history_opaque_ = false;
};

}  // namespace tessera::engine
