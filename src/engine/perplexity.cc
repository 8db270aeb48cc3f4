#include "engine/perplexity.h"

#include <cmath>

#include "core/error.h"
#include "engine/sampler.h"
#include "engine/sequence_runner.h"
#include "model/tokenizer.h"

namespace tessera::engine {

PerplexityResult perplexity(const Model& model, const Tokenizer& tok, std::span<const int32_t> tokens,
                            const PerplexityOptions& opt, ThreadPool& pool,
                            const std::function<void(int64_t, int64_t)>& progress) {
  const int64_t n_ctx = opt.n_ctx;
  TESSERA_CHECK(n_ctx >= 8, kInvalidArgument, "context {} is too small for perplexity", n_ctx);
  TESSERA_CHECK(n_ctx <= model.config().n_ctx_train, kOutOfRange, "context {} exceeds the model's {}", n_ctx,
                model.config().n_ctx_train);
  PerplexityResult res;
  res.n_tokens = static_cast<int64_t>(tokens.size());
  TESSERA_CHECK(res.n_tokens >= 2 * n_ctx, kInvalidArgument,
                "the text has {} tokens; perplexity with context {} needs at least {}", res.n_tokens, n_ctx,
                2 * n_ctx);
  int64_t n_chunks = res.n_tokens / n_ctx;
  if (opt.max_chunks > 0) n_chunks = std::min(n_chunks, opt.max_chunks);
  res.n_chunks = n_chunks;
  const int64_t V = model.config().n_vocab;
  const int64_t first = n_ctx / 2;
  SequenceRunner runner(model, {.n_ctx = n_ctx, .kv_type = opt.kv_type, .max_batch_tokens = opt.n_batch, .lora = opt.lora}, pool);
  std::vector<int32_t> chunk(static_cast<size_t>(n_ctx));
  double nll = 0.0, nll2 = 0.0;
  for (int64_t c = 0; c < n_chunks; ++c) {
    std::copy(tokens.begin() + c * n_ctx, tokens.begin() + (c + 1) * n_ctx, chunk.begin());
    if (tok.add_bos() && tok.bos_id() >= 0) chunk[0] = tok.bos_id();
    runner.reset();
    const std::span<const float> logits = runner.append(chunk, /*all_logits=*/true);
    // Token j + 1 is predicted by the logits at j.
    for (int64_t j = first; j < n_ctx - 1; ++j) {
      const std::span<const float> row = logits.subspan(static_cast<size_t>(j * V), static_cast<size_t>(V));
      const double lp = static_cast<double>(row[tokens[c * n_ctx + j + 1]]) - log_sum_exp(row);
      nll -= lp;
      nll2 += lp * lp;
      ++res.n_scored;
    }
    res.chunk_ppl.push_back(std::exp(nll / static_cast<double>(res.n_scored)));
    if (progress) progress(c + 1, n_chunks);
  }
  const double n = static_cast<double>(res.n_scored);
  res.nll_mean = nll / n;
  const double var = nll2 / n - res.nll_mean * res.nll_mean;
  res.nll_std_error = n > 1 && var > 0 ? std::sqrt(var / (n - 1)) : 0.0;
  res.ppl = std::exp(res.nll_mean);
  res.ppl_error = res.ppl * res.nll_std_error;
  return res;
}

}  // namespace tessera::engine
