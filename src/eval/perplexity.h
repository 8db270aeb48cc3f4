// Perplexity computed the way llama.cpp's llama-perplexity computes it, so
// numbers are comparable: the text is tokenized once (BOS first when the
// model adds one), cut into chunks of n_ctx tokens, each chunk evaluated
// from an empty cache with its first token replaced by BOS, and only the
// second half of each chunk scored (every scored token has at least n_ctx/2
// tokens of context).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "kv/kv_policy.h"
#include "adapters/lora.h"
#include "model/model.h"

namespace tessera {
class Tokenizer;
}

namespace tessera::engine {

struct PerplexityOptions {
  int64_t n_ctx = 512;
  int64_t n_batch = 512;     // tokens per forward pass
  int64_t max_chunks = -1;   // -1: all
  DType kv_type = DType::kF16;
  bool kv_hadamard = false;  // Hadamard-rotated q8_0 / q4_0 K and V (kernels/attention.h)
  const LoraAdapter* lora = nullptr;  // an adapter to evaluate with (adapters/lora.h)
  // perplexity_stream(): the KV policy (docs/KV_POLICIES.md).
  kv::KvPolicy kv_policy{};
  LongRopeMode long_rope = LongRopeMode::kSequence;  // model/model.h
};

struct PerplexityResult {
  int64_t n_tokens = 0;      // tokens of the text
  int64_t n_chunks = 0;
  int64_t n_scored = 0;
  double nll_mean = 0.0;     // mean negative log-likelihood (nats)
  double nll_std_error = 0.0;
  double ppl = 0.0;
  double ppl_error = 0.0;    // ppl * standard error of the mean nll
  std::vector<double> chunk_ppl;  // running estimate after each chunk
  // perplexity_stream(): perplexity of each segment of `segment` scored
  // tokens (how quality moves with the position), the cache's keys and
  // blocks at the end of each, and seconds spent.
  int64_t segment = 0;
  std::vector<double> segment_ppl;
  std::vector<int64_t> segment_keys, segment_blocks;
  std::vector<double> segment_seconds;
  double seconds = 0.0;
};

// progress(chunks done, chunks total)
PerplexityResult perplexity(const Model& model, const Tokenizer& tokenizer, std::span<const int32_t> tokens,
                            const PerplexityOptions& opt, ThreadPool& pool,
                            const std::function<void(int64_t, int64_t)>& progress = {});

// The whole text as one continuous sequence (no chunks, no BOS but the
// text's own): every token from the second on is scored, each computed with
// the cache opt.kv_policy leaves (dense: every token before it, at its text
// position). Bounded policies append one token per forward pass, as a
// stream decodes; dense appends opt.n_batch at a time (the same logits; 1
// to time decoding).
// progress(tokens done, tokens total)
PerplexityResult perplexity_stream(const Model& model, std::span<const int32_t> tokens, const PerplexityOptions& opt,
                                   ThreadPool& pool, int64_t segment = 1000,
                                   const std::function<void(int64_t, int64_t)>& progress = {});

}  // namespace tessera::engine
