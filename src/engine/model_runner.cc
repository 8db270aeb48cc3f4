#include "engine/model_runner.h"

namespace tessera::engine {

ModelRunner::ModelRunner(const Model& model, KvCache& kv, ThreadPool& pool) : model_(model), kv_(kv) {
  state_.ctx.pool = &pool;
  state_.ctx.isa = active_isa();
  state_.ctx.ws = &state_.ws;
}

std::span<float> ModelRunner::execute(const SchedulerOutput& out) {
  kv_.apply(out.copies);
  const int32_t bs = kv_.shape().block_size;
  for (const KvLoad& l : out.loads) {
    std::vector<int64_t> slots;
    for (int64_t p = l.from; p < l.to; ++p) slots.push_back(l.req->blocks.slot(p, bs));
    kv_.write(*l.req->preloaded, l.from, l.to, slots);
  }
  batch_.clear();
  for (const ScheduledRequest& s : out.scheduled) {
    const Request& r = *s.req;
    const int32_t q_begin = static_cast<int32_t>(batch_.tokens.size());
    const int64_t start = r.num_computed_tokens;
    for (int64_t p = start; p < start + s.num_new_tokens; ++p) {
      batch_.tokens.push_back(r.tokens[p]);
      batch_.positions.push_back(r.position(p));
      batch_.slots.push_back(r.blocks.slot(p, bs));
    }
    batch_.seqs.push_back({q_begin, static_cast<int32_t>(s.num_new_tokens),
                           static_cast<int32_t>(start + s.num_new_tokens), r.blocks.blocks.data()});
    if (s.sample) batch_.logit_rows.push_back(static_cast<int32_t>(batch_.tokens.size() - 1));
  }
  model_.forward(batch_, kv_, state_);
  const size_t n = batch_.logit_rows.size() * static_cast<size_t>(model_.config().n_vocab);
  return {state_.logits.data(), n};
}

}  // namespace tessera::engine
