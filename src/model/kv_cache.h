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
#include "model/config.h"

namespace tessera {

struct KvCacheShape {
  int32_t num_blocks = 0;  // including the null block
  int32_t block_size = 16;
  DType type = DType::kF16;
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

 private:
  KvCacheShape shape_;
  AlignedBuffer<uint8_t> k_, v_;  // [n_layer][num_blocks][n_kv_heads][block_size][head_dim]
  std::vector<kernels::KvLayerView> views_;
};

}  // namespace tessera
