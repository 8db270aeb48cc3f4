#include "model/lora.h"

#include <algorithm>
#include <atomic>
#include <functional>
#include <utility>

#include "core/cpu.h"
#include "core/error.h"
#include "kernels/lora_delta.h"

namespace tessera {

uint64_t next_lora_uid() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
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
  std::vector<int32_t> rows;                               // token rows of the sequences of one pair
  std::vector<float> ax;                                   // [chunk][rank]
};

}  // namespace

void apply_lora(const ForwardBatch& batch, int64_t layer, LoraTarget target, const float* x, int64_t x_stride,
                float* y, int64_t y_stride) {
  if (batch.seq_lora.empty()) return;
  TESSERA_ASSERT(batch.seq_lora.size() == batch.seqs.size());
  thread_local LoraStepScratch sc;
  sc.seqs.clear();
  for (size_t i = 0; i < batch.seqs.size(); ++i) {
    const LoraAdapter* adapter = batch.seq_lora[i];
    const LoraPair* p = adapter != nullptr ? adapter->get(layer, target) : nullptr;
    if (p != nullptr && batch.seqs[i].q_len > 0) sc.seqs.emplace_back(p, static_cast<int32_t>(i));
  }
  // Sequences sharing a pair (an adapter several requests use) run as one
  // call, so each weight vector is loaded once per tile of their tokens.
  std::sort(sc.seqs.begin(), sc.seqs.end(), [](const auto& l, const auto& r) {
    return l.first != r.first ? std::less<const LoraPair*>()(l.first, r.first) : l.second < r.second;
  });
  const Isa isa = active_isa();
  for (size_t g = 0; g < sc.seqs.size();) {
    const LoraPair* p = sc.seqs[g].first;
    sc.rows.clear();
    for (; g < sc.seqs.size() && sc.seqs[g].first == p; ++g) {
      const kernels::AttentionSeq& s = batch.seqs[static_cast<size_t>(sc.seqs[g].second)];
      for (int32_t t = s.q_begin; t < s.q_begin + s.q_len; ++t) sc.rows.push_back(t);
    }
    const int64_t n = static_cast<int64_t>(sc.rows.size());
    const int64_t parts = (n + kLoraTokenChunk - 1) / kLoraTokenChunk;
    const int64_t chunk = (n + parts - 1) / parts;  // even chunks: 65 tokens are 33 + 32, not 64 + 1
    if (sc.ax.size() < static_cast<size_t>(chunk * p->rank)) sc.ax.resize(static_cast<size_t>(chunk * p->rank));
    for (int64_t c = 0; c < n; c += chunk) {
      const int64_t m = std::min(chunk, n - c);
      const int32_t* rows = sc.rows.data() + c;
      kernels::lora_shrink(p->a.data(), p->rank, p->in, p->scale, x, x_stride, rows, m, sc.ax.data(), isa);
      kernels::lora_expand(p->b.data(), p->rank, p->out, sc.ax.data(), y, y_stride, rows, m, isa);
    }
  }
}

}  // namespace tessera
