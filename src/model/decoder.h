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
#include "kernels/qmoe.h"
#include "kernels/rotation.h"
#include "kernels/ops.h"
#include "model/ffn_sparsity.h"
#include "model/loader.h"
#include "model/model.h"

namespace tessera {

// Matrices are prepared once at load (kernels::prepare_weight repacks the
// types that have a faster layout); .view is the GGUF data in place.
// A fused matrix (Phi-3's attn_qkv, ffn_up) is loaded as views of its row
// ranges, so the blocks below never see the difference.
struct AttentionWeights {
  kernels::PreparedWeight wq;      // [q_dim rows, n_embd cols]
  kernels::PreparedWeight wk, wv;  // [kv_dim, n_embd]
  kernels::PreparedWeight wo;      // [n_embd, q_dim]
  std::vector<float> bq, bk, bv;   // [q_dim], [kv_dim], [kv_dim]; empty without biases
  std::vector<float> q_norm, k_norm;  // [head_dim] per-head RMSNorm weights; empty without
  std::vector<float> bo;              // [n_embd] output bias (gpt-oss); empty without
  std::vector<float> sinks;           // [n_head] attention sinks (gpt-oss, kernels::AttentionShape); empty without
};

struct FfnWeights {
  kernels::PreparedWeight gate, up;  // [n_ff, n_embd]
  kernels::PreparedWeight down;      // [n_embd, n_ff]
};

// A mixture of experts in place of the FFN (ModelConfig::moe()): a router,
// n_expert gated FFNs (views of llama.cpp's 3-D ffn_*_exps tensors, one
// expert's rows each) and, for Qwen2-MoE, a shared expert with its sigmoid gate.
struct MoeWeights {
  kernels::PreparedWeight router;     // [n_expert, n_embd] (ffn_gate_inp)
  std::vector<FfnWeights> experts;    // gate, up [n_ff_exp, n_embd]; down [n_embd, n_ff_exp]
  FfnWeights shared;                  // [n_ff_shexp, ...] when ModelConfig::n_ff_shexp > 0
  kernels::PreparedWeight shared_gate;  // [1, n_embd] (ffn_gate_inp_shexp)
  // QMoE experts (kernels/qmoe.h), instead of `experts`: one view of each
  // projection over every expert.
  bool qmoe = false;
  kernels::QmoeView q_gate, q_up, q_down;
  // gpt-oss's biases, empty without: the router's [n_expert], and each
  // expert's gate and up [n_expert][n_ff_exp] and down [n_expert][n_embd].
  std::vector<float> router_bias, gate_bias, up_bias, down_bias;
};

// How the router's logits become the chosen experts' weights: after a
// softmax over all experts and the top n_expert_used, renormalised to sum to
// 1 (Mixtral, Qwen3-MoE) or as they are (Qwen2-MoE); or a softmax over the
// logits of the n_expert_used chosen by logit (gpt-oss, llama.cpp's
// SOFTMAX_WEIGHT).
enum class MoeWeighting { kRenormalised, kSoftmax, kSoftmaxOfChosen };

struct DecoderLayer {
  std::vector<float> attn_norm;       // [n_embd]
  AttentionWeights attn;
  std::vector<float> attn_post_norm;  // [n_embd] on the attention output before the residual (Gemma); empty without
  std::vector<float> ffn_norm;        // [n_embd]
  FfnWeights ffn;
  FfnSparsity ffn_sparsity;           // contextual sparsity of ffn (model/ffn_sparsity.h); off by default
  MoeWeights moe;                     // instead of ffn in a mixture of experts
  std::vector<float> ffn_post_norm;   // [n_embd] on the FFN output before the residual (Gemma); empty without
  int32_t window = 0;                 // this layer's sliding window (0: none)
  bool local_rope = false;            // rotates with the local layers' RoPE (ModelConfig::rope_freq_base_swa)
};

// The activation of a gated FFN: silu (SwiGLU), tanh-approximated GELU
// (GeGLU, Gemma), or gpt-oss's clamped SwiGLU (kernels::swiglu_oai_mul).
enum class FfnAct { kSilu, kGeluTanh, kSwigluOai };

class DecoderModel : public Model {
 public:
  const ModelConfig& config() const override { return cfg_; }
  ModelConfig whole_config() const override;  // split_config undone
  void forward(const ForwardBatch& batch, KvCache& kv, ForwardState& state) const override;
  size_t bytes_per_token() const override;
  MatmulWork matmul_work() const override;
  const std::vector<std::vector<float>>& key_mean() const override { return key_mean_; }
  int64_t long_rope_after() const override { return rope_long_factors_.empty() ? 0 : long_rope_after_; }

