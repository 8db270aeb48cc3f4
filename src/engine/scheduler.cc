#include "engine/scheduler.h"

#include <algorithm>

#include "core/error.h"
#include "kv/prefix_hash.h"

namespace tessera::engine {

std::vector<BlockExport> Scheduler::take_unwritten() {
  std::vector<BlockExport> out;
  for (auto& [block, u] : unwritten_) {
    if (kv_.pool().hash_of(block) == u.pool_hash) out.push_back({block, std::move(u.ref)});
  }
  unwritten_.clear();
  return out;
}

Scheduler::Scheduler(const SchedulerConfig& config, kv::KvManager& kv) : config_(config), kv_(kv) {
  TESSERA_CHECK(config.max_num_seqs >= 1, kInvalidArgument, "max_num_seqs must be >= 1");
  TESSERA_CHECK(config.max_num_batched_tokens >= 1, kInvalidArgument, "max_num_batched_tokens must be >= 1");
  // A sequence can never hold more tokens than the whole cache: that is its
  // context here. Admission then only asks that a request fit its context;
  // blocks are taken as tokens are computed, never reserved up front, and a
  // request alone in the pool can always grow to its end (others are
  // preempted for it), so nothing admitted can stall.
  model_len_ = config.max_model_len;
  if (config.store != nullptr && config.store_write_back) kv_.pool().track_evictions(true);
  config_.max_model_len = std::min(config.max_model_len, cache_capacity_tokens());
  // With a sliding window a sequence holds at most its window, a block of
  // margin, the partial block and one step's tokens, whatever its length:
  // when the pool holds that, any length up to the model's fits.
  const int64_t bs = kv_.block_size();
  if (config.sliding_window > 0 && config.sliding_window + 3 * bs + config.max_num_batched_tokens <= cache_capacity_tokens()) {
    config_.max_model_len = config.max_model_len;
  }
}

int64_t Scheduler::cache_capacity_tokens() const {
  return static_cast<int64_t>(kv_.pool().num_blocks() - 1) * kv_.block_size();
}

std::string Scheduler::check_admissible(int64_t num_prompt_tokens, int64_t max_tokens, const kv::KvPolicy& policy) const {
  if (num_prompt_tokens <= 0) return "the prompt is empty";
  if (policy.bounded()) {
    // Its keys' positions stay below the budget, and it holds at most the
    // budget, a partly filled block, empty slots and one step's tokens.
    if (policy.budget > model_len_) {
      return fmt::format("kv_policy budget {} exceeds this model's maximum context length of {}", policy.budget, model_len_);
    }
    const int64_t bs = kv_.block_size();
    const int64_t need = policy.budget + 2 * bs + std::min<int64_t>(config_.max_num_batched_tokens, kv::max_step_tokens(policy));
    if (need > cache_capacity_tokens()) {
      return fmt::format("kv_policy budget {} needs {} cache tokens but this server's KV cache holds {} (give it more "
                         "--kv-memory)", policy.budget, need, cache_capacity_tokens());
    }
    return "";
  }
  const int64_t len = config_.max_model_len;
  const std::string limit =
      len < model_len_ ? fmt::format("this server's KV cache holds at most {} tokens per sequence (the model's "
                                     "context is {}; give it more --kv-memory)",
                                     len, model_len_)
                       : fmt::format("this model's maximum context length is {} tokens", len);
  if (num_prompt_tokens >= len) return fmt::format("the prompt has {} tokens but {}", num_prompt_tokens, limit);
  if (num_prompt_tokens + max_tokens > len) {
    return fmt::format("{}; the request needs {} ({} in the prompt, {} for the completion)", limit,
                       num_prompt_tokens + max_tokens, num_prompt_tokens, max_tokens);
  }
  return "";
}

Request* Scheduler::add(std::unique_ptr<Request> req) {
  Request* r = req.get();
  r->status = RequestStatus::kWaiting;
  requests_.emplace(r->id, std::move(req));
  waiting_.push_back(r);
  if (stores(*r)) start_prefetch(r);
  return r;
}

Request* Scheduler::add_running_after(std::unique_ptr<Request> req, const Request* after) {
  Request* r = req.get();
  r->status = RequestStatus::kRunning;
  requests_.emplace(r->id, std::move(req));
  auto it = std::find(running_.begin(), running_.end(), after);
  running_.insert(it == running_.end() ? it : it + 1, r);
  return r;
}

void Scheduler::take_cached_prefix(Request* r, bool count) {
  const int32_t bs = kv_.block_size();
  kv::extend_block_hashes(r->block_hashes, r->tokens, bs, hash_seed(*r), config_.block_hash);
  // A bounded request takes no more than its budget: up to there its cache
  // is dense, the same whoever computed it; past it, it would have evicted.
  const kv::KvPolicy& policy = r->params.kv_policy;
  const size_t most = policy.bounded() ? static_cast<size_t>(policy.budget / bs) : r->block_hashes.size();
  for (size_t b = 0; b < std::min(most, r->block_hashes.size()); ++b) {
    auto id = kv_.pool().lookup_and_retain(block_key(*r, static_cast<int64_t>(b)));
    if (!id) break;
    r->blocks.blocks.push_back(*id);
  }
  // The last token is always computed so that its logits exist: if the
  // whole sequence is cached, recompute its last block into a fresh one.
  if (!r->blocks.blocks.empty() && static_cast<int64_t>(r->blocks.blocks.size()) * bs >= r->num_tokens()) {
    kv_.pool().release(r->blocks.blocks.back());
    r->blocks.blocks.pop_back();
  }
  const int64_t cached = static_cast<int64_t>(r->blocks.blocks.size()) * bs;
  r->blocks.num_tokens = cached;
  r->num_computed_tokens = cached;
  r->num_registered_blocks = static_cast<int64_t>(r->blocks.blocks.size());
  if (count && r->num_preemptions == 0) {
    r->num_cached_tokens = cached;
    stats_.prefix_query_tokens += r->num_prompt_tokens;
    stats_.prefix_hit_tokens += cached;
  }
}

SchedulerOutput Scheduler::schedule() {
  SchedulerOutput out;
  int64_t budget = config_.max_num_batched_tokens;
  bool preempted = false;

  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Request* r = running_[i];
    restart_window(r);
    enter_long_regime(r);
    const int64_t pending = r->num_tokens() - r->num_computed_tokens;
    // A draft rides on a decode step (its last token pending), as far as
    // the budget allows, and never across a change of RoPE regime.
    if (pending != 1 || r->params.kv_policy.bounded() ||
        (config_.long_rope_after > 0 && !r->long_rope &&
         r->num_tokens() + static_cast<int64_t>(r->draft.size()) > config_.long_rope_after)) {
      r->draft.clear();
    }
    int64_t n = std::min({pending + static_cast<int64_t>(r->draft.size()), budget, step_cap(*r)});
    if (n <= 0) {
      ++i;
      continue;
    }
    bool ok = false;
    const size_t shifts_before = out.key_shifts.size();
    for (;;) {
      ok = evict_for_step(r, n, out) && kv_.reserve(r->blocks, r->num_computed_tokens + n, out.copies);
      if (ok) break;
      if (n > pending) {
        n = pending;  // short of blocks: drop the draft before anyone is preempted
        continue;
      }
      // The newest running request gives its blocks back. Requests before
      // index i are already scheduled this step, and the newest is always at
      // index >= i, so a scheduled request is never preempted.
      Request* victim = running_.back();
      preempt(victim);
      preempted = true;
      if (victim == r) {
        out.key_shifts.resize(shifts_before);  // its blocks are gone: nothing of it to rotate
        break;
      }
    }
    if (!ok) break;
    const int64_t num_draft = std::max<int64_t>(n - pending, 0);
    r->draft.resize(static_cast<size_t>(num_draft));
    out.scheduled.push_back({r, n, r->num_computed_tokens + n >= r->num_tokens(), num_draft});
    out.num_tokens += n;
    budget -= n;
    ++i;
  }

