// Hyperparameters of a decoder-only transformer, read from GGUF metadata
// ("<arch>.embedding_length" and friends). One struct for every
// architecture; each model file reads the fields it needs.
#pragma once

#include <cstdint>
#include <string>

#include "model/gguf.h"

namespace tessera {

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
  float rope_freq_scale = 1.0f;
  bool rope_neox = false;    // NeoX (half-split) vs normal (interleaved) ordering
  bool tied_output = false;  // output matrix is token_embd

  int64_t q_dim() const { return n_head * head_dim; }
  int64_t kv_dim() const { return n_head_kv * head_dim; }
  int64_t group_size() const { return n_head / n_head_kv; }
};

// Reads and validates the hyperparameters common to Llama-style models.
// Throws Error(kCorruptFile) naming the key that is missing or invalid.
ModelConfig read_config(const gguf::File& file);

}  // namespace tessera
