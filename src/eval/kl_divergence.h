// KL divergence of a model's next-token distributions from a base model's,
// over the same chunks perplexity() scores (eval/perplexity.h): the way
// llama-perplexity's --kl-divergence-base / --kl-divergence judge a
// quantized model against the unquantized one.
//
// save_kl_base() runs the base model once and writes, for every scored
// token, its log-probabilities over the vocabulary to a file; kl_divergence()
// runs the other model over the same tokens and compares row by row. The
// file (Tessera's own format, not llama.cpp's):
//
//   "TSKLBASE" u32 version=1 u32 0
//   i64 n_ctx, n_vocab, n_chunks, n_rows, u64 token hash (FNV-1a of the ids used)
//   n_rows times: f32 min, f32 step, f32 exact log p(next token), u16[n_vocab]
//
// A row's log-probabilities are stored as min + step * u (step = (max -
// min) / 65535, at most ~5e-4 nats for the usual 30-nat spread), renormalised
// on reading. The token hash makes a base from another text, tokenizer or
// context an error instead of a wrong number.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "eval/perplexity.h"

namespace tessera::engine {

// One scored position: base log-probabilities (normalised) and the other
// model's logits, and the id of the token that follows.
struct KlRow {
  double kld = 0.0;        // sum_i p_base(i) (ln p_base(i) - ln p(i))
  bool same_top = false;   // argmax equal
  double base_logp = 0.0;  // ln p_base(next)
  double logp = 0.0;       // ln p(next)
};
KlRow kl_row(std::span<const float> base_logprobs, std::span<const float> logits, int32_t next);

// Accumulates rows into llama-perplexity's report.
struct KlResult {
  int64_t n_rows = 0;
  double ppl = 0.0, ppl_base = 0.0;
  double nll_error = 0.0;                       // standard error of the mean -ln p(next)
  double ppl_ratio = 0.0;                       // ppl / ppl_base
  double mean_ln_ratio = 0.0, ln_ratio_error = 0.0;  // mean of ln p_base(next) - ln p(next) = ln(ppl/ppl_base)
  double kld_mean = 0.0, kld_error = 0.0;
  double kld_max = 0.0, kld_min = 0.0;
  // kld at these quantiles (linear interpolation between sorted values).
  static constexpr double kQuantiles[] = {0.999, 0.99, 0.95, 0.90, 0.5, 0.10, 0.05, 0.01, 0.001};
  std::vector<double> kld_quantiles;            // one per kQuantiles
  double same_top = 0.0, same_top_error = 0.0;  // fraction of rows with the same argmax
  double rms_dp = 0.0;                          // sqrt(mean (p(next) - p_base(next))^2)
};
KlResult summarize_kl(std::span<const KlRow> rows);

// progress(chunks done, chunks total). Returns the model's own perplexity
// (the numbers perplexity() gives, up to summation order).
PerplexityResult save_kl_base(const Model& model, const Tokenizer& tokenizer, std::span<const int32_t> tokens,
                              const PerplexityOptions& opt, ThreadPool& pool, const std::string& path,
                              const std::function<void(int64_t, int64_t)>& progress = {});

// Throws Error(kCorruptFile) on a truncated or malformed base file and
// Error(kInvalidArgument) when it was made from other tokens, context or
// vocabulary.
KlResult kl_divergence(const Model& model, const Tokenizer& tokenizer, std::span<const int32_t> tokens,
                       const PerplexityOptions& opt, ThreadPool& pool, const std::string& base_path,
                       const std::function<void(int64_t, int64_t)>& progress = {});

}  // namespace tessera::engine
