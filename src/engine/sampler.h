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
  SampleResult sample(std::span<float> logits, const SamplingParams& p, const TokenHistory& history,
                      Rng& rng);

 private:
  std::vector<int32_t> idx_;
  std::vector<float> probs_;
};

// log softmax of one row, for logprobs; returns the log normaliser.
float log_sum_exp(std::span<const float> logits);

}  // namespace tessera::engine
