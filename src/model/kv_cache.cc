#include "model/kv_cache.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace tessera {

size_t KvCache::bytes_per_block(const ModelConfig& c, int32_t block_size, DType type) {
  const size_t tile = kernels::kv_tile_bytes(type, block_size, static_cast<int32_t>(c.head_dim));
  return 2 * static_cast<size_t>(c.n_layer) * static_cast<size_t>(c.n_head_kv) * tile;
}

int32_t KvCache::blocks_for_memory(const ModelConfig& c, int32_t block_size, DType type, size_t bytes) {
  const size_t per = bytes_per_block(c, block_size, type);
  const size_t n = bytes / per;
  return static_cast<int32_t>(std::clamp<size_t>(n, 2, size_t{1} << 24));
}

KvCache::KvCache(const ModelConfig& c, const KvCacheShape& shape) : shape_(shape) {
  kernels::check_kv_layout(shape.type, shape.block_size, static_cast<int32_t>(c.head_dim), shape.hadamard);
  TESSERA_CHECK(shape.num_blocks >= 2, kInvalidArgument, "KV cache needs at least 2 blocks");
  TESSERA_CHECK(shape.key_mean.empty() || static_cast<int64_t>(shape.key_mean.size()) == c.n_layer, kInvalidArgument,
                "KV cache: key means of {} layers for a model of {}", shape.key_mean.size(), c.n_layer);
  for (const std::vector<float>& s : shape.key_mean) {
    TESSERA_CHECK(static_cast<int64_t>(s.size()) == c.kv_dim(), kInvalidArgument, "KV cache: a key mean of {} values, kv dim {}",
                  s.size(), c.kv_dim());
  }
  kernels::KvLayerView proto;
  proto.type = shape.type;
  proto.hadamard = shape.hadamard;
  proto.block_size = shape.block_size;
  proto.n_kv_heads = static_cast<int32_t>(c.n_head_kv);
  proto.head_dim = static_cast<int32_t>(c.head_dim);
  kv_dim_ = c.kv_dim();
  const size_t layer_bytes = proto.block_bytes() * static_cast<size_t>(shape.num_blocks);
  k_.resize(layer_bytes * c.n_layer);
  v_.resize(layer_bytes * c.n_layer);
  for (int64_t l = 0; l < c.n_layer; ++l) {
    kernels::KvLayerView v = proto;
    v.k = k_.data() + layer_bytes * l;
    v.v = v_.data() + layer_bytes * l;
    if ((shape.type == DType::kQ8_0 || shape.type == DType::kQ4_0) && !shape_.key_mean.empty()) v.k_mean = shape_.key_mean[static_cast<size_t>(l)].data();
    views_.push_back(v);
  }
}

void KvCache::apply(std::span<const kv::CopyOp> copies) {
  for (const kv::CopyOp& op : copies) {
    for (const kernels::KvLayerView& v : views_) kernels::copy_block(v, op.src, op.dst);
  }
}

DenseKv KvCache::read(std::span<const int64_t> slots) const {
  DenseKv d;
  d.n_layer = static_cast<int64_t>(views_.size());
  d.n_tokens = static_cast<int64_t>(slots.size());
  d.kv_dim = kv_dim_;
  d.k.resize(static_cast<size_t>(d.n_layer * d.n_tokens * d.kv_dim));
  d.v.resize(d.k.size());
  for (int64_t l = 0; l < d.n_layer; ++l) {
    kernels::gather_kv(views_[l], slots.data(), d.n_tokens, d.k_at(l, 0), d.v_at(l, 0), d.kv_dim);
  }
  return d;
}

void KvCache::write(const DenseKv& src, int64_t from, int64_t to, std::span<const int64_t> slots) {
  TESSERA_ASSERT(static_cast<int64_t>(slots.size()) == to - from && src.kv_dim == kv_dim_);
  for (int64_t l = 0; l < src.n_layer; ++l) {
    kernels::store_kv(views_[l], src.k_at(l, from), src.v_at(l, from), src.kv_dim, slots.data(), to - from, Isa::kScalar);
  }
}

std::vector<uint8_t> KvCache::export_block(kv::BlockId id) const {
  std::vector<uint8_t> out;
  out.reserve(2 * views_.size() * (views_.empty() ? 0 : views_[0].block_bytes()));
  for (const kernels::KvLayerView& v : views_) {
    const size_t n = v.block_bytes();
    const uint8_t* k = static_cast<const uint8_t*>(v.k) + n * static_cast<size_t>(id);
    const uint8_t* vv = static_cast<const uint8_t*>(v.v) + n * static_cast<size_t>(id);
    out.insert(out.end(), k, k + n);
    out.insert(out.end(), vv, vv + n);
  }
  return out;
}

void KvCache::import_block(kv::BlockId id, std::span<const uint8_t> bytes) {
  size_t at = 0;
  for (const kernels::KvLayerView& v : views_) {
    const size_t n = v.block_bytes();
    TESSERA_CHECK(at + 2 * n <= bytes.size(), kInternal, "a stored block of {} bytes is short of this cache's layout",
                  bytes.size());
    std::memcpy(static_cast<uint8_t*>(v.k) + n * static_cast<size_t>(id), bytes.data() + at, n);
    std::memcpy(static_cast<uint8_t*>(v.v) + n * static_cast<size_t>(id), bytes.data() + at + n, n);
    at += 2 * n;
  }
}

}  // namespace tessera
