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

#include "model/lora.h"
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
  const LoraAdapter* lora = nullptr;  // an adapter to evaluate with (model/lora.h)
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
};

// progress(chunks done, chunks total)
PerplexityResult perplexity(const Model& model, const Tokenizer& tokenizer, std::span<const int32_t> tokens,
                            const PerplexityOptions& opt, ThreadPool& pool,
                            const std::function<void(int64_t, int64_t)>& progress = {});

}  // namespace tessera::engine
