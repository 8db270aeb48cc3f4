// LoRA (Hu et al. 2021): a linear layer W gains a low-rank delta,
//   y = W x + s * B (A x),   s = user scale * alpha / rank,
// A [rank, in], B [out, rank] (stored transposed here). The base product
// stays one GEMM over every token of the step; the delta is added after it
// only for the sequences whose adapter has a pair for that linear
// (apply_lora: the tokens of every sequence sharing a pair in one call of
// the shrink and expand kernels of kernels/lora_delta.h, as Punica's SGMV
// for prefill segments and BGMV for decode tokens). Adapters are never
// merged into the weights.
//
// Adapters are loaded by src/adapters/ (llama.cpp's adapter GGUF); this
// file is how a delta enters the forward pass, which knows nothing of files.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "kvstore/block_record.h"

#include "format/model_config.h"
#include "kernels/kernel_context.h"
#include "kernels/lora_delta.h"
#include "kv/forward_batch.h"

namespace tessera {

// The linears of a decoder layer an adapter may touch.
enum class LoraTarget : int { kQ, kK, kV, kO, kGate, kUp, kDown };
constexpr int kNumLoraTargets = 7;

// The GGUF name of a target's linear, in LoraTarget order ("attn_q" ...
// "ffn_down"): blk.N.<name>.weight.
inline constexpr const char* kLoraTargetNames[kNumLoraTargets] = {"attn_q",   "attn_k", "attn_v",  "attn_output",
                                                                  "ffn_gate", "ffn_up", "ffn_down"};

struct LoraPair {
  int64_t rank = 0, in = 0, out = 0;  // rank 0: the linear has no delta
  float scale = 0.0f;                 // user scale * alpha / rank
  std::vector<float> a;               // [rank][in]
  std::vector<float> b;               // [rank][out]: B transposed, so expanding is an axpy along out per rank
  // How A and B are kept (store_lora): kF32 in a and b; otherwise the same
  // rows in that type (kernels/lora_delta.h) in a_packed and b_packed, and
  // a and b empty.
  kernels::LoraWeightType type = kernels::LoraWeightType::kF32;
  std::vector<uint8_t> a_packed, b_packed;

  const void* a_data() const { return type == kernels::LoraWeightType::kF32 ? static_cast<const void*>(a.data()) : a_packed.data(); }
  const void* b_data() const { return type == kernels::LoraWeightType::kF32 ? static_cast<const void*>(b.data()) : b_packed.data(); }
};

// (in, out) of the base matrix a target adapts, for a model of config `c`.
std::pair<int64_t, int64_t> lora_target_shape(const ModelConfig& c, LoraTarget t);

// A process-unique number per adapter built (prefix-cache keys use it:
// an adapter freed and another built at the same address never match).
uint64_t next_lora_uid();

struct LoraAdapter;
// Sets a.content_hash from its pairs (ranks, scales, A and B).
void stamp_content_hash(LoraAdapter& a);

// The uids of watched adapters since freed, for whoever holds copies made
// from them (a tensor-parallel model: the ranks' parts).
class LoraRetired {
 public:
  void add(uint64_t uid);
  std::vector<uint64_t> take();

 private:
  std::mutex mu_;
  std::vector<uint64_t> uids_;
};

// An adapter's watchers, told its uid when it is freed. Moves with the
// adapter; a copy starts with none.
class LoraWatchers {
 public:
  LoraWatchers() = default;
  LoraWatchers(const LoraWatchers&) {}
  LoraWatchers(LoraWatchers&& o) noexcept : uid_(o.uid_), list_(std::move(o.list_)) {}
  LoraWatchers& operator=(const LoraWatchers&) { return *this; }
  LoraWatchers& operator=(LoraWatchers&& o) noexcept;
  ~LoraWatchers();
  // Thread-safe; `uid`: the adapter's.
  void watch(uint64_t uid, const std::shared_ptr<LoraRetired>& w) const;

 private:
  mutable std::mutex mu_;
  mutable uint64_t uid_ = 0;
  mutable std::vector<std::weak_ptr<LoraRetired>> list_;
};

struct LoraAdapter {
  uint64_t uid = next_lora_uid();
  // A hash of its weights (stamp_content_hash), stable across processes:
  // the global prompt cache keys its blocks with it. Empty: not stamped,
  // and requests with it keep their blocks in RAM only.
  kvstore::StoreKey content_hash;
  std::string name;
  float alpha = 0.0f;
  std::vector<std::array<LoraPair, kNumLoraTargets>> layers;  // [n_layer]
  LoraWatchers watchers;

  const LoraPair* get(int64_t layer, LoraTarget t) const {
    const LoraPair& p = layers[static_cast<size_t>(layer)][static_cast<size_t>(t)];
    return p.rank > 0 ? &p : nullptr;
  }
  size_t bytes() const;
};

// Keeps every pair of `a` (F32) in `type` from now on: F16, or Q8_0 where
// both of a pair's matrices have rows of a multiple of 32 values (F16 for a
// pair that has not). Restamps its content hash when it had one: another
// type is other weights. Decode with many adapters reads each token's
// adapter whole, so this is its cost per step (docs/ADAPTERS.md).
void store_lora(LoraAdapter& a, kernels::LoraWeightType type);
// `a` with every pair back in F32 (the values its compact rows stand for).
LoraAdapter unpacked_lora(const LoraAdapter& a);

// Rank `rank` of `size`'s part of an adapter for a tensor-parallel shard
// (model/tensor_split.h): the output rows of Q, K, V, gate and up (B's), the
// input columns of O and down (A's; each rank's partial delta is summed with
// its partial base product by the all-reduce after them). Contiguous equal
// parts, as the base matrices are split; a part keeps the pair's type (a
// Q8_0 pair's parts must be whole blocks of 32).
LoraAdapter lora_part(const LoraAdapter& whole, int rank, int size);

// y[t, :] += s * B (A x[t, :]) for the tokens of every sequence of `batch`
// whose adapter (batch.seq_lora) has a pair for (layer, target). x: [tokens,
// x_stride], y: [tokens, y_stride]. One kernel call per adapter pair and
// chunk of its tokens, spread over ctx.pool when the step is big enough,
// with ctx.isa's kernels; a token's delta does not depend on the rest of
// the batch nor on the thread that computes it. Thread-local scratch: no
// allocation once it has seen the largest step.
void apply_lora(const ForwardBatch& batch, int64_t layer, LoraTarget target, const float* x, int64_t x_stride,
                float* y, int64_t y_stride, const kernels::KernelContext& ctx);

}  // namespace tessera
