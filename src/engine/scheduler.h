// The iteration-level scheduler. Knows requests and KV blocks, not tensors:
// tested with synthetic requests in milliseconds.
//
// One rule (after vLLM v1): each step spends a token budget
// (max_num_batched_tokens) and a sequence budget (max_num_seqs) on running
// requests first, in admission order, then on waiting ones in arrival order.
// A request is scheduled for min(num_tokens - num_computed_tokens, budget
// left) tokens, so a long prompt is computed in chunks over several steps
// (chunked prefill) in the same forward pass as other requests' decode
// tokens. When the pool cannot give a running request its next block, the
// most recently admitted running request is preempted: its blocks are freed
// and it goes back to the head of the waiting queue to be recomputed.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/request.h"
#include "kv/kv_manager.h"
#include "kv/kv_policy.h"
#include "kv/prefix_hash.h"
#include "kvstore/tiered_store.h"

namespace tessera::engine {

struct SchedulerConfig {
  int32_t max_num_seqs = 64;
  int32_t max_num_batched_tokens = 512;
  int64_t max_model_len = 2048;
  bool enable_prefix_caching = true;
  uint64_t cache_key = 0;  // identity of the model (and adapter) in block hashes
  // > 0: every layer attends to this many keys at most (a sliding window):
  // blocks wholly before a sequence's window are given back as it moves.
  int64_t sliding_window = 0;
  kv::BlockHashFn block_hash;  // empty: kv::block_hash (this process's keyed XXH3); tests inject collisions
  // A two-regime RoPE model (Phi-3's LongRoPE; Model::long_rope_after): a
  // request longer than long_rope_after tokens runs in the long regime (or
  // every request, when long_rope_by_context and max_model_len is longer).
  // A running request that grows past it is computed again from its first
  // token in the long regime, as transformers' generate does. The regime is
  // part of its blocks' prefix-cache identity. 0: one regime.
  int64_t long_rope_after = 0;
  bool long_rope_by_context = false;
  // The prefix cache's lower tiers (kvstore/tiered_store.h), or none. A
  // request whose blocks may be stored (Request::store_identity) starts a
  // prefetch of its blocks past its RAM hit when it is added; admission
  // passes it over while the prefetch runs (others go first), for at most
  // store_wait_s, then imports what was found. Full blocks are offered to
  // the store as they are registered (take_exports).
  kvstore::TieredStore* store = nullptr;
  double store_wait_s = 2.0;
  // Write-back: a block goes down when RAM evicts it (and the rest at
  // shutdown: take_unwritten) instead of as soon as it is full.
  bool store_write_back = false;
};

struct ScheduledRequest {
  Request* req = nullptr;
  // Tokens [num_computed, num_computed + num_new) computed this step; the
  // last num_draft of them are the request's draft (past num_tokens).
  int64_t num_new_tokens = 0;
  bool sample = false;         // the step reaches num_tokens: a new token is sampled
  int64_t num_draft = 0;       // draft tokens verified this step (only when sample)
  // Rows of logits this request gets: its last token's, and one per draft token.
  int64_t num_logit_rows() const { return sample ? 1 + num_draft : 0; }
};

// Preloaded K/V (Prompt Cache modules) to write into a request's slots for
// tokens [from, to) before the forward pass.
struct KvLoad {
  Request* req = nullptr;
  int64_t from = 0;
  int64_t to = 0;
};

// A block found in a lower tier, to write into `block` before the step
// (before the copies: an import never targets a block copied into).
struct BlockImport {
  kv::BlockId block = kv::kNullBlock;
  std::shared_ptr<const kvstore::StoredBlock> data;
};

// A full block just registered, for the engine to copy out to the store.
struct BlockExport {
  kv::BlockId block = kv::kNullBlock;
  kvstore::BlockRef ref;
};

struct SchedulerOutput {
  // Write-back: blocks this step's allocations evicted from RAM, to copy
  // out before anything (imports, copies, the forward pass) overwrites them.
  std::vector<BlockExport> evicted;
  std::vector<BlockImport> imports;  // then these, before the copies
  std::vector<ScheduledRequest> scheduled;
  std::vector<kv::CopyOp> copies;  // copy-on-write, before the forward pass
  // Kept keys of bounded-policy requests that moved (their evictions this
  // step): rotated after the copies, before the step's tokens.
  std::vector<kv::KeyShift> key_shifts;
  std::vector<KvLoad> loads;       // after the copies, before the forward pass
  int64_t num_tokens = 0;
  bool empty() const { return scheduled.empty(); }
};

struct SchedulerStats {
  int64_t preemptions = 0;
  int64_t prefix_query_tokens = 0;  // prompt tokens looked up in the prefix cache
  int64_t prefix_hit_tokens = 0;    // of which found
  int64_t long_rope_restarts = 0;   // requests computed again in the long RoPE regime
  int64_t store_hit_tokens = 0;     // prompt tokens loaded from the lower tiers (part of prefix_hit_tokens)
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& config, kv::KvManager& kv);

  const SchedulerConfig& config() const { return config_; }

