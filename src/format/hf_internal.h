// Hugging Face folders (format/hf_model.h): the per-family tables and the
// config.json <-> GGUF metadata translation shared by reading and export.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "format/gguf.h"

namespace tessera::hf {

// One tensor name, HF's and GGUF's; per-layer names are the part after
// "model.layers.N." and "blk.N.".
struct NamePair {
  const char* hf;
  const char* gguf;
};

// An architecture family: the config.json model_type and class, the GGUF
// architecture, and what the converter does to its tensors.
struct Family {
  const char* model_type;  // "llama", "qwen2", "gemma3_text", ...
  const char* hf_class;    // "LlamaForCausalLM", ...
  const char* arch;        // GGUF general.architecture
  const char* act_key;     // "hidden_act" or "hidden_activation"
  const char* act;         // the activation Tessera computes
  std::span<const NamePair> layer_names;  // attention and norms (all of a layer, where ffn_names is empty)
  std::span<const NamePair> ffn_names;    // the FFN: a dense MLP, or a mixture's router and shared expert
  bool permute_qk;         // llama family: q/k rows rotate-half -> interleaved
  bool norm_plus_one;      // gemma: RMSNorm weights w -> 1 + w
  bool window;             // config.json's sliding_window is the model's (else refused when enabled)
  // A mixture of experts: per-expert HF tensors ("*" in the HF name stands for
  // the expert's index) stacked into one 3-D GGUF tensor each; the config.json
  // key of the expert count; whether the top-k weights are renormalised
  // (HF's norm_topk_prob, fixed per architecture as in llama.cpp).
  std::span<const NamePair> expert_names;
  const char* expert_count_key;
  bool norm_topk_prob;
};

// An HF expert tensor's GGUF stack ("blk.N.ffn_up_exps.weight") and its index in it.
struct ExpertName {
  std::string gguf;
  int64_t expert = -1;
};

// A string metadata value.
gguf::Value string_value(std::string v);

// The family of a config.json model_type; throws naming `where` and the
// supported types.
const Family& family_by_model_type(std::string_view model_type, const std::string& where);
// The family a model file exports as (llama with a sliding window: mistral).
const Family& family_for_export(const gguf::File& f);

// HF name -> GGUF name in a family; "" when the table has none.
std::string to_gguf_name(const Family& fam, std::string_view hf_name);
std::string to_hf_name(const Family& fam, std::string_view gguf_name);
// The same for the experts of a mixture: "" / expert -1 when not an expert tensor.
ExpertName to_gguf_expert_name(const Family& fam, std::string_view hf_name);
std::string to_hf_expert_name(const Family& fam, std::string_view gguf_name, int64_t expert);

// config.json translated: GGUF metadata, the F32 vectors the converter
// computes from it (rope_freqs.weight, rope_factors_*), and what the tensor
// side needs to know.
struct TranslatedConfig {
  std::vector<std::pair<std::string, gguf::Value>> metadata;
  std::vector<std::pair<std::string, std::vector<float>>> vectors;
  bool tied = false;       // tie_word_embeddings
  int64_t n_vocab = 0;     // vocab_size (0: not given)
  int64_t n_head = 0, n_head_kv = 0;
};
TranslatedConfig translate_config(const nlohmann::json& config, const Family& fam, const std::string& where);

// The config.json of a model file's HF twin.
nlohmann::json export_config(const gguf::File& f, const Family& fam);

}  // namespace tessera::hf