 protected:
  // Reads the hyperparameters; `neox` is the architecture's RoPE ordering.
  DecoderModel(ModelLoader& ld, const ConfigOptions& options, bool neox);

  // One layer, in the architecture's order, on s.x ([n_tokens, n_embd]) in place.
  virtual void layer(const DecoderLayer& L, int64_t il, const ForwardBatch& batch, KvCache& kv,
                     ForwardState& s) const = 0;

  // ---- loading ---------------------------------------------------------
  // token_embd, output_norm, output (tied to token_embd when absent, or
  // always when `tied`: Gemma 2 has no output matrix), Llama 3's rope_freqs
  // when `rope_freqs` (the architecture reads it), and each layer's window
  // and RoPE (every layer's sliding window, or the interleaved local ones).
  void load_common(ModelLoader& ld, bool rope_freqs, bool tied = false);
  // Phi-3's LongRoPE: rope_factors_short.weight / rope_factors_long.weight
  // ([n_rot / 2] divisors of the angles), if the file has them. A sequence
  // no longer than rope.scaling.original_context_length turns with the short
  // factors, a longer one with the long factors at every position
  // (ForwardBatch::long_rope; Model::long_rope_after).
  void load_long_rope(ModelLoader& ld);
  // attn_norm, attn_{q,k,v,output}.weight, with attn_{q,k,v}.bias when `bias`.
  void load_attention(ModelLoader& ld, int64_t il, bool bias, DecoderLayer& L) const;
  // attn_norm, attn_qkv.weight ([q_dim + 2 kv_dim, n_embd]: q, k, v rows), attn_output.
  void load_attention_fused(ModelLoader& ld, int64_t il, DecoderLayer& L) const;
  // attn_q_norm / attn_k_norm ([head_dim]).
  void load_qk_norm(ModelLoader& ld, int64_t il, DecoderLayer& L) const;
  // post_attention_norm / post_ffw_norm ([n_embd], Gemma).
  void load_post_norms(ModelLoader& ld, int64_t il, DecoderLayer& L) const;
  // ffn_norm, ffn_{gate,up,down}.
  void load_ffn(ModelLoader& ld, int64_t il, DecoderLayer& L) const;
  // ffn_norm, ffn_up ([2 n_ff, n_embd]: gate rows, then up rows), ffn_down.
  void load_ffn_fused(ModelLoader& ld, int64_t il, DecoderLayer& L) const;
  // ffn_norm, ffn_gate_inp, ffn_{gate,up,down}_exps, and the shared expert
  // (ffn_gate_inp_shexp, ffn_{gate,up,down}_shexp) when n_ff_shexp > 0.
  // A mixture's experts as matrices (ffn_{gate,up,down}_exps), prepared
  // unless they stay in place (experts_in_place_).
  void load_experts(ModelLoader& ld, int64_t il, MoeWeights& m) const;
  // `norm`: the FFN norm's tensor (gpt-oss names it post_attention_norm).
  void load_moe(ModelLoader& ld, int64_t il, DecoderLayer& L, const char* norm = "ffn_norm.weight") const;
  // gpt-oss: ffn_gate_inp.bias and ffn_{gate,up,down}_exps.bias.
  void load_moe_biases(ModelLoader& ld, int64_t il, MoeWeights& m) const;
  // gpt-oss: attn_output.bias and attn_sinks.weight.
  void load_attention_bias_and_sinks(ModelLoader& ld, int64_t il, DecoderLayer& L) const;

