// Random-weight Llama-architecture models for tests and benchmarks
// (`tessera make-model`): a named shape or explicit dims, a weight type, a
// seed, and a real vocabulary copied from another GGUF. The output loads in
// llama.cpp as well as in Tessera.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/dtype.h"

namespace tessera {

struct SyntheticModelSpec {
  std::string arch = "llama";  // "llama" or "qwen2" (QKV biases, NeoX RoPE)
  int64_t n_embd = 64;
  int64_t n_layer = 2;
  int64_t n_head = 4;
  int64_t n_head_kv = 2;
  int64_t head_dim = 0;        // 0: n_embd / n_head
  int64_t n_ff = 128;
  int64_t n_ctx = 2048;
  int64_t n_rot = 0;           // 0: head_dim
  float rope_freq_base = 10000.0f;
  float rms_eps = 1e-5f;
  bool tied_output = false;
  DType type = DType::kF32;    // every matrix
  std::optional<DType> output_type;  // output matrix, if different
  uint64_t seed = 1;
  std::string vocab_from;      // GGUF whose tokenizer.* metadata is copied
  int64_t n_vocab = 0;         // without vocab_from: a synthetic vocabulary of this size
};

// "tiny", "110m", "1b" (shapes of ../shared/docs/PEER_BASELINE.md).
SyntheticModelSpec preset_spec(const std::string& name);

// Writes the model; throws Error on invalid specs or I/O failure.
void write_synthetic_model(const SyntheticModelSpec& spec, const std::string& path, int n_threads = 0);

}  // namespace tessera
