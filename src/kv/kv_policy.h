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
//   h2o        H2O's heavy hitters: the `recent` most recent tokens, and of
//              the older ones those that have received the most attention
//              (softmax mass summed over every query, head and layer so far,
//              accumulated by the attention kernels in the same pass)
//   spatten    SpAtten's cascade: scored like h2o, and once the cache is
//              full each layer l sees at most layer_cap(l) keys (the budget
//              at layer 0 down to half of it at the top): a key hidden from
//              layer l is hidden from every layer above it for good, and
//              keys seen by fewest layers leave the cache first
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

enum class KvPolicyKind { kDense, kWindow, kRecompute, kSink, kH2O, kSpAtten };

struct KvPolicy {
  KvPolicyKind kind = KvPolicyKind::kDense;
  int64_t budget = 0;  // most keys any query attends to, its own included
  int32_t sinks = 4;   // kSink: tokens kept from the start
  // Tokens evicted at once, rounded up to: kept keys move (and are rotated)
  // once per `granularity` tokens. 0: the block size (each rotation is then
  // amortised over a block's tokens; the cache holds budget - block_size + 1
  // to budget keys). 1: exactly `budget` keys once full.
  int32_t granularity = 0;
  // kH2O / kSpAtten: the most recent tokens, always kept and seen by every
  // layer. -1: budget / 2 for H2O (the paper's even split between heavy
  // hitters and recent tokens), budget / 4 for SpAtten.
  int32_t recent = -1;

  bool bounded() const { return kind != KvPolicyKind::kDense; }
  // Whether its tables keep attention mass per key (BlockTable::key_score).
  bool scored() const { return kind == KvPolicyKind::kH2O || kind == KvPolicyKind::kSpAtten; }
};

const char* kv_policy_name(KvPolicyKind kind);
std::optional<KvPolicyKind> parse_kv_policy(std::string_view name);
// "" if the policy can run with steps of up to one token, else why not.
std::string check_kv_policy(const KvPolicy& p);

// The table slots (indices into t's slots) to evict so that n_new tokens
// appended after them each attend to at most p.budget keys: none while
// t.num_keys() + n_new <= budget; else the oldest tokens (after the sinks),
// the count rounded up to p.granularity; kRecompute: every token; kH2O and
// kSpAtten: of the tokens before the recent ones, those seen by the fewest
// layers, then with the least attention mass (the oldest on ties). n_new
// must be at most max_step_tokens(p).
std::vector<int64_t> plan_evictions(const KvPolicy& p, const BlockTable& t, int64_t n_new, int32_t block_size);

// The most tokens one step may append to a sequence under p (a query must
// find room for itself beside the kept sinks).
int64_t max_step_tokens(const KvPolicy& p);

// The BlockTable::score_depth of a scored table of a model with n_layer
// layers (at most 255: depths are bytes).
uint8_t score_depth(int64_t n_layer);

// kH2O / kSpAtten: the recent tokens p keeps (its `recent`, or the default).
int64_t recent_tokens(const KvPolicy& p);

// kSpAtten: the most keys layer il of n_layer sees once the cache is full:
// the budget at layer 0, down linearly to half of it at the top layer.
int64_t layer_cap(const KvPolicy& p, int64_t il, int64_t n_layer);

// kSpAtten's cascade, before n_new tokens are appended to the scored table
// t: once the sequence has outgrown the budget, for each layer l >= 1 in
// turn, the keys beyond layer_cap(l) that layer would see (counting the new
// tokens) are hidden from layers [l, top], lowest key_score first, never a
// recent one (key_depth[j] = l). No KV data changes.
void plan_cascade(const KvPolicy& p, BlockTable& t, int64_t n_new);

}  // namespace tessera::kv
