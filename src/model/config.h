// Hyperparameters of a decoder-only transformer, read from GGUF metadata
// ("<arch>.embedding_length" and friends) as llama.cpp names them. One struct
// for every architecture; each architecture file says which optional
// features it supports (ConfigOptions) and reads the fields it needs.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "model/gguf.h"

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
  // YaRN (rope_scaling == kYarn): the context the model was trained on
  // before the extension, the correction range's betas, and a factor on
  // cos/sin (the magnitude correction 1 + 0.1 ln(factor) comes on top).
  int64_t yarn_orig_ctx = 0;
  float yarn_beta_fast = 32.0f;
  float yarn_beta_slow = 1.0f;
  float rope_attn_factor = 1.0f;
  int64_t sliding_window = 0;  // > 0: each query sees this many keys, itself included
  bool tied_output = false;  // output matrix is token_embd

  int64_t q_dim() const { return n_head * head_dim; }
  int64_t kv_dim() const { return n_head_kv * head_dim; }
  int64_t group_size() const { return n_head / n_head_kv; }
};

// What an architecture supports beyond the keys every one of them reads. A
// key for a feature it does not support stays unread, and the loader then
// refuses the file naming it (model/loader.h).
struct ConfigOptions {
  bool sliding_window = false;  // "<arch>.attention.sliding_window"
};

// Reads and validates the hyperparameters common to Llama-style models.
// Throws Error(kCorruptFile) naming the key that is missing or invalid, or
// the RoPE scaling type that is not supported. Each metadata key it reads
// (present in the file) is passed to `used`, when given.
ModelConfig read_config(const gguf::File& file, const ConfigOptions& options = {},
                        const std::function<void(const std::string&)>& used = {});

}  // namespace tessera
