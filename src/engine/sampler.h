// Turns one row of logits into a token: penalties, temperature, top-k,
// top-p, min-p, then a draw from a per-request random stream. Deterministic:
// the same logits, parameters and RNG state give the same token everywhere.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/rng.h"
#include "engine/sampling_params.h"

namespace tessera::engine {

using tessera::Rng;  // core/rng.h

struct TokenLogprob {
  int32_t token = -1;
  float logprob = 0.0f;
};

struct SampleResult {
  int32_t token = -1;
  float logprob = 0.0f;              // of the chosen token under the model (raw logits)
  std::vector<TokenLogprob> top;     // top alternatives when asked
};

// Counts of tokens seen, for the penalties.
struct TokenHistory {
  std::unordered_map<int32_t, int32_t> prompt;  // token -> count in prompt
  std::unordered_map<int32_t, int32_t> output;  // token -> count in output so far
  void add_output(int32_t t) { ++output[t]; }
};

class Sampler {
 public:
  // `logits` is modified (penalties, temperature). `scratch` is reused.
  //
  // With a `draft` token (>= 0), the row verifies a speculative proposal
  // from a drafter that proposed it with certainty (q = a point mass, as
  // n-gram and suffix lookup do): greedy returns the argmax as always; a
  // sampled row accepts the draft with probability p(draft) and otherwise
  // draws from p with the draft's mass removed, renormalised (Leviathan et
  // al. 2023, rejection sampling with q(draft) = 1). Either way the token
  // follows p exactly; it equals `draft` exactly when the draft is accepted.
  SampleResult sample(std::span<float> logits, const SamplingParams& p, const TokenHistory& history,
                      Rng& rng, int32_t draft = -1);

 private:
  std::vector<int32_t> idx_;
  std::vector<float> probs_;
};

// log softmax of one row, for logprobs; returns the log normaliser.
float log_sum_exp(std::span<const float> logits);

}  // namespace tessera::engine
