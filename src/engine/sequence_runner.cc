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

}  // namespace

SequenceRunner::SequenceRunner(const Model& model, const SequenceRunnerOptions& options, ThreadPool& pool)
    : model_(model),
      opt_(options),
      n_ctx_(resolve_ctx(model, options.n_ctx)),
      kv_manager_({options.block_size, blocks_for(n_ctx_, options.block_size)}),
      kv_cache_(model.config(), {blocks_for(n_ctx_, options.block_size), options.block_size, options.kv_type}) {
  state_.ctx.pool = &pool;
  state_.ctx.isa = active_isa();
  state_.ctx.ws = &state_.ws;
}

void SequenceRunner::reset() { kv_manager_.free(table_); }

DenseKv SequenceRunner::export_kv(int64_t from, int64_t to) const {
  TESSERA_CHECK(from >= 0 && from <= to && to <= n_past(), kInvalidArgument, "export_kv: bad range [{}, {})", from, to);
  std::vector<int64_t> slots;
  for (int64_t p = from; p < to; ++p) slots.push_back(table_.slot(p, kv_manager_.block_size()));
  return kv_cache_.read(slots);
}

void SequenceRunner::load(const DenseKv& kv) {
  const int64_t start = n_past();
  TESSERA_CHECK(start + kv.n_tokens <= n_ctx_, kOutOfRange, "{} loaded tokens exceed the context of {}", kv.n_tokens, n_ctx_);
  std::vector<kv::CopyOp> copies;
  const bool ok = kv_manager_.reserve(table_, start + kv.n_tokens, copies);
  TESSERA_ASSERT(ok && copies.empty());
  (void)ok;
  std::vector<int64_t> slots;
  for (int64_t p = start; p < start + kv.n_tokens; ++p) slots.push_back(table_.slot(p, kv_manager_.block_size()));
  kv_cache_.write(kv, 0, kv.n_tokens, slots);
}

std::span<const float> SequenceRunner::append(std::span<const int32_t> tokens, bool all_logits,
                                              std::span<const int32_t> positions) {
  TESSERA_CHECK(positions.empty() || positions.size() == tokens.size(), kInvalidArgument,
                "append: {} positions for {} tokens", positions.size(), tokens.size());
  const int64_t V = model_.config().n_vocab;
  const int64_t n = static_cast<int64_t>(tokens.size());
  TESSERA_CHECK(n > 0, kInvalidArgument, "append: no tokens");
  TESSERA_CHECK(n_past() + n <= n_ctx_, kOutOfRange, "{} tokens exceed the context of {} ({} already used)",
                n, n_ctx_, n_past());
  if (all_logits) all_logits_.ensure(static_cast<size_t>(n * V));
  for (int64_t done = 0; done < n;) {
    const int64_t chunk = std::min(opt_.max_batch_tokens, n - done);
    const int64_t start = n_past();
    std::vector<kv::CopyOp> copies;
    const bool ok = kv_manager_.reserve(table_, start + chunk, copies);
    TESSERA_ASSERT(ok && copies.empty());
    (void)ok;
    batch_.clear();
    for (int64_t i = 0; i < chunk; ++i) {
      batch_.tokens.push_back(tokens[done + i]);
      batch_.positions.push_back(positions.empty() ? static_cast<int32_t>(start + i) : positions[done + i]);
      batch_.slots.push_back(table_.slot(start + i, kv_manager_.block_size()));
    }
    batch_.seqs.push_back({0, static_cast<int32_t>(chunk), static_cast<int32_t>(start + chunk), table_.blocks.data()});
    if (opt_.lora != nullptr) batch_.seq_lora.push_back(opt_.lora);
    if (all_logits) {
      for (int64_t i = 0; i < chunk; ++i) batch_.logit_rows.push_back(static_cast<int32_t>(i));
    } else if (done + chunk == n) {
      batch_.logit_rows.push_back(static_cast<int32_t>(chunk - 1));
    }
    model_.forward(batch_, kv_cache_, state_);
    if (all_logits) {
      std::memcpy(all_logits_.data() + done * V, state_.logits.data(), static_cast<size_t>(chunk * V) * sizeof(float));
    }
    done += chunk;
  }
  if (all_logits) return {all_logits_.data(), static_cast<size_t>(n * V)};
  return {state_.logits.data(), static_cast<size_t>(V)};
}

}  // namespace tessera::engine
