#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include <fmt/format.h>

namespace tessera::engine {

std::string validate(const SamplingParams& p, int64_t n_vocab) {
  if (!(p.temperature >= 0.0f) || p.temperature > 100.0f) return fmt::format("temperature {} must be in [0, 100]", p.temperature);
  if (p.top_k < 0) return fmt::format("top_k {} must be >= 0", p.top_k);
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) return fmt::format("top_p {} must be in (0, 1]", p.top_p);
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) return fmt::format("min_p {} must be in [0, 1]", p.min_p);
  if (!(p.repetition_penalty > 0.0f && p.repetition_penalty <= 10.0f)) return fmt::format("repetition_penalty {} must be in (0, 10]", p.repetition_penalty);
  if (!(p.presence_penalty >= -2.0f && p.presence_penalty <= 2.0f)) return fmt::format("presence_penalty {} must be in [-2, 2]", p.presence_penalty);
  if (!(p.frequency_penalty >= -2.0f && p.frequency_penalty <= 2.0f)) return fmt::format("frequency_penalty {} must be in [-2, 2]", p.frequency_penalty);
  if (p.max_tokens < 1) return fmt::format("max_tokens {} must be >= 1", p.max_tokens);
  if (p.n < 1) return fmt::format("n {} must be >= 1", p.n);
  if (p.speculative_k < 0 || p.speculative_k > 64) return fmt::format("speculative k {} must be in [0, 64]", p.speculative_k);
  if (p.top_logprobs < 0 || p.top_logprobs > 20) return fmt::format("top_logprobs {} must be in [0, 20]", p.top_logprobs);
  for (int32_t t : p.stop_token_ids) {
    if (t < 0 || t >= n_vocab) return fmt::format("stop token id {} is out of range", t);
  }
  return kv::check_kv_policy(p.kv_policy);
}

float log_sum_exp(std::span<const float> logits) {
  float mx = -INFINITY;
  for (float v : logits) mx = std::max(mx, v);
  double sum = 0.0;
  for (float v : logits) sum += std::exp(static_cast<double>(v - mx));
  return mx + static_cast<float>(std::log(sum));
}

namespace {

// Candidates: a total order by logit, ties by id.
bool ranks_before(std::span<const float> logits, int32_t a, int32_t b) {
  return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
}

// The k most likely tokens with their log-probabilities under the raw logits.
std::vector<TokenLogprob> top_logprobs(std::span<const float> logits, int32_t k, float lse, std::vector<int32_t>& idx) {
  const int32_t V = static_cast<int32_t>(logits.size());
  idx.resize(V);
  std::iota(idx.begin(), idx.end(), 0);
  k = std::min(k, V);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) { return ranks_before(logits, a, b); });
  std::vector<TokenLogprob> top;
  for (int32_t i = 0; i < k; ++i) {
    if (logits[idx[i]] == -INFINITY) break;  // masked: never sampled, not an alternative
    top.push_back({idx[i], logits[idx[i]] - lse});
  }
  return top;
}

// Repetition penalty on every token seen (prompt or output), then presence
// and frequency penalties on the output's tokens.
void apply_penalties(std::span<float> logits, const SamplingParams& p, const TokenHistory& h) {
  if (p.repetition_penalty != 1.0f) {
    auto penalise = [&](int32_t t) {
      float& l = logits[t];
      l = l > 0.0f ? l / p.repetition_penalty : l * p.repetition_penalty;
    };
    for (const auto& [t, c] : h.prompt) penalise(t);
    for (const auto& [t, c] : h.output) {
      if (!h.prompt.count(t)) penalise(t);
    }
  }
  if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
    for (const auto& [t, c] : h.output) {
      logits[t] -= p.presence_penalty + p.frequency_penalty * static_cast<float>(c);
    }
  }
}

