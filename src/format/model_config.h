// Hyperparameters of a decoder-only transformer, read from GGUF metadata
// ("<arch>.embedding_length" and friends) as llama.cpp names them. One struct
// for every architecture; each architecture file says which optional
// features it supports (ConfigOptions) and reads the fields it needs.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "format/gguf.h"

namespace tessera {

enum class RopeScaling { kNone, kLinear, kYarn };

struct ModelConfig {
  std::string arch;          // general.architecture, e.g. "llama", "qwen2"
  std::string name;          // general.name, if any
  int64_t n_vocab = 0;
  int64_t n_ctx_train = 0;   // context length the model was trained for
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;      // key/value length per head
  int64_t n_ff = 0;
  float rms_eps = 1e-5f;
  int64_t n_rot = 0;         // rotated dims per head
  float rope_freq_base = 10000.0f;
  float rope_freq_scale = 1.0f;  // 1 / rope.scaling.factor (linear and YaRN)
  bool rope_neox = false;    // NeoX (half-split) vs normal (interleaved) ordering
  RopeScaling rope_scaling = RopeScaling::kNone;
  // The context the model was trained on before the extension (YaRN's, and
  // where Phi-3's long RoPE factors start), and for YaRN (rope_scaling ==
  // kYarn) the correction range's betas (its magnitude correction
  // 1 + 0.1 ln(factor) comes on top of rope_attn_factor).
  int64_t yarn_orig_ctx = 0;
  float yarn_beta_fast = 32.0f;
  float yarn_beta_slow = 1.0f;
  float rope_attn_factor = 1.0f;  // on cos/sin (rope.scaling.attn_factor; YaRN's own comes on top)
  int64_t sliding_window = 0;  // > 0: each query of every layer sees this many keys, itself included
  // Interleaved local / global layers (Gemma 2/3): when swa_window > 0, layer
  // il is local (sliding window swa_window, RoPE base rope_freq_base_swa and
  // scale rope_freq_scale_swa) if il % swa_period < swa_period - 1, as
  // llama.cpp's set_swa_pattern; the other layers are global.
  int64_t swa_window = 0;
  int64_t swa_period = 0;
  float rope_freq_base_swa = 10000.0f;
  float rope_freq_scale_swa = 1.0f;
  float attn_scale = 0.0f;     // query scale; 0: 1 / sqrt(head_dim)
  float attn_softcap = 0.0f;   // > 0: scores become cap * tanh(scores / cap) (Gemma 2)
  float final_softcap = 0.0f;  // > 0: the same on the logits
  bool tied_output = false;  // output matrix is token_embd
  // Mixture of experts (n_expert > 0): each token's FFN is the weighted sum
  // of n_expert_used of the n_expert expert FFNs (width n_ff_exp) its router
  // picks, plus, when n_ff_shexp > 0, a shared expert of that width every
  // token goes through (Qwen2-MoE).
  int64_t n_expert = 0;
  int64_t n_expert_used = 0;
  int64_t n_ff_exp = 0;
  int64_t n_ff_shexp = 0;

  bool moe() const { return n_expert > 0; }

  bool local_layer(int64_t il) const { return swa_window > 0 && il % swa_period < swa_period - 1; }

  int64_t q_dim() const { return n_head * head_dim; }
  int64_t kv_dim() const { return n_head_kv * head_dim; }
  int64_t group_size() const { return n_head / n_head_kv; }
};

// What an architecture supports beyond the keys every one of them reads. A
// key for a feature it does not support stays unread, and the loader then
// refuses the file naming it (model/loader.h).
struct ConfigOptions {
  bool sliding_window = false;  // "<arch>.attention.sliding_window", every layer
  // Interleaved local / global layers (ModelConfig::swa_window): the default
  // period of "<arch>.attention.sliding_window_pattern" (> 0: the
  // architecture interleaves) and window (0: local layers only when the file
  // gives "<arch>.attention.sliding_window"). Local layers' RoPE base is
  // "<arch>.rope.freq_base_swa", by default swa_rope_base with no scaling, or
  // (swa_rope_base = 0) the global layers' base and scaling.
  int64_t swa_period = 0;
  int64_t swa_window = 0;
  float swa_rope_base = 0.0f;
  // "<arch>.attn_logit_softcapping" / "<arch>.final_logit_softcapping" are
  // read (with these defaults) when `softcap`; a final softcap alone when
  // `final_softcap`.
  bool softcap = false;
  bool final_softcap = false;
  // "<arch>.expert_count" / "expert_used_count" / "expert_feed_forward_length"
  // / "expert_shared_feed_forward_length" are read when `moe` (a file without
  // expert_count is dense); `moe_required`: the architecture is MoE only.
  bool moe = false;
  bool moe_required = false;
  float attn_softcap = 0.0f, final_softcap_default = 0.0f;
  // "<arch>.attention.scale" (the query scale, ModelConfig::attn_scale) is
  // read when `attention_scale`: Tessera writes it for Gemma folders whose
  // query_pre_attn_scalar is not what llama.cpp derives from the shape.
  bool attention_scale = false;
};

// Reads and validates the hyperparameters common to Llama-style models.
// Throws Error(kCorruptFile) naming the key that is missing or invalid, or
// the RoPE scaling type that is not supported. Each metadata key it reads
// (present in the file) is passed to `used`, when given.
ModelConfig read_config(const gguf::File& file, const ConfigOptions& options = {},
                        const std::function<void(const std::string&)>& used = {});

// Llama 3's per-pair RoPE divisors for n_rot rotated dims, as llama.cpp's
// converter computes them from a Hugging Face rope_scaling of type llama3
// (Llama 3.1 / 3.2: low_freq_factor 1, high_freq_factor 4).
std::vector<float> llama3_rope_factors(int64_t n_rot, float freq_base, float factor, int64_t orig_ctx,
                                       double low_freq_factor = 1.0, double high_freq_factor = 4.0);

}  // namespace tessera
