// Llama-family decoder: RMSNorm, RoPE, grouped-query attention over the
// paged KV cache, SwiGLU feed-forward, tied or separate output matrix.
// Variants differ only in what LlamaVariant says (Qwen2: QKV biases and
// NeoX-ordered RoPE), so each is a few lines in registry.cc.
#pragma once

#include <memory>
#include <vector>

#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "model/model.h"

namespace tessera {

struct LlamaVariant {
  bool qkv_bias = false;   // attn_{q,k,v}.bias tensors
  bool rope_neox = false;  // NeoX (half-split) RoPE ordering
};

// Matrices are prepared once at load (kernels::prepare_weight repacks the
// types that have a faster layout); .view is the GGUF data in place.
struct LlamaLayer {
  std::vector<float> attn_norm;       // [n_embd]
  kernels::PreparedWeight wq;         // [q_dim rows, n_embd cols]
  kernels::PreparedWeight wk, wv;     // [kv_dim, n_embd]
  kernels::PreparedWeight wo;         // [n_embd, q_dim]
  std::vector<float> bq, bk, bv;      // [q_dim], [kv_dim], [kv_dim] when qkv_bias
  std::vector<float> ffn_norm;        // [n_embd]
  kernels::PreparedWeight w_gate, w_up;  // [n_ff, n_embd]
  kernels::PreparedWeight w_down;        // [n_embd, n_ff]
};

class LlamaModel final : public Model {
 public:
  LlamaModel(const gguf::File& file, const LlamaVariant& variant);

  const ModelConfig& config() const override { return cfg_; }
  void forward(const ForwardBatch& batch, KvCache& kv, ForwardState& state) const override;
  size_t bytes_per_token() const override;
  MatmulWork matmul_work() const override;

 private:
  kernels::RopeParams rope_params() const {
    return {cfg_.n_rot, cfg_.rope_freq_base, cfg_.rope_freq_scale, cfg_.rope_neox};
  }
  void attention_block(const LlamaLayer& L, int64_t il, const ForwardBatch& batch, KvCache& kv,
                       ForwardState& s) const;
  void ffn_block(const LlamaLayer& L, int64_t il, int64_t n_tokens, ForwardState& s) const;

  ModelConfig cfg_;
  LlamaVariant variant_;
  kernels::WeightView tok_embd_;   // [n_vocab rows, n_embd cols], rows looked up
  std::vector<float> out_norm_;    // [n_embd]
  kernels::PreparedWeight output_; // [n_vocab, n_embd] (of tok_embd_ when tied)
  std::vector<LlamaLayer> layers_;
};

}  // namespace tessera
