#include "adapters/lora.h"

#include <algorithm>
#include <atomic>
#include <functional>
#include <utility>

#include "core/cpu.h"
#include "core/error.h"
#include "kernels/blocks.h"
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
      if (p.type != kernels::LoraWeightType::kF32) {  // an F32 adapter's hash as before
        h.update_value(p.type);
        h.update(p.a_packed.data(), p.a_packed.size());
        h.update(p.b_packed.data(), p.b_packed.size());
      }
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

namespace {

using kernels::LoraWeightType;

// rows x n values in `type`, packed row after row.
std::vector<uint8_t> pack_rows(LoraWeightType type, const std::vector<float>& v, int64_t rows, int64_t n) {
  const int64_t row_bytes = kernels::lora_row_bytes(type, n);
  std::vector<uint8_t> out(static_cast<size_t>(rows * row_bytes));
  for (int64_t r = 0; r < rows; ++r) kernels::lora_pack_row(type, v.data() + r * n, n, out.data() + r * row_bytes);
  return out;
}

std::vector<float> unpack_rows(LoraWeightType type, const std::vector<uint8_t>& v, int64_t rows, int64_t n) {
  const int64_t row_bytes = kernels::lora_row_bytes(type, n);
  std::vector<float> out(static_cast<size_t>(rows * n));
  for (int64_t r = 0; r < rows; ++r) kernels::lora_unpack_row(type, v.data() + r * row_bytes, n, out.data() + r * n);
  return out;
}

// Columns [first, first + n) of each of `rows` rows of `whole_n` values in
// `type` (Q8_0: whole blocks).
std::vector<uint8_t> cut_rows(LoraWeightType type, const std::vector<uint8_t>& v, int64_t rows, int64_t whole_n,
                              int64_t first, int64_t n) {
  const int64_t unit = type == LoraWeightType::kQ8_0 ? kernels::kQK : 1;  // values per indivisible piece
  TESSERA_CHECK(first % unit == 0 && n % unit == 0, kInvalidArgument,
                "a LoRA matrix in {} cannot be split at column {} (blocks of {})", kernels::lora_weight_type_name(type),
                first, unit);
  const int64_t whole_bytes = kernels::lora_row_bytes(type, whole_n), part_bytes = kernels::lora_row_bytes(type, n);
  const int64_t skip = first == 0 ? 0 : kernels::lora_row_bytes(type, first);
  std::vector<uint8_t> out(static_cast<size_t>(rows * part_bytes));
  for (int64_t r = 0; r < rows; ++r) {
    std::copy_n(v.begin() + r * whole_bytes + skip, part_bytes, out.begin() + r * part_bytes);
  }
  return out;
}

}  // namespace

void store_lora(LoraAdapter& a, LoraWeightType type) {
  if (type == LoraWeightType::kF32) return;
  for (auto& layer : a.layers) {
    for (LoraPair& p : layer) {
      if (p.rank == 0) continue;
      TESSERA_CHECK(p.type == LoraWeightType::kF32, kInvalidArgument, "LoRA adapter '{}' is already stored in {}",
                    a.name, kernels::lora_weight_type_name(p.type));
      const bool fits = kernels::lora_row_fits(type, p.in) && kernels::lora_row_fits(type, p.out);
      p.type = fits ? type : LoraWeightType::kF16;
      p.a_packed = pack_rows(p.type, p.a, p.rank, p.in);
      p.b_packed = pack_rows(p.type, p.b, p.rank, p.out);
      p.a = {};
      p.b = {};
    }
  }
  if (!a.content_hash.empty()) stamp_content_hash(a);
}

LoraAdapter unpacked_lora(const LoraAdapter& a) {
  LoraAdapter out;
  out.name = a.name;
  out.alpha = a.alpha;
  out.layers = a.layers;
  for (auto& layer : out.layers) {
    for (LoraPair& p : layer) {
      if (p.rank == 0 || p.type == LoraWeightType::kF32) continue;
      p.a = unpack_rows(p.type, p.a_packed, p.rank, p.in);
      p.b = unpack_rows(p.type, p.b_packed, p.rank, p.out);
      p.a_packed = {};
      p.b_packed = {};
      p.type = LoraWeightType::kF32;
    }
  }
  if (!a.content_hash.empty()) stamp_content_hash(out);
  return out;
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
      if (w.type != LoraWeightType::kF32) {
        (by_input ? p.a_packed : p.b_packed) = cut_rows(w.type, by_input ? w.a_packed : w.b_packed, w.rank, whole_n, first, n);
      } else {
        std::vector<float>& v = by_input ? p.a : p.b;  // [rank][whole_n]
        const std::vector<float>& src = by_input ? w.a : w.b;
        v.assign(static_cast<size_t>(w.rank * n), 0.0f);
        for (int64_t r = 0; r < w.rank; ++r) {
          std::copy_n(src.begin() + r * whole_n + first, n, v.begin() + r * n);
        }
      }
      (by_input ? p.in : p.out) = n;
    }
  }
  return part;
}

size_t LoraAdapter::bytes() const {
  size_t n = 0;
  for (const auto& layer : layers) {
    for (const LoraPair& p : layer) n += (p.a.size() + p.b.size()) * sizeof(float) + p.a_packed.size() + p.b_packed.size();
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
      kernels::lora_shrink(p->a_data(), p->rank, p->in, p->scale, x, x_stride, r, c.n, ax.data(), isa, p->type);
      kernels::lora_expand(p->b_data(), p->rank, p->out, ax.data(), y, y_stride, r, c.n, isa, p->type);
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
