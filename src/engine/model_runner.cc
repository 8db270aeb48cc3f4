#include "engine/model_runner.h"

#include <chrono>

namespace tessera::engine {

ModelRunner::ModelRunner(const Model& model, KvCache& kv, ThreadPool& pool) : model_(model), kv_(kv) {
  state_.ctx.pool = &pool;
  state_.ctx.isa = active_isa();
  state_.ctx.ws = &state_.ws;
}

std::span<float> ModelRunner::execute(const SchedulerOutput& out) {
  const int32_t bs = kv_.shape().block_size;
  // Copy-on-write goes first: here when blocks are loaded this step (a load
  // may fill a copy's destination), else with the step (ForwardBatch::copies).
  if (!out.loads.empty()) kv_.apply(out.copies);
  for (const KvLoad& l : out.loads) {
    std::vector<int64_t> slots;
    for (int64_t p = l.from; p < l.to; ++p) slots.push_back(l.req->blocks.slot(p, bs));
    kv_.write(*l.req->preloaded, l.from, l.to, slots);
  }
  batch_.clear();
  if (out.loads.empty()) batch_.copies = out.copies;
  batch_.key_shifts = out.key_shifts;  // bounded policies' evictions this step
  for (const ScheduledRequest& s : out.scheduled) {
    Request& r = *s.req;
    const int32_t q_begin = static_cast<int32_t>(batch_.tokens.size());
    const int64_t start = r.num_computed_tokens;
    for (int64_t p = start; p < start + s.num_new_tokens; ++p) {
      batch_.tokens.push_back(r.token_or_draft(p));
      // A mapped table (a bounded policy that evicted) places tokens by rank.
      batch_.positions.push_back(r.blocks.mapped() ? r.blocks.position(p, bs) : r.position(p));
      batch_.slots.push_back(r.blocks.slot(p, bs));
    }
    batch_.seqs.push_back(attention_seq(r.blocks, q_begin, start, s.num_new_tokens, bs));
    // The regime the scheduler chose (a bounded cache: by its keys).
    const bool long_rope = r.params.kv_policy.bounded() ? batch_.seqs.back().kv_len > model_.long_rope_after() : r.long_rope;
    batch_.long_rope.push_back(long_rope ? 1 : 0);
    if (r.params.kv_policy.kind == kv::KvPolicyKind::kSpAtten) {
      batch_.key_depth.resize(batch_.seqs.size() - 1, nullptr);  // the sequences before: none
      batch_.key_depth.push_back(r.blocks.key_depth.data());
    } else if (!batch_.key_depth.empty()) {
      batch_.key_depth.push_back(nullptr);
    }
    if (r.lora && batch_.seq_lora.size() + 1 < batch_.seqs.size()) {
      batch_.seq_lora.resize(batch_.seqs.size() - 1, nullptr);  // the sequences before: none
    }
    if (r.lora || !batch_.seq_lora.empty()) batch_.seq_lora.push_back(r.lora.get());
    // Soft prompt rows for its virtual tokens among this step's.
    const int64_t n_virtual = r.num_virtual_tokens();
    if (start < n_virtual) {
      batch_.embd_rows.resize(static_cast<size_t>(q_begin), nullptr);
      for (int64_t p = start; p < start + s.num_new_tokens; ++p) {
        batch_.embd_rows.push_back(p < n_virtual ? r.soft_prompt->row(p) : nullptr);
      }
    } else if (!batch_.embd_rows.empty()) {
      batch_.embd_rows.resize(batch_.tokens.size(), nullptr);
    }
    // The last token's row, and each draft token's (verification).
    const int32_t end = static_cast<int32_t>(batch_.tokens.size());
    for (int64_t i = s.num_logit_rows(); i > 0; --i) batch_.logit_rows.push_back(end - static_cast<int32_t>(i));
  }
  model_.forward(batch_, kv_, state_);
  const size_t n = batch_.logit_rows.size() * static_cast<size_t>(model_.config().n_vocab);
  return {state_.logits.data(), n};
}

double ModelRunner::time_scratch_step(int64_t n_tokens, kv::KvManager& kv) {
  kv::BlockTable table;
  std::vector<kv::CopyOp> copies;
  if (!kv.reserve(table, n_tokens, copies)) return 0.0;
  const int32_t bs = kv_.shape().block_size;
  batch_.clear();
  for (int64_t p = 0; p < n_tokens; ++p) {
    batch_.tokens.push_back(0);
    batch_.positions.push_back(static_cast<int32_t>(p));
    batch_.slots.push_back(table.slot(p, bs));
    batch_.logit_rows.push_back(static_cast<int32_t>(p));
  }
  batch_.seqs.push_back({0, static_cast<int32_t>(n_tokens), static_cast<int32_t>(n_tokens), table.blocks.data()});
  const auto t0 = std::chrono::steady_clock::now();
  model_.forward(batch_, kv_, state_);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  kv.free(table);
  return s;
}

}  // namespace tessera::engine
