// Random-weight Llama-architecture models for tests and benchmarks
// (`tessera make-model`): a named shape or explicit dims, a weight type, a
// seed, and a real vocabulary copied from another GGUF. The output loads in
// llama.cpp as well as in Tessera.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace tessera {

struct SyntheticModelSpec {
  // The layout llama.cpp's converter writes for: "llama"; "llama3" (llama
  // with rope_freqs.weight, Llama 3.1+ RoPE scaling); "mistral" (llama with
  // llama.attention.sliding_window, Mistral 7B v0.1); "qwen2" (QKV biases,
  // NeoX RoPE); "qwen3" (per-head q/k RMSNorm, NeoX RoPE); "gemma2" (post-norms,
  // GeGLU, soft-capping, alternating local/global layers, always tied);
  // "gemma3" (gemma2 without soft-capping, with q/k norms, 5 local : 1 global
  // layers); "phi3" (fused attn_qkv and gate/up, LongRoPE factors with
  // rope_scaling "longrope"); mixtures of experts: "mixtral" (a llama file
  // with llama.expert_count), "qwen2moe" (qwen2 attention, a shared expert)
  // and "qwen3moe" (qwen3 attention).
  std::string arch = "llama";
  int64_t n_embd = 64;
  int64_t n_layer = 2;
  int64_t n_head = 4;
  int64_t n_head_kv = 2;
  int64_t head_dim = 0;        // 0: n_embd / n_head
  int64_t n_ff = 128;
  int64_t n_ctx = 2048;
  int64_t n_rot = 0;           // 0: head_dim
  float rope_freq_base = 0.0f;  // 0: the family's (llama3 500000, qwen3 1000000, else 10000)
  // RoPE scaling: "" (none written), "linear" or "yarn" ("longrope" for
  // phi3: short and long factors, the long ones up to the factor, default
  // n_ctx / orig ctx, and an original context of default 4096), with the factor and
  // the original context length; llama3's rope_freqs use the factor (default
  // 32) and original context (default 8192) too, as Llama 3.2's config does.
  std::string rope_scaling;
  float rope_scaling_factor = 0.0f;
  int64_t rope_orig_ctx = 0;
  int64_t sliding_window = 0;  // > 0: written as <arch>.attention.sliding_window (defaults: mistral and gemma2
                               // 4096, gemma3 512 (their local layers'); phi3 writes 0 for none)
  // Soft-caps (gemma2: attention and final, default 50 and 30 as Gemma 2's
  // config; gemma3: final only, written when > 0).
  float attn_softcap = 0.0f, final_softcap = 0.0f;
  float rms_eps = 1e-5f;
  bool tied_output = false;
  DType type = DType::kF32;    // every matrix
  std::optional<DType> output_type;  // output matrix, if different
  uint64_t seed = 1;
  std::string vocab_from;      // GGUF whose tokenizer.* metadata is copied
  int64_t n_vocab = 0;         // without vocab_from: a synthetic vocabulary of this size
  // Mixtures (mixtral, qwen2moe, qwen3moe): experts, experts per token, an
  // expert's FFN width (0: n_ff; mixtral's is always n_ff) and the shared
  // expert's (qwen2moe; 0: n_ff).
  int64_t n_expert = 8;
  int64_t n_expert_used = 2;
  int64_t n_ff_exp = 0;
  int64_t n_ff_shexp = 0;
};

// "tiny", "110m", "1b" (shapes of ../shared/docs/PEER_BASELINE.md).
SyntheticModelSpec preset_spec(const std::string& name);

// Writes the model; throws Error on invalid specs or I/O failure.
void write_synthetic_model(const SyntheticModelSpec& spec, const std::string& path, int n_threads = 0);

// Writes the same model's Hugging Face twin into folder `dir`
// (format/hf_model.h: config.json, model.safetensors, or shards of at most
// max_shard_bytes with their index); types F32, F16 and BF16 only. With
// tokenizer_from (a folder holding tokenizer.json and tokenizer_config.json)
// those are copied and the vocabulary is its size; spec.vocab_from is refused.
void write_synthetic_hf_folder(const SyntheticModelSpec& spec, const std::string& dir,
                               const std::string& tokenizer_from = "", int64_t max_shard_bytes = 0, int n_threads = 0);

}  // namespace tessera