int32_t argmax(std::span<const float> logits) {
  int32_t best = 0;
  for (int32_t i = 1; i < static_cast<int32_t>(logits.size()); ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return best;
}

// The support of the sampling distribution: the first n ids of idx and their
// weights exp((logit - max) / T) in w, which sum to `sum`. Only what a filter
// needs is sorted: top-k sorts its k, top-p a growing prefix until it holds
// the mass, min-p is a threshold; plain temperature sampling sorts nothing
// (a full sort of a 32000-token vocabulary per sampled token cost more than
// the decode step of a small model's batch).
struct Candidates {
  std::span<const float> logits;
  std::vector<int32_t>& idx;
  std::vector<float>& w;
  int32_t n = 0;
  double sum = 0.0;
  bool sorted = false;
  float mx = 0.0f, inv_t = 1.0f;

  bool before(int32_t a, int32_t b) const { return ranks_before(logits, a, b); }
  float weight(int32_t id) const { return std::exp((logits[id] - mx) * inv_t); }
  void weigh() {
    w.resize(n);
    sum = 0.0;
    for (int32_t i = 0; i < n; ++i) {
      w[i] = weight(idx[i]);
      sum += w[i];
    }
  }
};

// All tokens, or the top-k sorted; then the weights at temperature T.
void start_candidates(Candidates& c, int32_t top_k, float temperature) {
  const int32_t V = static_cast<int32_t>(c.logits.size());
  // Masked ids (-inf: past the tokenizer, or refused by a grammar) weigh
  // nothing: leaving them out changes no draw and saves their exp().
  c.idx.resize(V);
  int32_t n = 0;
  for (int32_t i = 0; i < V; ++i) {
    c.idx[n] = i;
    n += c.logits[i] != -INFINITY;
  }
  c.idx.resize(n);
  c.n = n;
  TESSERA_CHECK(n > 0, kInternal, "every token is masked: nothing to sample");
  if (top_k > 0 && top_k < n) {
    c.n = top_k;
    std::partial_sort(c.idx.begin(), c.idx.begin() + c.n, c.idx.end(), [&](int32_t a, int32_t b) { return c.before(a, b); });
    c.sorted = true;
  }
  c.mx = c.logits[c.idx[0]];
  for (int32_t i = 1; i < c.n && !c.sorted; ++i) c.mx = std::max(c.mx, c.logits[c.idx[i]]);
  c.inv_t = 1.0f / temperature;
  c.weigh();
}

// top-p: the smallest prefix of the sorted candidates whose mass reaches
// top_p. Each widening keeps the prefix already summed (the order is total),
// so every weight is added once.
void keep_top_p(Candidates& c, float top_p) {
  const double target = static_cast<double>(top_p) * c.sum;
  int32_t sorted_n = c.sorted ? c.n : 0, summed = 0, keep = c.n;
  double cum = 0.0;
  for (int32_t want = 64; keep == c.n; want *= 4) {
    if (sorted_n < c.n) {
      sorted_n = std::min(want, c.n);
      std::partial_sort(c.idx.begin(), c.idx.begin() + sorted_n, c.idx.begin() + c.n,
                        [&](int32_t a, int32_t b) { return c.before(a, b); });
    }
    for (; summed < sorted_n; ++summed) {
      cum += c.weight(c.idx[summed]);
      if (cum >= target) {
        keep = summed + 1;
        break;
      }
    }
    if (sorted_n == c.n) break;
  }
  c.n = keep;
  c.weigh();  // idx was reordered: the weights follow it
}

// min-p: p_i >= min_p * p_max  <=>  w_i >= min_p (w_max = 1). Order kept.
void keep_min_p(Candidates& c, float min_p) {
  int32_t kept = 0;
  for (int32_t i = 0; i < c.n; ++i) {
    if (c.w[i] >= min_p) {
      c.idx[kept] = c.idx[i];
      c.w[kept++] = c.w[i];
    } else {
      c.sum -= c.w[i];
    }
  }
  c.n = kept;
}

// A draw from the candidates. A draft is accepted with probability
// w(draft) / sum; rejected, the draw is over the other candidates (the
// residual max(0, p - q) of a point-mass q, normalised).
int32_t draw(const Candidates& c, Rng& rng, int32_t draft) {
  double w_draft = 0.0;
  int32_t skip = -1;
  if (draft >= 0) {
    for (int32_t i = 0; i < c.n; ++i) {
      if (c.idx[i] == draft) {
        w_draft = c.w[i];
        skip = i;
        break;
      }
    }
  }
  if (skip >= 0 && (static_cast<double>(rng.uniform()) * c.sum < w_draft || c.sum - w_draft <= 0.0)) return draft;
  const double r = static_cast<double>(rng.uniform()) * (c.sum - w_draft);
  double cum = 0.0;
  for (int32_t i = 0; i < c.n; ++i) {
    if (i == skip) continue;
    cum += c.w[i];
    if (r < cum) return c.idx[i];
  }
  return c.idx[c.n - 1] != draft || c.n == 1 ? c.idx[c.n - 1] : c.idx[c.n - 2];
}

// NaN or +inf logits (a corrupt weight block, an overflow) have no
// distribution to sample: the request fails with this error (the engine's
// fault isolation ends it alone). -inf is a masked id and is fine.
void check_finite(std::span<const float> logits) {
  for (size_t i = 0; i < logits.size(); ++i) {
    if (std::isnan(logits[i]) || logits[i] == INFINITY) {
      fail(ErrorCode::kCorruptFile, "the model's logits are not finite (id {} is {}): a corrupt weight or an overflow", i,
           logits[i]);
    }
  }
}

}  // namespace

SampleResult Sampler::sample(std::span<float> logits, const SamplingParams& p, const TokenHistory& h,
                             Rng& rng, int32_t draft) {
  check_finite(logits);
  SampleResult out;
  // Logprobs describe the model's distribution, before any processing.
  float lse = 0.0f;
  if (p.logprobs || p.top_logprobs > 0) lse = log_sum_exp(logits);
  if (p.top_logprobs > 0) out.top = top_logprobs(logits, p.top_logprobs, lse, idx_);
  std::vector<float> raw;
  if (p.logprobs) raw.assign(logits.begin(), logits.end());

  apply_penalties(logits, p, h);
  if (p.greedy()) {
    out.token = argmax(logits);
  } else {
    // top-k, top-p (mass of the top-k set), min-p, in that order.
    Candidates c{.logits = logits, .idx = idx_, .w = probs_};
    start_candidates(c, p.top_k, p.temperature);
    if (p.top_p < 1.0f) keep_top_p(c, p.top_p);
    if (p.min_p > 0.0f) keep_min_p(c, p.min_p);
    out.token = draw(c, rng, draft);
  }
  if (p.logprobs) out.logprob = raw[out.token] - lse;
  return out;
}

}  // namespace tessera::engine
