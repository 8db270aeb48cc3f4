// The KV cache memory of one model: for every layer, K and V for every
// block of the pool, laid out as kernels/attention.h describes. Allocated
// once at start-up (sized by --kv-memory or --kv-blocks); which blocks hold
// what is kv::KvManager's business, not this class's.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/dtype.h"
#include "kernels/attention.h"
#include "kv/kv_manager.h"
#include "format/model_config.h"

namespace tessera {

// K and V of a run of tokens, outside the paged pool: the attention states
// of a Prompt Cache module, computed once and written into any sequence that
// imports it.
struct DenseKv {
  int64_t n_layer = 0;
  int64_t n_tokens = 0;
  int64_t kv_dim = 0;
  std::vector<float> k, v;  // [n_layer][n_tokens][kv_dim] each

  float* k_at(int64_t layer, int64_t token) { return k.data() + (layer * n_tokens + token) * kv_dim; }
  float* v_at(int64_t layer, int64_t token) { return v.data() + (layer * n_tokens + token) * kv_dim; }
  const float* k_at(int64_t layer, int64_t token) const { return k.data() + (layer * n_tokens + token) * kv_dim; }
  const float* v_at(int64_t layer, int64_t token) const { return v.data() + (layer * n_tokens + token) * kv_dim; }
  size_t bytes() const { return (k.size() + v.size()) * sizeof(float); }
};

struct KvCacheShape {
  int32_t num_blocks = 0;  // including the null block
  int32_t block_size = 16;
  DType type = DType::kF16;
  bool hadamard = false;  // Q8_0 / Q4_0 K and V stored Hadamard-rotated (kernels/attention.h)
  // Q8_0 / Q4_0 only: each layer's key mean, subtracted from the keys
  // ([n_layer][kv_dim]; empty: none; KvLayerView::k_mean).
  std::vector<std::vector<float>> key_mean{};
};

class KvCache {
 public:
  KvCache(const ModelConfig& config, const KvCacheShape& shape);

  // Bytes one block takes across all layers (K and V).
  static size_t bytes_per_block(const ModelConfig& config, int32_t block_size, DType type);
  // Blocks that fit in `bytes` (at least 2: the null block and one more).
  static int32_t blocks_for_memory(const ModelConfig& config, int32_t block_size, DType type, size_t bytes);

  const KvCacheShape& shape() const { return shape_; }
  kernels::KvLayerView layer(int64_t l) { return views_[l]; }
  size_t bytes() const { return k_.size() + v_.size(); }

  // Carries out copy-on-write copies the KV manager asked for.
  void apply(std::span<const kv::CopyOp> copies);

  // Reads the K/V of `slots` out of the pool, and writes tokens [from, to)
  // of `src` into `slots` (one slot per token of the range).
  DenseKv read(std::span<const int64_t> slots) const;
  void write(const DenseKv& src, int64_t from, int64_t to, std::span<const int64_t> slots);

  // One block's bytes, every layer's K then V, layer by layer
  // (bytes_per_block of them): what the global prompt cache stores.
  std::vector<uint8_t> export_block(kv::BlockId id) const;
  size_t export_bytes() const { return views_.empty() ? 0 : 2 * views_.size() * views_[0].block_bytes(); }
  void import_block(kv::BlockId id, std::span<const uint8_t> bytes);

 private:
  KvCacheShape shape_;
  int64_t kv_dim_ = 0;
  AlignedBuffer<uint8_t> k_, v_;  // [n_layer][num_blocks][n_kv_heads][block_size][head_dim]
  std::vector<kernels::KvLayerView> views_;
};

}  // namespace tessera