  // New requests only when nobody had to give way this step: otherwise
  // they would take the blocks the preempted request needs to come back.
  for (size_t w = 0; !preempted && w < waiting_.size() && budget > 0;) {
    Request* r = waiting_[w];
    if (r->store_ticket != 0 && !store_ready(r)) {
      ++w;  // its blocks are on their way from a lower tier: the others go first
      continue;
    }
    r->draft.clear();  // admission computes the prompt (or recomputes after preemption)
    const bool forks_later = r->params.n > 1 && r->index == 0 && r->num_output_tokens() == 0;
    const int64_t seats = forks_later ? r->params.n : 1;
    if (static_cast<int64_t>(running_.size()) + seats > config_.max_num_seqs) break;
    restart_window(r);
    if (r->num_computed_tokens == 0 && r->blocks.blocks.empty() && long_regime(*r) != r->long_rope) {
      r->long_rope = !r->long_rope;  // (re)admitted past the original context
      r->block_hashes.clear();       // seeded with the regime
      r->store_keys.clear();
    }
    if (config_.enable_prefix_caching && r->blocks.blocks.empty() && !r->blocks.mapped()) {
      take_cached_prefix(r);
      import_stored(r, out);
    }
    // Preloaded K/V past the cached prefix is written, not computed: it
    // takes blocks but no token budget.
    const int64_t loaded = r->preloaded ? std::max(r->num_computed_tokens, r->preloaded->n_tokens) : r->num_computed_tokens;
    const int64_t n = std::min({r->num_tokens() - loaded, budget, step_cap(*r)});
    const size_t shifts_before = out.key_shifts.size();
    if (!evict_for_step(r, n, out) || !kv_.reserve(r->blocks, loaded + n, out.copies)) {
      out.key_shifts.resize(shifts_before);
      kv_.free(r->blocks);  // give back any cached prefix it took
      r->num_computed_tokens = 0;
      r->num_registered_blocks = 0;
      break;
    }
    if (loaded > r->num_computed_tokens) {
      out.loads.push_back({r, r->num_computed_tokens, loaded});
      r->num_computed_tokens = loaded;
    }
    waiting_.erase(waiting_.begin() + static_cast<std::ptrdiff_t>(w));
    r->status = RequestStatus::kRunning;
    running_.push_back(r);
    out.scheduled.push_back({r, n, r->num_computed_tokens + n == r->num_tokens()});
    out.num_tokens += n;
    budget -= n;
  }
  if (config_.store_write_back) {
    for (const kv::BlockPool::Evicted& ev : kv_.pool().take_evicted()) {
      auto it = unwritten_.find(ev.id);
      if (it == unwritten_.end()) continue;
      if (it->second.pool_hash == ev.hash) out.evicted.push_back({ev.id, std::move(it->second.ref)});
      unwritten_.erase(it);
    }
  }
  return out;
}

