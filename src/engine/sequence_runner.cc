#include "engine/sequence_runner.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace tessera::engine {
namespace {

int64_t resolve_ctx(const Model& m, int64_t n_ctx) { return n_ctx > 0 ? n_ctx : m.config().n_ctx_train; }

int32_t blocks_for(int64_t n_ctx, int32_t block_size) {
  return static_cast<int32_t>((n_ctx + block_size - 1) / block_size) + 1;  // + null block
}

// Cache size: the context, or what a bounded policy holds at most (its
// budget, a partly filled block and a step's worth of empty slots).
int64_t cache_tokens(int64_t n_ctx, const SequenceRunnerOptions& o) {
  if (!o.kv_policy.bounded()) return n_ctx;
  return std::min(n_ctx, o.kv_policy.budget) + 2 * o.block_size + std::min(o.max_batch_tokens, o.kv_policy.budget);
}

}  // namespace

SequenceRunner::SequenceRunner(const Model& model, const SequenceRunnerOptions& options, ThreadPool& pool)
    : model_(model),
      opt_(options),
      n_ctx_(resolve_ctx(model, options.n_ctx)),
      kv_manager_({options.block_size, blocks_for(cache_tokens(n_ctx_, options), options.block_size)}),
      kv_cache_(model.config(),
                {blocks_for(cache_tokens(n_ctx_, options), options.block_size), options.block_size, options.kv_type, options.kv_hadamard, model.key_mean()}) {
  const std::string bad = kv::check_kv_policy(options.kv_policy);
  TESSERA_CHECK(bad.empty(), kInvalidArgument, "{}", bad);
  state_.ctx.pool = &pool;
  state_.ctx.isa = active_isa();
  state_.ctx.ws = &state_.ws;
}

void SequenceRunner::reset() {
  kv_manager_.free(table_);
  n_appended_ = 0;
  recent_.clear();
  long_regime_ = false;
  history_.clear();
  history_pos_.clear();
  history_opaque_ = false;
}

DenseKv SequenceRunner::export_kv(int64_t from, int64_t to) const {
  TESSERA_CHECK(!opt_.kv_policy.bounded(), kInvalidArgument, "export_kv: not with a bounded KV policy");
  TESSERA_CHECK(from >= 0 && from <= to && to <= n_past(), kInvalidArgument, "export_kv: bad range [{}, {})", from, to);
  std::vector<int64_t> slots;
  for (int64_t p = from; p < to; ++p) slots.push_back(table_.slot(p, kv_manager_.block_size()));
  return kv_cache_.read(slots);
}

void SequenceRunner::load(const DenseKv& kv) {
  TESSERA_CHECK(!opt_.kv_policy.bounded(), kInvalidArgument, "load: not with a bounded KV policy");
  const int64_t start = n_past();
  TESSERA_CHECK(start + kv.n_tokens <= n_ctx_, kOutOfRange, "{} loaded tokens exceed the context of {}", kv.n_tokens, n_ctx_);
  std::vector<kv::CopyOp> copies;
  const bool ok = kv_manager_.reserve(table_, start + kv.n_tokens, copies);
  TESSERA_ASSERT(ok && copies.empty());
  (void)ok;
  std::vector<int64_t> slots;
  for (int64_t p = start; p < start + kv.n_tokens; ++p) slots.push_back(table_.slot(p, kv_manager_.block_size()));
  kv_cache_.write(kv, 0, kv.n_tokens, slots);
  n_appended_ += kv.n_tokens;
  history_opaque_ = true;
}

std::span<const float> SequenceRunner::append(std::span<const int32_t> tokens, bool all_logits,
                                              std::span<const int32_t> positions,
                                              std::span<const float* const> embd_rows) {
  TESSERA_CHECK(positions.empty() || positions.size() == tokens.size(), kInvalidArgument,
                "append: {} positions for {} tokens", positions.size(), tokens.size());
  TESSERA_CHECK(embd_rows.empty() || embd_rows.size() == tokens.size(), kInvalidArgument,
                "append: {} embedding rows for {} tokens", embd_rows.size(), tokens.size());
  const kv::KvPolicy& policy = opt_.kv_policy;
  TESSERA_CHECK((positions.empty() && embd_rows.empty()) || !policy.bounded(), kInvalidArgument,
                "append: explicit positions or embeddings with a bounded KV policy (it places and recomputes "
                "tokens itself)");
  const int64_t V = model_.config().n_vocab;
  const int64_t n = static_cast<int64_t>(tokens.size());
  TESSERA_CHECK(n > 0, kInvalidArgument, "append: no tokens");
  TESSERA_CHECK(policy.bounded() || n_past() + n <= n_ctx_, kOutOfRange,
                "{} tokens exceed the context of {} ({} already used)", n, n_ctx_, n_past());
  if (all_logits) all_logits_.ensure(static_cast<size_t>(n * V));
  if (!policy.bounded()) enter_rope_regime(n);
  const int64_t step = std::min(opt_.max_batch_tokens, kv::max_step_tokens(policy));
  for (int64_t done = 0; done < n;) {
    const int64_t chunk = std::min(step, n - done);
    const std::span<const int32_t> part = tokens.subspan(static_cast<size_t>(done), static_cast<size_t>(chunk));
    if (policy.kind == kv::KvPolicyKind::kRecompute) recompute_window(chunk);
    const auto sub = [&](auto span) { return span.empty() ? span : span.subspan(static_cast<size_t>(done), static_cast<size_t>(chunk)); };
    run_chunk(part, sub(positions), sub(embd_rows), all_logits, done + chunk == n, done);
    if (policy.kind == kv::KvPolicyKind::kRecompute) {
      recent_.insert(recent_.end(), part.begin(), part.end());
      const int64_t excess = static_cast<int64_t>(recent_.size()) - policy.budget;
      if (excess > 0) recent_.erase(recent_.begin(), recent_.begin() + excess);
    }
    done += chunk;
    n_appended_ += chunk;
  }
  if (model_.long_rope_after() > 0 && opt_.long_rope == LongRopeMode::kSequence && !long_regime_) {
    for (int64_t i = 0; i < n; ++i) {
      history_.push_back(tokens[i]);
      history_pos_.push_back(positions.empty() ? static_cast<int32_t>(n_appended_ - n + i) : positions[i]);
    }
    history_opaque_ = history_opaque_ || !embd_rows.empty();
  }
  if (all_logits) return {all_logits_.data(), static_cast<size_t>(n * V)};
  return {state_.logits.data(), static_cast<size_t>(V)};
}

