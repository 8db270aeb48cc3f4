#include "adapters/lora.h"

#include <algorithm>
#include <atomic>
#include <functional>
#include <utility>

#include "core/cpu.h"
#include "core/error.h"
#include "kernels/kernel_context.h"
#include "kernels/lora_delta.h"

namespace tessera {

void stamp_content_hash(LoraAdapter& a) {
  kvstore::Hasher128 h;
  h.update_string("lora");
  for (const auto& layer : a.layers) {
    for (const LoraPair& p : layer) {
      h.update_value(p.rank);
      h.update_value(p.scale);
      h.update(p.a.data(), p.a.size() * sizeof(float));
      h.update(p.b.data(), p.b.size() * sizeof(float));
    }
  }
  a.content_hash = h.digest();
}

void LoraRetired::add(uint64_t uid) {
  std::lock_guard<std::mutex> lock(mu_);
  uids_.push_back(uid);
}

std::vector<uint64_t> LoraRetired::take() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::exchange(uids_, {});
}

LoraWatchers& LoraWatchers::operator=(LoraWatchers&& o) noexcept {
  if (this != &o) {
    std::scoped_lock lock(mu_, o.mu_);
    uid_ = o.uid_;
    list_ = std::move(o.list_);
  }
  return *this;
}

LoraWatchers::~LoraWatchers() {
  for (const std::weak_ptr<LoraRetired>& w : list_) {
    if (const std::shared_ptr<LoraRetired> r = w.lock()) r->add(uid_);
  }
}

void LoraWatchers::watch(uint64_t uid, const std::shared_ptr<LoraRetired>& w) const {
  std::lock_guard<std::mutex> lock(mu_);
  uid_ = uid;
  list_.push_back(w);
}

uint64_t next_lora_uid() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

std::pair<int64_t, int64_t> lora_target_shape(const ModelConfig& c, LoraTarget t) {
  switch (t) {
    case LoraTarget::kQ: return {c.n_embd, c.q_dim()};
    case LoraTarget::kK:
    case LoraTarget::kV: return {c.n_embd, c.kv_dim()};
    case LoraTarget::kO: return {c.q_dim(), c.n_embd};
    case LoraTarget::kGate:
    case LoraTarget::kUp: return {c.n_embd, c.n_ff};
    case LoraTarget::kDown: return {c.n_ff, c.n_embd};
  }
  return {0, 0};
}

LoraAdapter lora_part(const LoraAdapter& whole, int rank, int size) {
  LoraAdapter part;
  part.name = whole.name;
  part.alpha = whole.alpha;
  part.layers.resize(whole.layers.size());
  for (size_t il = 0; il < whole.layers.size(); ++il) {
    for (int t = 0; t < kNumLoraTargets; ++t) {
      const LoraPair& w = whole.layers[il][static_cast<size_t>(t)];
      LoraPair& p = part.layers[il][static_cast<size_t>(t)];
      if (w.rank == 0) continue;
      const bool by_input = t == static_cast<int>(LoraTarget::kO) || t == static_cast<int>(LoraTarget::kDown);
      const int64_t whole_n = by_input ? w.in : w.out;
      TESSERA_CHECK(whole_n % size == 0, kInvalidArgument, "LoRA adapter '{}': a matrix of {} cannot be split over {} ranks",
                    whole.name, whole_n, size);
      const int64_t n = whole_n / size, first = rank * n;
      p = w;
      std::vector<float>& v = by_input ? p.a : p.b;  // [rank][whole_n]
      const std::vector<float>& src = by_input ? w.a : w.b;
      v.assign(static_cast<size_t>(w.rank * n), 0.0f);
      for (int64_t r = 0; r < w.rank; ++r) {
        std::copy_n(src.begin() + r * whole_n + first, n, v.begin() + r * n);
      }
      (by_input ? p.in : p.out) = n;
    }
  }
  return part;
}

size_t LoraAdapter::bytes() const {
  size_t n = 0;
  for (const auto& layer : layers) {
    for (const LoraPair& p : layer) n += (p.a.size() + p.b.size()) * sizeof(float);
  }
  return n;
}