void Scheduler::restart_window(Request* r) {
  const kv::KvPolicy& p = r->params.kv_policy;
  if (p.kind != kv::KvPolicyKind::kRecompute || r->num_tokens() <= p.budget) return;
  if (r->num_computed_tokens != 0 && r->num_computed_tokens != r->num_tokens() - 1) return;  // mid-window
  kv_.free(r->blocks);
  kv_.start_at(r->blocks, r->num_tokens() - p.budget);
  r->num_computed_tokens = r->num_tokens() - p.budget;
  r->num_registered_blocks = 0;
}

bool Scheduler::long_regime(const Request& r) const {
  if (config_.long_rope_after <= 0 || r.params.kv_policy.bounded()) return false;
  return config_.long_rope_by_context ? config_.max_model_len > config_.long_rope_after
                                      : r.num_tokens() > config_.long_rope_after;
}

void Scheduler::enter_long_regime(Request* r) {
  // Preloaded modules (Prompt Cache) were computed apart: they keep theirs.
  if (r->long_rope || r->preloaded || !long_regime(*r)) return;
  kv_.free(r->blocks);
  r->draft.clear();
  r->num_computed_tokens = 0;
  r->num_registered_blocks = 0;
  r->block_hashes.clear();
  r->long_rope = true;
  ++stats_.long_rope_restarts;
  if (config_.enable_prefix_caching) take_cached_prefix(r, /*count=*/false);
}

uint64_t Scheduler::hash_seed(const Request& r) const {
  constexpr uint64_t kLongRope = 0x9e3779b97f4a7c15ULL;  // any constant: the long regime's blocks are apart
  return config_.cache_key ^ r.cache_salt ^ (r.long_rope ? kLongRope : 0);
}

int64_t Scheduler::step_cap(const Request& r) const { return kv::max_step_tokens(r.params.kv_policy); }

bool Scheduler::evict_for_step(Request* r, int64_t n, SchedulerOutput& out) {
  const kv::KvPolicy& policy = r->params.kv_policy;
  if (!policy.bounded()) return true;
  kv::plan_cascade(policy, r->blocks, n);
  const std::vector<int64_t> gone = kv::plan_evictions(policy, r->blocks, n, kv_.block_size());
  if (gone.empty()) return true;
  return kv_.evict(r->blocks, gone, out.copies, out.key_shifts);
}

