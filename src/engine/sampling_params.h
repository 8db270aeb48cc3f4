// Everything that decides how one request turns logits into tokens and when
// it stops. One struct, shared by the CLI, the batch mode and the server.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "grammar/constraint.h"
#include "kv/kv_policy.h"

namespace tessera::engine {

struct SamplingParams {
  // Decoding. temperature 0 means greedy.
  float temperature = 1.0f;
  int32_t top_k = 0;        // 0: off
  float top_p = 1.0f;       // 1: off
  float min_p = 0.0f;       // 0: off; keep tokens with p >= min_p * p_max
  // Penalties. repetition: HF/llama.cpp style over prompt and output;
  // presence/frequency: OpenAI style over output tokens so far.
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  std::optional<uint64_t> seed;  // unset: drawn from the engine's seed source

  // Stopping.
  int32_t max_tokens = 16;
  bool ignore_eos = false;
  std::vector<std::string> stop;         // stop strings (not emitted)
  std::vector<int32_t> stop_token_ids;   // extra end tokens

  // Outputs.
  int32_t n = 1;               // parallel samples sharing the prompt
  bool logprobs = false;       // logprob of each chosen token
  int32_t top_logprobs = 0;    // and of the top alternatives

  // Speculative decoding, when the engine has a drafter: whether this
  // request may use it, and its longest draft (0: the engine's). Outputs
  // are the same either way; only speed differs.
  bool speculative = true;
  int32_t speculative_k = 0;
  std::string speculative_method;  // empty: the engine's; else must name it ("none": off)

  // A bounded KV cache for this request (kv/kv_policy.h, docs/KV_POLICIES.md):
  // dense (default), window or sink; the scheduler evicts before each step.
  // A bounded request is not capped by the cache size (it holds at most its
  // budget), never speculates, and is not preempted (docs/KV_POLICIES.md).
  kv::KvPolicy kv_policy{};

  // Structured output (grammar/, docs/STRUCTURED_OUTPUT.md): every output
  // is a sentence of this grammar (a JSON Schema's, a GBNF grammar's, a
  // regex's). Tokens it does not allow are masked before sampling, and
  // end-of-generation is allowed exactly when the text is complete. Needs a
  // tokenizer.
  std::shared_ptr<const grammar::Constraint> constraint;

  bool greedy() const { return temperature <= 0.0f; }
};

// Returns an empty string if `p` is valid, else what is wrong (for a 400).
std::string validate(const SamplingParams& p, int64_t n_vocab);

}  // namespace tessera::engine