namespace {

// Tokens per kernel call: their ax ([chunk][rank]) stays in L1 between the
// shrink and the expand.
constexpr int64_t kLoraTokenChunk = 64;

// apply_lora's scratch, one per thread; it only grows.
struct LoraStepScratch {
  std::vector<std::pair<const LoraPair*, int32_t>> seqs;  // (pair, sequence index) of the sequences with a delta
  std::vector<int32_t> rows;                               // token rows, grouped by pair
  struct Call {
    const LoraPair* pair;
    int64_t row0, n;  // rows[row0, row0 + n)
  };
  std::vector<Call> calls;  // one kernel call each: independent outputs
  std::vector<float> ax;    // [chunk][rank]
};

}  // namespace

void apply_lora(const ForwardBatch& batch, int64_t layer, LoraTarget target, const float* x, int64_t x_stride,
                float* y, int64_t y_stride, const kernels::KernelContext& ctx) {
  if (batch.seq_lora.empty()) return;
  TESSERA_ASSERT(batch.seq_lora.size() == batch.seqs.size());
  thread_local LoraStepScratch sc;
  sc.seqs.clear();
  for (size_t i = 0; i < batch.seqs.size(); ++i) {
    const LoraAdapter* adapter = batch.seq_lora[i];
    const LoraPair* p = adapter != nullptr ? adapter->get(layer, target) : nullptr;
    if (p != nullptr && batch.seqs[i].q_len > 0) sc.seqs.emplace_back(p, static_cast<int32_t>(i));
  }
  if (sc.seqs.empty()) return;
  // Sequences sharing a pair (an adapter several requests use) run as one
  // call, so each weight vector is loaded once per tile of their tokens.
  std::sort(sc.seqs.begin(), sc.seqs.end(), [](const auto& l, const auto& r) {
    return l.first != r.first ? std::less<const LoraPair*>()(l.first, r.first) : l.second < r.second;
  });
  sc.rows.clear();
  sc.calls.clear();
  // Calls of at most kLoraTokenChunk tokens, and at least as many calls as
  // threads once a pair has 8 tokens per thread: a step whose sequences
  // share one adapter still uses every core. (Chunking never changes a
  // token's result: the kernels compute each output the same way in any
  // tile.)
  const int64_t threads = ctx.pool != nullptr ? ctx.pool->size() : 1;
  int64_t work = 0;  // multiply-adds
  for (size_t g = 0; g < sc.seqs.size();) {
    const LoraPair* p = sc.seqs[g].first;
    const int64_t first = static_cast<int64_t>(sc.rows.size());
    for (; g < sc.seqs.size() && sc.seqs[g].first == p; ++g) {
      const kernels::AttentionSeq& s = batch.seqs[static_cast<size_t>(sc.seqs[g].second)];
      for (int32_t t = s.q_begin; t < s.q_begin + s.q_len; ++t) sc.rows.push_back(t);
    }
    const int64_t n = static_cast<int64_t>(sc.rows.size()) - first;
    const int64_t parts = std::max((n + kLoraTokenChunk - 1) / kLoraTokenChunk, std::min(threads, n / 8));
    const int64_t chunk = (n + parts - 1) / parts;  // even chunks: 65 tokens are 33 + 32, not 64 + 1
    for (int64_t c = 0; c < n; c += chunk) sc.calls.push_back({p, first + c, std::min(chunk, n - c)});
    work += n * p->rank * (p->in + p->out);
  }
  // The calls write disjoint rows of y: any thread may run any of them, and
  // a token's result does not depend on which (the kernels' order of
  // operations is fixed per token).
  const Isa isa = ctx.isa;
  const std::vector<int32_t>& rows = sc.rows;
  const std::vector<LoraStepScratch::Call>& calls = sc.calls;
  auto run = [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> ax;
    for (int64_t i = begin; i < end; ++i) {
      const LoraStepScratch::Call& c = calls[static_cast<size_t>(i)];
      const LoraPair* p = c.pair;
      if (ax.size() < static_cast<size_t>(c.n * p->rank)) ax.resize(static_cast<size_t>(c.n * p->rank));
      const int32_t* r = rows.data() + c.row0;
      kernels::lora_shrink(p->a.data(), p->rank, p->in, p->scale, x, x_stride, r, c.n, ax.data(), isa);
      kernels::lora_expand(p->b.data(), p->rank, p->out, ax.data(), y, y_stride, r, c.n, isa);
    }
  };
  ThreadPool* pool = calls.size() > 1 ? kernels::parallel_pool(ctx, work, kernels::kMinParallelFloatMatmulMacs) : nullptr;
  if (pool != nullptr) {
    pool->parallel_for(static_cast<int64_t>(calls.size()), 1, run);
  } else {
    run(0, static_cast<int64_t>(calls.size()));
  }
}

}  // namespace tessera
