// Bounded KV caches for endless streams (docs/KV_POLICIES.md): which
// tokens leave a sequence's cache before new ones are appended. Pure token
// and slot bookkeeping over a BlockTable; the eviction itself is
// KvManager::evict().
//
//   dense      keep everything (the default; the table is never mapped)
//   window     the last `budget` tokens
//   sink       the first `sinks` tokens (StreamingLLM's attention sinks) and
//              the last budget - sinks
//   recompute  every token is computed over the last `budget` tokens from
//              scratch: the cache is emptied and those tokens computed
//              again (the quality baseline; O(budget) work per token)
//
// Positions are places in the cache (a kept key's position is its rank),
// so a model never sees a distance above its budget however long the text.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kv/kv_manager.h"

namespace tessera::kv {

enum class KvPolicyKind { kDense, kWindow, kRecompute, kSink };

struct KvPolicy {
  KvPolicyKind kind = KvPolicyKind::kDense;
  int64_t budget = 0;  // most keys any query attends to, its own included
  int32_t sinks = 4;   // kSink: tokens kept from the start
  // Tokens evicted at once, rounded up to: kept keys move (and are rotated)
  // once per `granularity` tokens. 0: the block size (each rotation is then
  // amortised over a block's tokens; the cache holds budget - block_size + 1
  // to budget keys). 1: exactly `budget` keys once full.
  int32_t granularity = 0;

  bool bounded() const { return kind != KvPolicyKind::kDense; }
};

const char* kv_policy_name(KvPolicyKind kind);
std::optional<KvPolicyKind> parse_kv_policy(std::string_view name);
// "" if the policy can run with steps of up to one token, else why not.
std::string check_kv_policy(const KvPolicy& p);

// The table slots (indices into t's slots) to evict so that n_new tokens
// appended after them each attend to at most p.budget keys: none while
// t.num_keys() + n_new <= budget; else the oldest tokens (after the sinks),
// the count rounded up to p.granularity; kRecompute: every token. n_new must
// be at most max_step_tokens(p).
std::vector<int64_t> plan_evictions(const KvPolicy& p, const BlockTable& t, int64_t n_new, int32_t block_size);

// The most tokens one step may append to a sequence under p (a query must
// find room for itself beside the kept sinks).
int64_t max_step_tokens(const KvPolicy& p);

}  // namespace tessera::kv