void SequenceRunner::recompute_window(int64_t n_new) {
  const kv::KvPolicy& p = opt_.kv_policy;
  if (table_.num_tokens + n_new <= p.budget) return;
  // The tokens the new ones see, computed again from an empty cache at
  // positions from 0 (the table stays dense: slot j holds position j).
  const int64_t keep = std::min<int64_t>(std::max<int64_t>(0, p.budget - n_new), static_cast<int64_t>(recent_.size()));
  const std::vector<int32_t> kept(recent_.end() - keep, recent_.end());
  kv_manager_.free(table_);
  if (!kept.empty()) run_chunk(kept, {}, {}, false, false, 0);
}

void SequenceRunner::enter_rope_regime(int64_t n) {
  if (long_regime_ || !long_rope_regime(model_, opt_.long_rope, n_past() + n, n_ctx_)) return;
  long_regime_ = true;
  if (n_past() == 0) return;
  TESSERA_CHECK(!history_opaque_, kInvalidArgument,
                "the sequence grows past the model's original context ({} tokens) and must be computed again with the "
                "long RoPE factors, but some of its tokens were loaded as K/V or embedding rows (use --long-rope "
                "context, or a prompt that is long from the start)",
                model_.long_rope_after());
  const std::vector<int32_t> tokens = std::move(history_), positions = std::move(history_pos_);
  history_.clear();
  history_pos_.clear();
  kv_manager_.free(table_);
  const std::span<const int32_t> all(tokens), pos(positions);
  for (size_t done = 0; done < tokens.size();) {
    const size_t chunk = std::min(static_cast<size_t>(opt_.max_batch_tokens), tokens.size() - done);
    run_chunk(all.subspan(done, chunk), pos.subspan(done, chunk), {}, false, false, 0);
    done += chunk;
  }
}

void SequenceRunner::run_chunk(std::span<const int32_t> tokens, std::span<const int32_t> positions,
                               std::span<const float* const> embd_rows, bool all_logits, bool want_last, int64_t row0) {
  const int64_t V = model_.config().n_vocab;
  const int64_t chunk = static_cast<int64_t>(tokens.size());
  const int32_t bs = kv_manager_.block_size();
  batch_.clear();
  std::vector<kv::CopyOp> copies;
  if (opt_.kv_policy.scored() && table_.score_depth == 0) table_.score_depth = kv::score_depth(model_.config().n_layer);
  kv::plan_cascade(opt_.kv_policy, table_, chunk);
  if (opt_.kv_policy.kind != kv::KvPolicyKind::kRecompute) {
    const std::vector<int64_t> gone = kv::plan_evictions(opt_.kv_policy, table_, chunk, bs);
    if (!gone.empty()) {
      const bool ok = kv_manager_.evict(table_, gone, copies, batch_.key_shifts);
      TESSERA_ASSERT(ok);
      (void)ok;
    }
  }
  const int64_t start = table_.num_tokens;
  const bool ok = kv_manager_.reserve(table_, start + chunk, copies);
  TESSERA_ASSERT(ok && copies.empty());
  (void)ok;
  for (int64_t i = 0; i < chunk; ++i) {
    batch_.tokens.push_back(tokens[i]);
    batch_.positions.push_back(positions.empty() ? table_.position(start + i, bs) : positions[i]);
    batch_.slots.push_back(table_.slot(start + i, bs));
  }
  batch_.embd_rows.assign(embd_rows.begin(), embd_rows.end());
  batch_.seqs.push_back(attention_seq(table_, 0, start, chunk, bs));
  if (opt_.kv_policy.kind == kv::KvPolicyKind::kSpAtten) batch_.key_depth.push_back(table_.key_depth.data());
  if (opt_.lora != nullptr) batch_.seq_lora.push_back(opt_.lora);
  if (!opt_.kv_policy.bounded()) batch_.long_rope.push_back(long_regime_ ? 1 : 0);
  if (all_logits) {
    for (int64_t i = 0; i < chunk; ++i) batch_.logit_rows.push_back(static_cast<int32_t>(i));
  } else if (want_last) {
    batch_.logit_rows.push_back(static_cast<int32_t>(chunk - 1));
  }
  model_.forward(batch_, kv_cache_, state_);
  if (all_logits) {
    std::memcpy(all_logits_.data() + row0 * V, state_.logits.data(), static_cast<size_t>(chunk * V) * sizeof(float));
  }
}

}  // namespace tessera::engine
