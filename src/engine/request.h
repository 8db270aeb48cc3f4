// A request's state as the engine sees it. vLLM v1's rule: there is no
// prefill or decode phase; a request has num_tokens (prompt + output so far)
// and num_computed_tokens (those whose KV is in the cache), and each step
// computes some of the difference.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "engine/sampling_params.h"
#include "kv/kv_manager.h"
#include "kvstore/block_record.h"
#include "model/kv_cache.h"
#include "adapters/lora.h"
#include "adapters/soft_prompt.h"
#include "spec/policy.h"

namespace tessera {
class StreamingDecoder;
namespace grammar {
class Matcher;
}
}

namespace tessera::engine {

using RequestId = uint64_t;
using Clock = std::chrono::steady_clock;

enum class RequestStatus { kWaiting, kRunning, kFinished };

// OpenAI's finish_reason vocabulary, plus the engine's own.
enum class FinishReason { kNone, kStop, kLength, kAbort, kError };
const char* finish_reason_name(FinishReason r);  // "stop", "length", "abort", "error"

// What a request runs with besides the base weights: a LoRA adapter
// (adapters/lora.h) and a soft prompt (adapters/soft_prompt.h), each optional.
struct RequestAdapters {
  std::shared_ptr<const LoraAdapter> lora;
  std::shared_ptr<const SoftPrompt> soft_prompt;

  RequestAdapters() = default;
  RequestAdapters(std::shared_ptr<const LoraAdapter> l) : lora(std::move(l)) {}  // NOLINT: implicit on purpose
  RequestAdapters(std::shared_ptr<const LoraAdapter> l, std::shared_ptr<const SoftPrompt> s)
      : lora(std::move(l)), soft_prompt(std::move(s)) {}
};

struct Request {
  RequestId id = 0;
  int32_t index = 0;            // which of the n samples of its prompt (0..n-1)
  RequestId group = 0;          // id of the first sample; shared by all n
  std::vector<int32_t> tokens;  // prompt followed by output
  int64_t num_prompt_tokens = 0;
  int64_t num_computed_tokens = 0;
  SamplingParams params;
  RequestStatus status = RequestStatus::kWaiting;
  FinishReason finish = FinishReason::kNone;
  std::string error;            // for kError

  // RoPE position of each token; empty means position == index. Prompt
  // Cache requests place imported modules at their schema positions.
  std::vector<int32_t> positions;
  // K/V of the first preloaded->n_tokens tokens, written into the cache at
  // admission instead of being computed (Prompt Cache modules).
  std::shared_ptr<const DenseKv> preloaded;
  // Mixed into block hashes: blocks whose contents depend on more than the
  // tokens (modules computed apart) only match requests built the same way.
  uint64_t cache_salt = 0;
  // The LoRA adapter its tokens run with (adapters/lora.h), or none. Part of
  // cache_salt: two adapters never share KV.
  std::shared_ptr<const LoraAdapter> lora;
  // Its soft prompt, or none: its first soft_prompt->n_virtual tokens are
  // placeholders whose input embeddings are the soft prompt's rows. Part
  // of cache_salt too.
  std::shared_ptr<const SoftPrompt> soft_prompt;
  int64_t num_virtual_tokens() const { return soft_prompt ? soft_prompt->n_virtual : 0; }

  kv::BlockTable blocks;
  int64_t num_cached_tokens = 0;  // prompt tokens served from the prefix cache
  int32_t num_preemptions = 0;
  // The RoPE regime its cache holds (SchedulerConfig::long_rope_after).
  bool long_rope = false;
  // Block hashes of this request's full blocks so far (prefix caching), and
  // how many of its blocks are registered in the cache under them.
  std::vector<uint64_t> block_hashes;
  int64_t num_registered_blocks = 0;
  // The global prompt cache (kvstore/): the identity its blocks are stored
  // under (model fingerprint, adapter, soft prompt), empty when its blocks
  // are not stored (Prompt Cache layouts, bounded policies); the store keys
  // of its full blocks so far; a prefetch in flight (its ticket, its first
  // block, since when), and the blocks it loaded, until admission.
  kvstore::StoreKey store_identity;
  std::vector<kvstore::StoreKey> store_keys;
  uint64_t store_ticket = 0;
  int64_t store_first_block = 0;
  std::chrono::steady_clock::time_point store_since{};
  std::vector<std::shared_ptr<const kvstore::StoredBlock>> stored_blocks;

  // Speculative decoding: tokens a drafter proposed to follow `tokens`,
  // scheduled with the next decode step to be verified. They are not tokens
  // of the request (nothing derived from tokens, nor the prefix cache, ever
  // sees them); the engine appends those the target accepts. The scheduler
  // trims the list to what fits the step.
  std::vector<int32_t> draft;
  spec::Acceptance acceptance_stats;  // of its drafts so far (spec/policy.h)

  uint64_t seed = 0;  // the request's seed (sample i draws from stream i of it)
  Rng rng;
  TokenHistory history;
  std::vector<TokenLogprob> pending_top;  // top logprobs of the latest token
  // Its place in params.constraint's grammar (made at its first sample).
  std::unique_ptr<grammar::Matcher> matcher;

  // Output text state: decoded so far, and the tail withheld because it
  // could be the start of a stop string.
  std::unique_ptr<StreamingDecoder> decoder;
  std::string held_text;

  Clock::time_point arrival;
  std::optional<Clock::time_point> first_token_time;
  Clock::time_point last_token_time;

  int64_t num_tokens() const { return static_cast<int64_t>(tokens.size()); }
  // Also for draft tokens past the end (index >= num_tokens()).
  int32_t position(int64_t index) const {
    if (positions.empty()) return static_cast<int32_t>(index);
    const int64_t n = static_cast<int64_t>(positions.size());
    return index < n ? positions[static_cast<size_t>(index)] : positions.back() + static_cast<int32_t>(index - n + 1);
  }
  // Token `index` of the request, or of its draft past the end.
  int32_t token_or_draft(int64_t index) const {
    const int64_t n = num_tokens();
    return index < n ? tokens[static_cast<size_t>(index)] : draft[static_cast<size_t>(index - n)];
  }
  int64_t num_output_tokens() const { return num_tokens() - num_prompt_tokens; }
  bool finished() const { return status == RequestStatus::kFinished; }

  Request();
  ~Request();
  Request(Request&&) noexcept;
  Request& operator=(Request&&) noexcept;
};

// What one step produced for one request.
struct RequestOutput {
  RequestId id = 0;
  RequestId group = 0;
  int32_t index = 0;
  std::vector<int32_t> new_tokens;
  std::string text;  // detokenized delta (stop-string text withheld)
  std::vector<float> logprobs;                   // per new token, when asked
  std::vector<std::vector<TokenLogprob>> top_logprobs;
  bool finished = false;
  // The last output of the whole group (every one of the n samples, also
  // when the group ends before its samples were forked: rejected, aborted).
  // The one event that says a group's resources are all given back.
  bool group_finished = false;
  FinishReason finish_reason = FinishReason::kNone;
  std::string error;
  int64_t num_prompt_tokens = 0;
  int64_t num_output_tokens = 0;
  int64_t num_cached_tokens = 0;
  // Seconds since arrival, for metrics and the batch mode's timings.
  double time_to_first_token = 0.0;
  double elapsed = 0.0;
};

}  // namespace tessera::engine