void Scheduler::register_full_blocks(Request* r) {
  // A table that evicted no longer holds the plain prefix its hashes name.
  if (r->blocks.mapped()) return;
  const int32_t bs = kv_.block_size();
  const int64_t full = r->num_computed_tokens / bs;
  if (full <= r->num_registered_blocks) return;
  kv::extend_block_hashes(r->block_hashes, std::span<const int32_t>(r->tokens.data(), full * bs), bs,
                          hash_seed(*r), config_.block_hash);
  for (int64_t b = r->num_registered_blocks; b < full; ++b) {
    kv_.pool().set_hash(r->blocks.blocks[b], block_key(*r, b));
  }
  if (stores(*r)) {
    // Every full block goes down to the store once: now (write-through) or
    // when RAM evicts it (write-back).
    extend_store_keys(r, full);
    for (int64_t b = r->num_registered_blocks; b < full; ++b) {
      const kvstore::StoreKey& key = r->store_keys[static_cast<size_t>(b)];
      if (config_.store->known(key)) continue;
      const auto tokens = std::span<const int32_t>(r->tokens).subspan(static_cast<size_t>(b) * bs, bs);
      kvstore::BlockRef ref{key, b == 0 ? kvstore::StoreKey{} : r->store_keys[static_cast<size_t>(b) - 1],
                            std::vector<int32_t>(tokens.begin(), tokens.end())};
      const kv::BlockId block = r->blocks.blocks[static_cast<size_t>(b)];
      if (config_.store_write_back) {
        unwritten_[block] = {std::move(ref), r->block_hashes[static_cast<size_t>(b)]};
      } else {
        exports_.push_back({block, std::move(ref)});
      }
    }
  }
  r->num_registered_blocks = full;
}

bool Scheduler::stores(const Request& r) const {
  return config_.store != nullptr && config_.enable_prefix_caching && !r.store_identity.empty() &&
         !r.params.kv_policy.bounded() && !r.preloaded && r.positions.empty();
}

kvstore::StoreKey Scheduler::store_identity(const Request& r) const {
  kvstore::StoreKey id = r.store_identity;
  if (r.long_rope) id.hi ^= 0x9e3779b97f4a7c15ULL;  // the long RoPE regime's blocks are apart
  return id;
}

void Scheduler::extend_store_keys(Request* r, int64_t num_blocks) {
  const int32_t bs = kv_.block_size();
  const kvstore::StoreKey id = store_identity(*r);
  while (static_cast<int64_t>(r->store_keys.size()) < num_blocks) {
    const size_t b = r->store_keys.size();
    const kvstore::StoreKey parent = b == 0 ? kvstore::StoreKey{} : r->store_keys[b - 1];
    r->store_keys.push_back(kvstore::chain_key(id, parent, std::span<const int32_t>(r->tokens).subspan(b * bs, bs)));
  }
}

void Scheduler::start_prefetch(Request* r) {
  const int32_t bs = kv_.block_size();
  // The last token is always computed (its logits), so its block is never loaded.
  const int64_t usable = (r->num_tokens() - 1) / bs;
  if (usable <= 0) return;
  // Blocks the RAM tier holds now need no loading (looked up, not taken).
  kv::extend_block_hashes(r->block_hashes, std::span<const int32_t>(r->tokens.data(), usable * bs), bs, hash_seed(*r),
                          config_.block_hash);
  int64_t hit = 0;
  kv::BlockId parent = kv::kNullBlock;
  for (; hit < usable; ++hit) {
    const auto tokens = std::span<const int32_t>(r->tokens).subspan(static_cast<size_t>(hit) * bs, bs);
    const auto id = kv_.pool().find({r->block_hashes[static_cast<size_t>(hit)], parent, hash_seed(*r), tokens});
    if (!id) break;
    parent = *id;
  }
  if (hit == usable) return;
  extend_store_keys(r, usable);
  std::vector<kvstore::BlockRef> refs;
  for (int64_t b = hit; b < usable; ++b) {
    const auto tokens = std::span<const int32_t>(r->tokens).subspan(static_cast<size_t>(b) * bs, bs);
    refs.push_back({r->store_keys[static_cast<size_t>(b)],
                    b == 0 ? kvstore::StoreKey{} : r->store_keys[static_cast<size_t>(b) - 1],
                    std::vector<int32_t>(tokens.begin(), tokens.end())});
  }
  r->store_ticket = config_.store->prefetch(std::move(refs));
  r->store_first_block = hit;
  r->store_since = std::chrono::steady_clock::now();
}

bool Scheduler::store_ready(Request* r) {
  auto blocks = config_.store->poll(r->store_ticket);
  if (!blocks) {
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - r->store_since).count();
    if (waited < config_.store_wait_s) return false;
    config_.store->cancel(r->store_ticket);  // too slow: compute it
  } else {
    r->stored_blocks = std::move(*blocks);
  }
  r->store_ticket = 0;
  return true;
}