  // "" if the request can ever run (prompt + max_tokens within the context,
  // which is the model's capped to what the whole pool holds), else why not.
  // A bounded policy (kv/kv_policy.h) is capped by neither: its cache holds
  // at most its budget, which must fit the model's context and the pool.
  std::string check_admissible(int64_t num_prompt_tokens, int64_t max_tokens, const kv::KvPolicy& policy = {}) const;
  // config().max_model_len is min(the configured length, this).
  int64_t cache_capacity_tokens() const;

  // Takes ownership; the request waits until schedule() admits it.
  Request* add(std::unique_ptr<Request> req);
  // A request created running (a fork of `after`), placed right after it.
  Request* add_running_after(std::unique_ptr<Request> req, const Request* after);

  SchedulerOutput schedule();

  // After the forward pass: marks the scheduled tokens computed (not the
  // drafts: see on_draft_verified) and registers newly full blocks in the
  // prefix cache.
  void on_step_computed(const SchedulerOutput& out);

  // After a draft was verified and its first `num_accepted` tokens appended
  // to the request: their K/V (computed by the step) is kept, the slots of
  // the rejected ones are given back (whole blocks past the kept tokens are
  // freed), and newly full blocks are registered. Rejected tokens are never
  // registered: registration only covers computed tokens of the request.
  void on_draft_verified(Request* req, int64_t num_accepted);

  // Finishes a request (any state): frees its blocks, keeps it until
  // release() so its final output can be read.
  void finish(Request* req, FinishReason reason);
  // Forgets a finished request.
  void release(RequestId id);

  Request* find(RequestId id);
  size_t num_running() const { return running_.size(); }
  size_t num_waiting() const { return waiting_.size(); }
  // Tokens the waiting requests still have to compute.
  int64_t num_waiting_tokens() const;
  bool has_unfinished() const { return !running_.empty() || !waiting_.empty(); }
  const std::vector<Request*>& running() const { return running_; }
  std::vector<Request*> waiting() const { return {waiting_.begin(), waiting_.end()}; }
  const SchedulerStats& stats() const { return stats_; }
  // Blocks registered since the last call that the store does not hold yet
  // (engine thread: copy them out before the next schedule()).
  std::vector<BlockExport> take_exports() { return std::move(exports_); }
  // Write-back: every registered block not written yet (shutdown).
  std::vector<BlockExport> take_unwritten();
  kv::KvManager& kv() { return kv_; }

 private:
  void preempt(Request* req);
  // The RoPE regime req runs in once its cache is empty (Request::long_rope).
  bool long_regime(const Request& req) const;
  // A running request whose text grew past SchedulerConfig::long_rope_after
  // while its cache holds the short regime: the cache is emptied and the
  // request computed again (its long-regime prefix, if cached, taken).
  void enter_long_regime(Request* req);
  // The seed of req's block hashes (model, adapter, regime).
  uint64_t hash_seed(const Request& req) const;
  // Bounded policies: the most tokens req may compute this step, and the
  // evictions that make room for n of them (copies and key shifts into out).
  // False if the pool is short of blocks for the copies (nothing changed).
  int64_t step_cap(const Request& req) const;
  bool evict_for_step(Request* req, int64_t n, SchedulerOutput& out);
  // The recompute policy: when the request's next token to compute is its
  // last (a decode step, or a prompt yet to start) and its text is longer
  // than the budget, drop its cache and restart at the last `budget` tokens
  // (computed again at positions from 0).
  void restart_window(Request* req);
  // Prefix-cache lookup for a request about to be admitted with nothing
  // computed: takes the cached blocks of its longest cached prefix.
  void take_cached_prefix(Request* req, bool count = true);
  void register_full_blocks(Request* req);
  // The global prompt cache (SchedulerConfig::store).
  bool stores(const Request& req) const;
  kvstore::StoreKey store_identity(const Request& req) const;
  void extend_store_keys(Request* req, int64_t num_blocks);
  void start_prefetch(Request* req);
  // False while req's prefetch is loading (and it may still wait).
  bool store_ready(Request* req);
  // Writes the blocks req's prefetch found past its RAM prefix into new
  // blocks of its table (imports in out), registered like computed ones.
  void import_stored(Request* req, SchedulerOutput& out);
  // Gives back the blocks that left req's sliding window.
  void drop_out_of_window(Request* req);
  // What the pool compares for full block b of req (its blocks before b are
  // in req's block table).
  kv::BlockKey block_key(const Request& req, int64_t b) const;

  SchedulerConfig config_;
  int64_t model_len_ = 0;  // the configured max_model_len, before the cache's cap
  kv::KvManager& kv_;
  std::unordered_map<RequestId, std::unique_ptr<Request>> requests_;
  std::vector<Request*> running_;  // admission order
  std::deque<Request*> waiting_;   // arrival order (preempted ones at the head)
  SchedulerStats stats_;
  std::vector<BlockExport> exports_;
  // Write-back: registered blocks the store does not hold yet, by block,
  // with the pool's hash of the contents registered: a block is copied out
  // only while the pool still records those contents (a block whose
  // contents were dropped another way — a restart, a bounded policy
  // rewriting it — holds other K/V by then).
  struct Unwritten {
    kvstore::BlockRef ref;
    uint64_t pool_hash = 0;
  };
  std::unordered_map<kv::BlockId, Unwritten> unwritten_;
};

}  // namespace tessera::engine
