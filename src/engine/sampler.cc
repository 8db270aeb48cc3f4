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

SampleResult Sampler::sample(std::span<float> logits, const SamplingParams& p, const TokenHistory& h,
                             Rng& rng, int32_t draft) {
  const int32_t V = static_cast<int32_t>(logits.size());
  SampleResult out;
  // Logprobs describe the model's distribution, before any processing.
  float lse = 0.0f;
  if (p.logprobs || p.top_logprobs > 0) {
    lse = log_sum_exp(logits);
    if (p.top_logprobs > 0) {
      idx_.resize(V);
      std::iota(idx_.begin(), idx_.end(), 0);
      const int32_t k = std::min(p.top_logprobs, V);
      std::partial_sort(idx_.begin(), idx_.begin() + k, idx_.end(), [&](int32_t a, int32_t b) {
        return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
      });
      for (int32_t i = 0; i < k; ++i) out.top.push_back({idx_[i], logits[idx_[i]] - lse});
    }
  }
  // The chosen token's logprob is read from the logits before processing.
  std::vector<float> raw;
  if (p.logprobs) raw.assign(logits.begin(), logits.end());

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

  if (p.greedy()) {
    int32_t best = 0;
    for (int32_t i = 1; i < V; ++i) {
      if (logits[i] > logits[best]) best = i;
    }
    out.token = best;
  } else {
    // Candidates, then weights exp((logit - max) / T); top-k, top-p (mass of
    // the top-k set), min-p, in that order. Only what a filter needs is
    // sorted: top-k sorts its k, top-p a growing prefix until it holds the
    // mass, min-p is a threshold; plain temperature sampling
    // sorts nothing (a full sort of a 32000-token vocabulary per sampled
    // token cost more than the decode step of a small model's batch).
    auto by_logit = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
    idx_.resize(V);
    std::iota(idx_.begin(), idx_.end(), 0);
    int32_t n = V;
    bool sorted = false;
    if (p.top_k > 0 && p.top_k < V) {
      n = p.top_k;
      std::partial_sort(idx_.begin(), idx_.begin() + n, idx_.end(), by_logit);
      sorted = true;
    }
    float mx = logits[idx_[0]];
    for (int32_t i = 1; i < n && !sorted; ++i) mx = std::max(mx, logits[idx_[i]]);
    const float inv_t = 1.0f / p.temperature;
    auto weights = [&](int32_t count, double* sum) {
      probs_.resize(count);
      *sum = 0.0;
      for (int32_t i = 0; i < count; ++i) {
        probs_[i] = std::exp((logits[idx_[i]] - mx) * inv_t);
        *sum += probs_[i];
      }
    };
    double sum = 0.0;
    weights(n, &sum);
    if (p.top_p < 1.0f) {
      // The smallest prefix of the sorted candidates whose mass reaches
      // top_p. Each widening keeps the prefix already summed (the order is
      // total: ties go by id), so every weight is added once.
      const double target = static_cast<double>(p.top_p) * sum;
      int32_t sorted_n = sorted ? n : 0, summed = 0, keep = n;
      double cum = 0.0;
      for (int32_t want = 64; keep == n; want *= 4) {
        if (sorted_n < n) {
          sorted_n = std::min(want, n);
          std::partial_sort(idx_.begin(), idx_.begin() + sorted_n, idx_.begin() + n, by_logit);
        }
        for (; summed < sorted_n; ++summed) {
          cum += std::exp((logits[idx_[summed]] - mx) * inv_t);
          if (cum >= target) {
            keep = summed + 1;
            break;
          }
        }
        if (sorted_n == n) break;
      }
      n = keep;
      weights(n, &sum);  // idx_ was reordered: the weights follow it
    }
    // min-p: p_i >= min_p * p_max  <=>  w_i >= min_p (w_max = 1).
    if (p.min_p > 0.0f) {
      int32_t kept = 0;
      for (int32_t i = 0; i < n; ++i) {
        if (probs_[i] >= p.min_p) {
          idx_[kept] = idx_[i];
          probs_[kept++] = probs_[i];
        } else {
          sum -= probs_[i];
        }
      }
      n = kept;  // order kept: still sorted if it was
    }
    // A draft is accepted with probability w(draft) / sum; rejected, the
    // draw is over the other candidates (the residual max(0, p - q) of a
    // point-mass q, normalised).
    double w_draft = 0.0;
    int32_t skip = -1;
    if (draft >= 0) {
      for (int32_t i = 0; i < n; ++i) {
        if (idx_[i] == draft) {
          w_draft = probs_[i];
          skip = i;
          break;
        }
      }
    }
    if (skip >= 0 && (static_cast<double>(rng.uniform()) * sum < w_draft || sum - w_draft <= 0.0)) {
      out.token = draft;
    } else {
      const double r = static_cast<double>(rng.uniform()) * (sum - w_draft);
      double cum = 0.0;
      out.token = idx_[n - 1] != draft || n == 1 ? idx_[n - 1] : idx_[n - 2];
      for (int32_t i = 0; i < n; ++i) {
        if (i == skip) continue;
        cum += probs_[i];
        if (r < cum) {
          out.token = idx_[i];
          break;
        }
      }
    }
  }
  if (p.logprobs) out.logprob = raw[out.token] - lse;
  return out;
}

}  // namespace tessera::engine