  // ---- blocks ----------------------------------------------------------
  // s.xb = rmsnorm(s.x) * w, per token. Tap `name`.
  void norm(const std::vector<float>& w, const char* name, int64_t il, int64_t n_tokens, ForwardState& s) const;
  // s.q, s.k, s.v = s.xb times Wq, Wk, Wv (+ their biases, if any; + each
  // sequence's LoRA deltas, if any, as in every block with a matrix).
  void qkv(const AttentionWeights& w, int64_t il, const ForwardBatch& batch, ForwardState& s) const;
  // RMSNorm over each head of s.q and s.k (Qwen3's q_norm / k_norm).
  void qk_norm(const AttentionWeights& w, int64_t n_tokens, ForwardState& s) const;
  // Rotates s.q and s.k with the step's angles (the layer's RoPE); taps q, k, v.
  void rope(int64_t il, int64_t n_tokens, ForwardState& s) const;
  // s.att = attention over the paged cache (with the layer's sliding window,
  // the model's query scale and score soft-capping), after storing this
  // step's K/V; then s.x += s.att Wo^T, RMS-normalised by attn_post_norm
  // first when the layer has one.
  // The step's attention entries as layer il sees them (SpAtten's cascade
  // hides keys from upper layers: ForwardBatch::key_depth).
  std::span<const kernels::AttentionSeq> layer_seqs(const ForwardBatch& batch, int64_t il, ForwardState& s) const;
  void attention(const DecoderLayer& L, int64_t il, const ForwardBatch& batch, KvCache& kv, ForwardState& s) const;
  // s.x += W_down (act(s.xb W_gate) * s.xb W_up), RMS-normalised by
  // ffn_post_norm first when the layer has one; taps ffn_act (the input of
  // W_down) and layer_out.
  void gated_ffn(const DecoderLayer& L, FfnAct act, int64_t il, const ForwardBatch& batch, ForwardState& s) const;
  // gated_ffn with contextual sparsity (model/ffn_sparsity.cc): the same
  // bits as gated_ffn on the masked products.
  void sparse_gated_ffn(const DecoderLayer& L, FfnAct act, int64_t il, const ForwardBatch& batch,
                        ForwardState& s) const;
  // The mixture in place of gated_ffn (experts gated by `act`): s.x += the
  // chosen experts' outputs, weighted, (+ the shared expert's, gated). The
  // step's tokens are grouped by expert, so each chosen expert's weights are
  // read once per step (counted in s.expert_passes). Taps ffn_moe_probs (the
  // router's probabilities; its logits for kSoftmaxOfChosen) and layer_out.
  void moe_ffn(const DecoderLayer& L, MoeWeighting weighting, int64_t il, const ForwardBatch& batch,
               ForwardState& s, FfnAct act = FfnAct::kSilu) const;

  // QuaRot (quant/rotate.h): ffn_down's input rotated at run time; null without.
  std::shared_ptr<const kernels::Rotation> ffn_rotation_;
  // QuaRot on Gemma: each post-norm's output rotated by the stream's R; null without.
  std::shared_ptr<const kernels::Rotation> post_rotation_;
  // A quantized KV cache's key means (Model::key_mean); empty without.
  std::vector<std::vector<float>> key_mean_;

  // Query heads in the file (cfg_.n_head is this shard's under tensor parallelism).
  int64_t file_heads() const { return cfg_.n_head * split_.size; }

  float embd_scale_ = 1.0f;  // input rows (tokens' and soft prompts') are multiplied by it (Gemma: sqrt(n_embd))

  ModelConfig cfg_;
  std::vector<DecoderLayer> layers_;

