#include "model/lora.h"

#include <atomic>

#include "core/error.h"

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

void apply_lora(const ForwardBatch& batch, int64_t layer, LoraTarget target, const float* x, int64_t x_stride,
                float* y, int64_t y_stride) {
  if (batch.seq_lora.empty()) return;
  TESSERA_ASSERT(batch.seq_lora.size() == batch.seqs.size());
  thread_local std::vector<float> ax;  // [rank]: grows once, no allocation per linear per step
  for (size_t i = 0; i < batch.seqs.size(); ++i) {
    const LoraAdapter* adapter = batch.seq_lora[i];
    if (adapter == nullptr) continue;
    const LoraPair* p = adapter->get(layer, target);
    if (p == nullptr) continue;
    const int64_t r = p->rank;
    ax.resize(static_cast<size_t>(r));
    const kernels::AttentionSeq& s = batch.seqs[i];
    for (int64_t t = s.q_begin; t < s.q_begin + s.q_len; ++t) {
      const float* xt = x + t * x_stride;
      for (int64_t k = 0; k < r; ++k) {
        const float* a = p->a.data() + k * p->in;
        float acc = 0.0f;
        for (int64_t j = 0; j < p->in; ++j) acc += a[j] * xt[j];
        ax[static_cast<size_t>(k)] = acc * p->scale;
      }
      float* yt = y + t * y_stride;
      for (int64_t o = 0; o < p->out; ++o) {
        const float* b = p->b.data() + o * r;
        float acc = 0.0f;
        for (int64_t k = 0; k < r; ++k) acc += b[k] * ax[static_cast<size_t>(k)];
        yt[o] += acc;
      }
    }
  }
}

}  // namespace tessera