void Scheduler::import_stored(Request* r, SchedulerOutput& out) {
  const int32_t bs = kv_.block_size();
  std::vector<std::shared_ptr<const kvstore::StoredBlock>> found = std::move(r->stored_blocks);
  r->stored_blocks.clear();
  // A request recomputed after preemption or a regime change computes all.
  if (found.empty() || r->num_preemptions > 0 || r->blocks.mapped()) return;
  const int64_t have = static_cast<int64_t>(r->blocks.blocks.size());
  // Only the loaded blocks that continue the RAM prefix are of use.
  const int64_t skip = have - r->store_first_block;
  if (skip < 0 || skip >= static_cast<int64_t>(found.size())) return;
  int64_t n = std::min<int64_t>(static_cast<int64_t>(found.size()) - skip, kv_.pool().num_free());
  if (n <= 0 || !kv_.reserve(r->blocks, (have + n) * bs, out.copies)) return;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t b = have + i;
    out.imports.push_back({r->blocks.blocks[static_cast<size_t>(b)], found[static_cast<size_t>(skip + i)]});
    kv_.pool().set_hash(r->blocks.blocks[static_cast<size_t>(b)], block_key(*r, b));
  }
  const int64_t cached = (have + n) * bs;
  r->num_computed_tokens = cached;
  r->num_registered_blocks = have + n;
  r->num_cached_tokens = cached;
  stats_.prefix_hit_tokens += n * bs;
  stats_.store_hit_tokens += n * bs;
}

kv::BlockKey Scheduler::block_key(const Request& r, int64_t b) const {
  const int32_t bs = kv_.block_size();
  const kv::BlockId parent = b == 0 ? kv::kNullBlock : r.blocks.blocks[b - 1];
  return {r.block_hashes[b], parent, hash_seed(r),
          std::span<const int32_t>(r.tokens).subspan(static_cast<size_t>(b) * bs, bs)};
}

void Scheduler::drop_out_of_window(Request* r) {
  // A bounded request's cache holds at most its budget already; its slots
  // are not its token indices once it evicted.
  if (config_.sliding_window <= 0 || r->params.kv_policy.bounded()) return;
  // The next query sits at num_computed_tokens and reads keys from
  // num_computed_tokens - window + 1 on. One block more is kept: a block's
  // prefix-cache key names its parent block, which must still be there when
  // the block fills.
  kv_.drop_before(r->blocks, r->num_computed_tokens - config_.sliding_window + 1 - kv_.block_size());
}

void Scheduler::on_step_computed(const SchedulerOutput& out) {
  for (const ScheduledRequest& s : out.scheduled) {
    if (s.req->finished()) continue;
    s.req->num_computed_tokens += s.num_new_tokens - s.num_draft;
    if (config_.enable_prefix_caching) register_full_blocks(s.req);
    drop_out_of_window(s.req);
  }
}

void Scheduler::on_draft_verified(Request* r, int64_t num_accepted) {
  r->draft.clear();
  if (r->finished()) return;
  TESSERA_ASSERT(num_accepted >= 0 && r->num_computed_tokens + num_accepted < r->num_tokens());
  r->num_computed_tokens += num_accepted;
  kv_.truncate(r->blocks, r->num_computed_tokens);
  if (config_.enable_prefix_caching) register_full_blocks(r);
  drop_out_of_window(r);
}

void Scheduler::preempt(Request* r) {
  kv_.free(r->blocks);
  r->draft.clear();
  r->num_computed_tokens = 0;
  r->num_registered_blocks = 0;
  r->status = RequestStatus::kWaiting;
  running_.erase(std::find(running_.begin(), running_.end(), r));
  waiting_.push_front(r);
  ++r->num_preemptions;
  ++stats_.preemptions;
}

void Scheduler::finish(Request* r, FinishReason reason) {
  if (r->finished()) return;
  kv_.free(r->blocks);
  if (r->store_ticket != 0) config_.store->cancel(r->store_ticket);
  r->store_ticket = 0;
  r->stored_blocks.clear();
  if (r->status == RequestStatus::kRunning) {
    running_.erase(std::find(running_.begin(), running_.end(), r));
  } else {
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), r));
  }
  r->status = RequestStatus::kFinished;
  r->finish = reason;
}

void Scheduler::release(RequestId id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return;
  TESSERA_ASSERT(it->second->finished());
  requests_.erase(it);
}

int64_t Scheduler::num_waiting_tokens() const {
  int64_t n = 0;
  for (const Request* r : waiting_) n += r->num_tokens() - r->num_computed_tokens;
  return n;
}

Request* Scheduler::find(RequestId id) {
  auto it = requests_.find(id);
  return it == requests_.end() ? nullptr : it->second.get();
}

}  // namespace tessera::engine
