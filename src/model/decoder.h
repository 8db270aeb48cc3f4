// What every decoder-only architecture shares: the embedding lookup, the
// RoPE angles of a step, the final norm and logits (DecoderModel::forward),
// and the blocks a layer is built from (llama.cpp's build_norm, build_qkv,
// build_attn, build_ffn). An architecture file (model/arch/*.cc) loads its
// tensors and writes its layer as a sequence of these blocks; nothing here
// knows which architecture calls it.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "model/loader.h"
#include "model/model.h"

namespace tessera {

// Matrices are prepared once at load (kernels::prepare_weight repacks the
// types that have a faster layout); .view is the GGUF data in place.
struct AttentionWeights {
  kernels::PreparedWeight wq;      // [q_dim rows, n_embd cols]
  kernels::PreparedWeight wk, wv;  // [kv_dim, n_embd]
  kernels::PreparedWeight wo;      // [n_embd, q_dim]
  std::vector<float> bq, bk, bv;   // [q_dim], [kv_dim], [kv_dim]; empty without biases
  std::vector<float> q_norm, k_norm;  // [head_dim] per-head RMSNorm weights; empty without
};

struct FfnWeights {
  kernels::PreparedWeight gate, up;  // [n_ff, n_embd]
  kernels::PreparedWeight down;      // [n_embd, n_ff]
};

struct DecoderLayer {
  std::vector<float> attn_norm;  // [n_embd]
  AttentionWeights attn;
  std::vector<float> ffn_norm;   // [n_embd]
  FfnWeights ffn;
};

class DecoderModel : public Model {
 public:
  const ModelConfig& config() const override { return cfg_; }
  void forward(const ForwardBatch& batch, KvCache& kv, ForwardState& state) const override;
  size_t bytes_per_token() const override;
  MatmulWork matmul_work() const override;

 protected:
  // Reads the hyperparameters; `neox` is the architecture's RoPE ordering.
  DecoderModel(ModelLoader& ld, const ConfigOptions& options, bool neox);

  // One layer, in the architecture's order, on s.x ([n_tokens, n_embd]) in place.
  virtual void layer(const DecoderLayer& L, int64_t il, const ForwardBatch& batch, KvCache& kv,
                     ForwardState& s) const = 0;

  // ---- loading ---------------------------------------------------------
  // token_embd, output_norm, output (tied to token_embd when absent), and
  // Llama 3's rope_freqs when `rope_freqs` (the architecture reads it).
  void load_common(ModelLoader& ld, bool rope_freqs);
  // attn_norm, attn_{q,k,v,output}.weight, with attn_{q,k,v}.bias when `bias`.
  void load_attention(ModelLoader& ld, int64_t il, bool bias, DecoderLayer& L) const;
  // attn_q_norm / attn_k_norm ([head_dim]).
  void load_qk_norm(ModelLoader& ld, int64_t il, DecoderLayer& L) const;
  // ffn_norm, ffn_{gate,up,down}.
  void load_ffn(ModelLoader& ld, int64_t il, DecoderLayer& L) const;

  // ---- blocks ----------------------------------------------------------
  // s.xb = rmsnorm(s.x) * w, per token. Tap `name`.
  void norm(const std::vector<float>& w, const char* name, int64_t il, int64_t n_tokens, ForwardState& s) const;
  // s.q, s.k, s.v = s.xb times Wq, Wk, Wv (+ their biases, if any; + each
  // sequence's LoRA deltas, if any, as in every block with a matrix).
  void qkv(const AttentionWeights& w, int64_t il, const ForwardBatch& batch, ForwardState& s) const;
  // RMSNorm over each head of s.q and s.k (Qwen3's q_norm / k_norm).
  void qk_norm(const AttentionWeights& w, int64_t n_tokens, ForwardState& s) const;
  // Rotates s.q and s.k with the step's angles; taps q, k, v.
  void rope(int64_t il, int64_t n_tokens, ForwardState& s) const;
  // s.att = attention over the paged cache (with the model's sliding
  // window), after storing this step's K/V; then s.x += s.att Wo^T.
  // The step's attention entries as layer il sees them (SpAtten's cascade
  // hides keys from upper layers: ForwardBatch::key_depth).
  std::span<const kernels::AttentionSeq> layer_seqs(const ForwardBatch& batch, int64_t il, ForwardState& s) const;
  void attention(const AttentionWeights& w, int64_t il, const ForwardBatch& batch, KvCache& kv,
                 ForwardState& s) const;
  // s.x += W_down (silu(s.xb W_gate) * s.xb W_up); taps ffn_act (the
  // input of W_down) and layer_out.
  void swiglu_ffn(const FfnWeights& w, int64_t il, const ForwardBatch& batch, ForwardState& s) const;

  ModelConfig cfg_;
  std::vector<DecoderLayer> layers_;

 private:
  // Rotates the keys of batch.key_shifts in every layer (bounded caches).
  void shift_keys(const std::vector<kv::KeyShift>& shifts, KvCache& kv, ForwardState& s) const;
  kernels::WeightView tok_embd_;     // [n_vocab rows, n_embd cols], rows looked up
  std::vector<float> out_norm_;      // [n_embd]
  kernels::PreparedWeight output_;   // [n_vocab, n_embd] (of tok_embd_ when tied)
  std::vector<float> rope_factors_;  // [n_rot / 2] divisors of the RoPE angles (rope_freqs.weight), or empty
  kernels::RopeParams rope_;
};

// The architectures (model/arch/*.cc), by what general.architecture says.
std::unique_ptr<Model> make_llama(ModelLoader& ld);
std::unique_ptr<Model> make_qwen2(ModelLoader& ld);
std::unique_ptr<Model> make_qwen3(ModelLoader& ld);

}  // namespace tessera