 private:
  // Taps ffn_gate_act: act(gate) of the step's rows (s.ff_gate, before the
  // product), which contextual sparsity's calibration thresholds.
  void tap_gate_activation(FfnAct act, int64_t il, int64_t n_tokens, ForwardState& s) const;
  // Rotates the keys of batch.key_shifts in every layer (bounded caches).
  void shift_keys(const std::vector<kv::KeyShift>& shifts, KvCache& kv, ForwardState& s) const;
  // Each token's experts and weights (s.moe_choice, s.moe_weight) from the
  // router, then the (token, weight) pairs grouped by expert.
  void route(const MoeWeights& m, MoeWeighting weighting, int64_t il, int64_t n_tokens, ForwardState& s) const;
  // The chosen experts' weighted outputs into s.xb2: grouped by expert (each
  // expert's weights read once per step), or token by token (the baseline).
  void grouped_experts(const MoeWeights& m, FfnAct act, int64_t il, ForwardState& s) const;
  void per_token_experts(const MoeWeights& m, FfnAct act, int64_t il, int64_t n_tokens, ForwardState& s) const;
  // The step's rows of each expert to ForwardState::tap (calibration).
  void tap_experts(int64_t il, ForwardState& s) const;
  // One token's pass through expert e (moe_in -> moe_out), with its biases.
  void expert_ffn(const MoeWeights& m, int64_t e, FfnAct act, ForwardState& s) const;
  // s.moe_out[0..n) = the gated FFN of w on s.moe_in[0..n) (no biases).
  void dense_expert_ffn(const FfnWeights& w, int64_t n_ff, int64_t n, FfnAct act, ForwardState& s) const;
  // s.xb2 = rmsnorm(s.xb2) * w when w is not empty (a post-norm); then s.x += s.xb2.
  void add_residual(const std::vector<float>& post_norm, const char* name, int64_t il, int64_t n_tokens,
                    ForwardState& s) const;
  // The RoPE of a token at `pos` on the global layers (Phi-3's short or long factors).
  const kernels::RopeParams& rope_for(bool long_regime) const;
  kernels::WeightView tok_embd_;     // [n_vocab rows, n_embd cols], rows looked up
  std::vector<float> out_norm_;      // [n_embd]
  kernels::PreparedWeight output_;   // [n_vocab, n_embd] (of tok_embd_ when tied)
  std::vector<float> rope_factors_;  // [n_rot / 2] divisors of the RoPE angles (rope_freqs.weight), or empty
  std::vector<float> rope_long_factors_;  // [n_rot / 2] (rope_factors_long.weight), or empty
  kernels::RopeParams rope_;         // every layer's, or the global layers'
  kernels::RopeParams rope_swa_;     // the local layers' (cfg_.swa_window > 0)
  kernels::RopeParams rope_long_;    // sequences longer than long_rope_after_ (rope_long_factors_ not empty)
  int64_t long_rope_after_ = 0;
  // TESSERA_MOE_PER_TOKEN=1 (read at load): experts run token by token, the
  // baseline that bench compares expert-grouped execution against.
  bool moe_per_token_ = false;
  // A mixture whose experts would take more than half the memory available
  // (core/memory.h) uses them in place from the mapped file, so the page
  // cache holds what fits; otherwise they are repacked like every matrix.
  // TESSERA_EXPERTS_IN_PLACE=1 / 0 decides instead. Set by load_common.
  bool experts_in_place_ = false;
  // Under tensor parallelism, QMoE experts (whose codes cannot be cut by
  // rows or columns) are split by expert instead: rank r computes whole
  // experts e with e mod size = r for the tokens routed to them (the router
  // is whole on every rank, so every rank routes alike), and the FFN's
  // all-reduce sums their outputs; each expert's biases added by its rank.
  bool experts_by_rank_ = false;
  bool owns_expert(int64_t e) const { return !experts_by_rank_ || e % split_.size == split_.rank; }
  // Each layer's contextual-sparsity threshold from the file (empty: dense).
  std::vector<float> ffn_thresholds_;
  // TESSERA_W8A8=1 / TESSERA_W4A8=1 (read at load; --w8a8 / --w4a8): the
  // layers' attention and FFN matrices quantized to W8A8 or W4A8 at load
  // (kernels::prepare_weight_w8a8 / _w4a8): 8 or 4; 0 keeps the file's types.
  // The embeddings, output and experts keep their type.
  int int_bits_ = 0;
  kernels::PreparedWeight prepare_linear(const kernels::WeightView& w) const;
  // Which part of a matrix a tensor-parallel shard holds (model/tensor_split.h):
  // all of it, its rows (heads, neurons), or its columns (the products whose
  // partial sums the ranks add up).
  // A product whose columns are split over ranks (attn_output, ffn_down):
  // a W8A8 / W4A8 part quantizes each token's activations with the whole
  // row's scale (max |x| gathered from every rank), so the codes are one
  // process's; otherwise kernels::matmul. y: [T, n_embd].
  void split_product(const kernels::PreparedWeight& w, const float* x, int64_t cols, int64_t T, float* y,
                     ForwardState& s) const;
  // QuaRot's online rotation of ffn_down's input (s.ff_gate, [T, n_ff]):
  // under tensor parallelism, of the whole rows gathered from every rank.
  void rotate_ffn_product(int64_t T, ForwardState& s) const;
  enum class Share { kWhole, kRows, kCols };
  // A layer's matrix by name: a W8A8 file's (I8 + scales), else prepare_linear;
  // rows x cols is this shard's part (the file's is size times one of them).
  kernels::PreparedWeight load_linear(ModelLoader& ld, const std::string& name, int64_t cols, int64_t rows,
                                      Share share = Share::kWhole) const;
  // This shard's part (the rank's n values) of a vector split like rows.
  std::vector<float> own_part(const std::vector<float>& whole, int64_t n) const;
  // cfg_ becomes this shard's: heads, KV heads and FFN neurons divided by the
  // number of ranks; refuses what cannot be split yet.
  void split_config(const std::string& path);
  TensorSplit split_;
  int64_t vocab_part_ = 0;  // output rows per rank: ceil(n_vocab / ranks)
  // Gemma's final soft-capping of n logits in place (none without it).
  void softcap_logits(float* z, int64_t n) const;
  // The logits of R rows from this rank's vocabulary slice, gathered on rank 0.
  void split_logits(int64_t R, ForwardState& s) const;
  void decide_expert_layout(const gguf::File& f);
};

// gate = act(gate) * up over n values.
void ffn_activate(FfnAct act, float* gate, const float* up, int64_t n, Isa isa);

// Gemma's query scale, as llama.cpp sets it (GGUF has no
// query_pre_attn_scalar): 1/sqrt(n_embd / n_head) on the 27B model (which
// llama.cpp recognises by its n_layer_27b layers), else 1/sqrt(head_dim).
// n_head: the file's (all ranks' heads under tensor parallelism).
float gemma_query_scale(const ModelConfig& c, int64_t n_head, int64_t n_layer_27b);

// The architectures (model/arch/*.cc), by what general.architecture says.
std::unique_ptr<Model> make_llama(ModelLoader& ld);
std::unique_ptr<Model> make_qwen2(ModelLoader& ld);
std::unique_ptr<Model> make_qwen3(ModelLoader& ld);
std::unique_ptr<Model> make_qwen2moe(ModelLoader& ld);
std::unique_ptr<Model> make_qwen3moe(ModelLoader& ld);
std::unique_ptr<Model> make_gemma2(ModelLoader& ld);
std::unique_ptr<Model> make_gemma3(ModelLoader& ld);
std::unique_ptr<Model> make_phi3(ModelLoader& ld);
std::unique_ptr<Model> make_gpt_oss(ModelLoader& ld);

}  // namespace tessera
