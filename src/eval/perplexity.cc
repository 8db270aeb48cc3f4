#include "eval/perplexity.h"

#include <chrono>
#include <cmath>

#include "core/error.h"
#include "engine/sampler.h"
#include "engine/sequence_runner.h"
#include "tokenizer/tokenizer.h"

namespace tessera::engine {
namespace {

// Mean NLL, its standard error and the perplexity from the sums of -lp and lp^2.
void finish_ppl_stats(PerplexityResult& res, double nll, double nll2) {
  const double n = static_cast<double>(res.n_scored);
  res.nll_mean = nll / n;
  const double var = nll2 / n - res.nll_mean * res.nll_mean;
  res.nll_std_error = n > 1 && var > 0 ? std::sqrt(var / (n - 1)) : 0.0;
  res.ppl = std::exp(res.nll_mean);
  res.ppl_error = res.ppl * res.nll_std_error;
}

}  // namespace

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
  SequenceRunner runner(model,
                        {.n_ctx = n_ctx, .kv_type = opt.kv_type, .kv_hadamard = opt.kv_hadamard, .max_batch_tokens = opt.n_batch, .lora = opt.lora,
                         .long_rope = opt.long_rope},
                        pool);
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
  finish_ppl_stats(res, nll, nll2);
  return res;
}

PerplexityResult perplexity_stream(const Model& model, std::span<const int32_t> tokens, const PerplexityOptions& opt,
                                   ThreadPool& pool, int64_t segment,
                                   const std::function<void(int64_t, int64_t)>& progress) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  TESSERA_CHECK(n >= 2, kInvalidArgument, "the text has {} tokens; perplexity needs at least 2", n);
  TESSERA_CHECK(segment >= 1, kInvalidArgument, "segment {} must be positive", segment);
  const auto t0 = std::chrono::steady_clock::now();
  const bool bounded = opt.kv_policy.bounded();
  SequenceRunner runner(model,
                        {.n_ctx = bounded ? opt.kv_policy.budget : n, .kv_type = opt.kv_type, .kv_hadamard = opt.kv_hadamard,
                         .max_batch_tokens = opt.n_batch, .lora = opt.lora, .kv_policy = opt.kv_policy,
                         .long_rope = opt.long_rope},
                        pool);
  const int64_t V = model.config().n_vocab;
  const int64_t step = bounded ? 1 : opt.n_batch;
  PerplexityResult res;
  res.n_tokens = n;
  res.segment = segment;
  double nll = 0.0, nll2 = 0.0, seg_nll = 0.0;
  int64_t seg_n = 0;
  auto seg_t0 = std::chrono::steady_clock::now();
  // Token j + 1 is predicted by the logits at j; the last token predicts nothing.
  for (int64_t done = 0; done < n - 1;) {
    const int64_t len = std::min(step, n - 1 - done);
    const std::span<const float> logits = runner.append(tokens.subspan(static_cast<size_t>(done), static_cast<size_t>(len)),
                                                        /*all_logits=*/len > 1);
    for (int64_t i = 0; i < len; ++i) {
      const std::span<const float> row = logits.subspan(static_cast<size_t>(i * V), static_cast<size_t>(V));
      const double lp = static_cast<double>(row[tokens[done + i + 1]]) - log_sum_exp(row);
      nll -= lp;
      nll2 += lp * lp;
      seg_nll -= lp;
      ++res.n_scored;
      if (++seg_n == segment) {
        res.segment_ppl.push_back(std::exp(seg_nll / static_cast<double>(seg_n)));
        res.segment_keys.push_back(runner.n_keys());
        res.segment_blocks.push_back(runner.n_blocks());
        const auto now = std::chrono::steady_clock::now();
        res.segment_seconds.push_back(std::chrono::duration<double>(now - seg_t0).count());
        seg_t0 = now;
        seg_nll = 0.0;
        seg_n = 0;
      }
    }
    done += len;
    if (progress) progress(done + 1, n);
  }
  res.n_chunks = 1;
  finish_ppl_stats(res, nll, nll2);
  res.chunk_ppl.push_back(res.ppl);
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

}  // namespace tessera::engine
