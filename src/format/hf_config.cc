// config.json <-> GGUF metadata, and the HF <-> GGUF tensor names, as
// llama.cpp's convert_hf_to_gguf.py maps them for each family.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <set>

#include "core/error.h"
#include "format/model_config.h"
#include "format/hf_internal.h"
#include "format/model_config.h"

namespace tessera::hf {
namespace {

using nlohmann::json;

constexpr NamePair kGlobalNames[] = {
    {"model.embed_tokens.weight", "token_embd.weight"},
    {"model.norm.weight", "output_norm.weight"},
    {"lm_head.weight", "output.weight"},
};

// A llama-style layer's attention and norms (biases: Qwen2; q/k norms: Qwen3),
// then its FFN: a dense MLP, or a mixture's router (and shared expert).
constexpr NamePair kLlamaAttention[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.q_proj.bias", "attn_q.bias"},
    {"self_attn.k_proj.bias", "attn_k.bias"},
    {"self_attn.v_proj.bias", "attn_v.bias"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
};
constexpr NamePair kLlamaMlp[] = {
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
};

// Gemma's post_attention_layernorm is the norm after attention, not the FFN's.
constexpr NamePair kGemmaLayer[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"post_attention_layernorm.weight", "post_attention_norm.weight"},
    {"pre_feedforward_layernorm.weight", "ffn_norm.weight"},
    {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
};

// Phi-3's fused matrices keep their row order: [q; k; v] and [gate; up].
constexpr NamePair kPhi3Layer[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"self_attn.qkv_proj.weight", "attn_qkv.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"mlp.gate_up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
};

// Mixtral: the llama attention with a router and experts in place of the MLP.
constexpr NamePair kMixtralRouter[] = {
    {"block_sparse_moe.gate.weight", "ffn_gate_inp.weight"},
};
constexpr NamePair kMixtralExperts[] = {
    {"block_sparse_moe.experts.*.w1.weight", "ffn_gate_exps.weight"},
    {"block_sparse_moe.experts.*.w2.weight", "ffn_down_exps.weight"},
    {"block_sparse_moe.experts.*.w3.weight", "ffn_up_exps.weight"},
};

// Qwen2-MoE / Qwen3-MoE: the qwen attention (biases or q/k norms) with a
// router, experts and (Qwen2-MoE) a shared expert behind a sigmoid gate.
constexpr NamePair kQwenMoeRouter[] = {
    {"mlp.gate.weight", "ffn_gate_inp.weight"},
    {"mlp.shared_expert_gate.weight", "ffn_gate_inp_shexp.weight"},
    {"mlp.shared_expert.gate_proj.weight", "ffn_gate_shexp.weight"},
    {"mlp.shared_expert.up_proj.weight", "ffn_up_shexp.weight"},
    {"mlp.shared_expert.down_proj.weight", "ffn_down_shexp.weight"},
};
constexpr NamePair kQwenMoeExperts[] = {
    {"mlp.experts.*.gate_proj.weight", "ffn_gate_exps.weight"},
    {"mlp.experts.*.up_proj.weight", "ffn_up_exps.weight"},
    {"mlp.experts.*.down_proj.weight", "ffn_down_exps.weight"},
};

constexpr Family kFamilies[] = {
    {"llama", "LlamaForCausalLM", "llama", "hidden_act", "silu", kLlamaAttention, kLlamaMlp, true, false, false, {},
     nullptr, false},
    {"mistral", "MistralForCausalLM", "llama", "hidden_act", "silu", kLlamaAttention, kLlamaMlp, true, false, true, {},
     nullptr, false},
    {"qwen2", "Qwen2ForCausalLM", "qwen2", "hidden_act", "silu", kLlamaAttention, kLlamaMlp, false, false, false, {},
     nullptr, false},
    {"qwen3", "Qwen3ForCausalLM", "qwen3", "hidden_act", "silu", kLlamaAttention, kLlamaMlp, false, false, false, {},
     nullptr, false},
    {"gemma2", "Gemma2ForCausalLM", "gemma2", "hidden_activation", "gelu_pytorch_tanh", kGemmaLayer, {}, false, true,
     true, {}, nullptr, false},
    {"gemma3_text", "Gemma3ForCausalLM", "gemma3", "hidden_activation", "gelu_pytorch_tanh", kGemmaLayer, {}, false,
     true, true, {}, nullptr, false},
    {"phi3", "Phi3ForCausalLM", "phi3", "hidden_act", "silu", kPhi3Layer, {}, false, false, true, {}, nullptr, false},
    {"mixtral", "MixtralForCausalLM", "llama", "hidden_act", "silu", kLlamaAttention, kMixtralRouter, true, false, true,
     kMixtralExperts, "num_local_experts", true},
    {"qwen2_moe", "Qwen2MoeForCausalLM", "qwen2moe", "hidden_act", "silu", kLlamaAttention, kQwenMoeRouter, false,
     false, false, kQwenMoeExperts, "num_experts", false},
    {"qwen3_moe", "Qwen3MoeForCausalLM", "qwen3moe", "hidden_act", "silu", kLlamaAttention, kQwenMoeRouter, false,
     false, false, kQwenMoeExperts, "num_experts", true},
};

// Hyperparameters that are one number in both formats (GGUF key after "<arch>.").
struct ConfigKey {
  const char* hf;
  const char* gguf;
  bool is_float;
};
constexpr ConfigKey kConfigKeys[] = {
    {"max_position_embeddings", "context_length", false},
    {"hidden_size", "embedding_length", false},
    {"num_hidden_layers", "block_count", false},
    {"intermediate_size", "feed_forward_length", false},
    {"num_attention_heads", "attention.head_count", false},
    {"num_key_value_heads", "attention.head_count_kv", false},
    {"rms_norm_eps", "attention.layer_norm_rms_epsilon", true},
    {"rope_theta", "rope.freq_base", true},
    {"attn_logit_softcapping", "attn_logit_softcapping", true},
    {"final_logit_softcapping", "final_logit_softcapping", true},
    {"rope_local_base_freq", "rope.freq_base_swa", true},
    {"sliding_window_pattern", "attention.sliding_window_pattern", false},
    {"num_experts_per_tok", "expert_used_count", false},
    {"moe_intermediate_size", "expert_feed_forward_length", false},
    {"shared_expert_intermediate_size", "expert_shared_feed_forward_length", false},
};

// The one list of config.json keys that do not change what the model
// computes, and why.
struct IgnoredKey {
  const char* key;
  const char* why;
};
constexpr IgnoredKey kIgnoredKeys[] = {
    {"architectures", "the family comes from model_type"},
    {"torch_dtype", "each tensor carries its own type"},
    {"dtype", "each tensor carries its own type"},
    {"transformers_version", "descriptive"},
    {"_name_or_path", "descriptive"},
    {"bos_token_id", "the tokenizer's (tokenizer_config.json)"},
    {"eos_token_id", "the tokenizer's (tokenizer_config.json)"},
    {"pad_token_id", "the tokenizer's (tokenizer_config.json)"},
    {"use_cache", "a transformers runtime option"},
    {"cache_implementation", "a transformers runtime option"},
    {"initializer_range", "training only"},
    {"attention_dropout", "training only"},
    {"embd_pdrop", "training only"},
    {"resid_pdrop", "training only"},
    {"pretraining_tp", "how training sliced the matrices; the product is the same"},
    {"max_window_layers", "used only with use_sliding_window, which is checked"},
    {"auto_map", "remote-code class names; the family comes from model_type"},
    {"router_aux_loss_coef", "training only (the load-balancing loss)"},
    {"output_router_logits", "training only (the load-balancing loss)"},
    {"router_jitter_noise", "training only"},
};

const IgnoredKey* ignored(std::string_view key) {
  for (const IgnoredKey& k : kIgnoredKeys) {
    if (key == k.key) return &k;
  }
  return nullptr;
}

gguf::Value u32_value(uint64_t v) {
  gguf::Value x;
  x.type = gguf::ValueType::kU32;
  x.u = v;
  return x;
}
gguf::Value f32_value(double v) {
  gguf::Value x;
  x.type = gguf::ValueType::kF32;
  x.f = static_cast<double>(static_cast<float>(v));
  return x;
}

// config.json's keys, each one read marked used; JSON null reads as absent.
class Config {
 public:
  Config(const json& j, const std::string& where) : j_(j), where_(where) {}

  const json* find(const std::string& key) {
    used_.insert(key);
    const auto it = j_.find(key);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }
  uint64_t uint(const std::string& key, const json& v) const {
    if (!v.is_number_unsigned() || v.get<uint64_t>() > (uint64_t{1} << 32)) bad(key, v, "an integer in 0..2^32");
    return v.get<uint64_t>();
  }
  double number(const std::string& key, const json& v) const {
    if (!v.is_number()) bad(key, v, "a number");
    return v.get<double>();
  }
  bool flag(const std::string& key, bool fallback) {
    const json* v = find(key);
    if (v == nullptr) return fallback;
    if (!v->is_boolean()) bad(key, *v, "true or false");
    return v->get<bool>();
  }
  // A key whose value Tessera's model fixes: absent, or this value.
  void expect(const std::string& key, const json& want, std::string_view why) {
    const json* v = find(key);
    if (v != nullptr && *v != want) {
      fail(ErrorCode::kCorruptFile, "{}: '{}' = {} is not supported ({})", where_, key, v->dump(), why);
    }
  }
  [[noreturn]] void bad(const std::string& key, const json& v, std::string_view want) const {
    fail(ErrorCode::kCorruptFile, "{}: '{}' = {} is not {}", where_, key, v.dump(), want);
  }
  // Throws for the first key neither read nor ignorable.
  void finish(const Family& fam) const {
    for (const auto& [key, value] : j_.items()) {
      if (used_.count(key) == 0 && ignored(key) == nullptr) {
        fail(ErrorCode::kCorruptFile, "{}: key '{}' is not supported by Tessera's '{}' model (it may change what "
             "the model computes)", where_, key, fam.model_type);
      }
    }
  }
  const std::string& where() const { return where_; }

 private:
  const json& j_;
  const std::string& where_;
  std::set<std::string> used_;
};

// Gemma's query_pre_attn_scalar as Tessera derives it (model/arch/gemma2.cc,
// gemma3.cc: llama.cpp's rule, n_embd / n_head on the 27B models, whose layer
// counts these are, else head_dim).
double gemma_query_scalar(const ModelConfig& m, std::string_view arch) {
  const int64_t n_layer_27b = arch == "gemma2" ? 46 : 62;
  return static_cast<double>(m.n_layer == n_layer_27b ? m.n_embd / m.n_head : m.head_dim);
}

// HF's llama3 rope_scaling that gives exactly these rope_freqs: the factor
// is the largest divisor; the original context is solved from a pair in the
// smooth band (or Llama 3's 8192), and the result is checked by recomputing.
json llama3_scaling_of(const gguf::File& f, const gguf::TensorInfo& t, const ModelConfig& m) {
  TESSERA_CHECK(t.type == DType::kF32 && t.ne[0] == m.n_rot / 2, kInvalidArgument, "{}: rope_freqs.weight is not "
                "{} F32 values", f.path(), m.n_rot / 2);
  std::vector<float> v(static_cast<size_t>(t.ne[0]));
  std::memcpy(v.data(), t.data, v.size() * sizeof(float));
  const float factor = *std::max_element(v.begin(), v.end());
  std::vector<int64_t> candidates = {8192};
  for (size_t i = 0; i < v.size(); ++i) {
    if (!(v[i] > 1.0f && v[i] < factor)) continue;
    const double freq = std::pow(static_cast<double>(m.rope_freq_base), -2.0 * static_cast<double>(i) / static_cast<double>(m.n_rot));
    const double smooth = (1.0 / v[i] - 1.0 / factor) / (1.0 - 1.0 / factor);
    candidates.push_back(std::llround(2.0 * M_PI / freq * (1.0 + 3.0 * smooth)));
  }
  for (int64_t orig : candidates) {
    if (orig > 0 && llama3_rope_factors(m.n_rot, m.rope_freq_base, factor, orig) == v) {
      return {{"rope_type", "llama3"}, {"factor", factor}, {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
              {"original_max_position_embeddings", orig}};
    }
  }
  fail(ErrorCode::kInvalidArgument, "{}: rope_freqs.weight is not a llama3 rope_scaling HF can express", f.path());
}

// A mixture's expert count (its family's key), and what Tessera fixes per
// architecture as llama.cpp does: every layer a mixture, renormalised top-k
// or not.
void translate_moe(Config& c, const Family& fam, const std::string& p, TranslatedConfig& out) {
  const json* v = c.find(fam.expert_count_key);
  TESSERA_CHECK(v != nullptr, kCorruptFile, "{}: missing '{}' ({} is a mixture of experts)", c.where(),
                fam.expert_count_key, fam.model_type);
  out.metadata.emplace_back(p + "expert_count", u32_value(c.uint(fam.expert_count_key, *v)));
  c.expect("norm_topk_prob", fam.norm_topk_prob, "fixed for this architecture, as in llama.cpp");
  c.expect("decoder_sparse_step", 1, "every layer is a mixture");
  c.expect("mlp_only_layers", json::array(), "every layer is a mixture");
}

// rope_scaling: linear and YaRN as metadata, Llama 3's as rope_freqs.weight,
// Phi-3's LongRoPE as its factor tensors.
void translate_rope_scaling(Config& c, const Family& fam, const std::string& p, int64_t n_rot, double base,
                            uint64_t n_ctx, TranslatedConfig& out) {
  const json* orig_top = c.find("original_max_position_embeddings");  // Phi-3 keeps it here
  const json* rs = c.find("rope_scaling");
  std::string type = "default";
  if (rs != nullptr) {
    if (!rs->is_object()) c.bad("rope_scaling", *rs, "an object");
    type = rs->value("rope_type", rs->value("type", std::string("default")));
  }
  const std::string where = c.where() + ": rope_scaling";
  auto num = [&](const char* key, double fallback) {
    const auto it = rs->find(key);
    if (it == rs->end() || it->is_null()) return fallback;
    if (!it->is_number()) fail(ErrorCode::kCorruptFile, "{}.{} = {} is not a number", where, key, it->dump());
    return it->get<double>();
  };
  auto check_keys = [&](std::initializer_list<std::string_view> known) {
    for (const auto& [key, value] : rs->items()) {
      bool ok = key == "rope_type" || key == "type";
      for (std::string_view k : known) ok = ok || key == k;
      if (!ok) fail(ErrorCode::kCorruptFile, "{}.{} is not supported for type '{}'", where, key, type);
    }
  };
  if (orig_top != nullptr) {
    out.metadata.emplace_back(p + "rope.scaling.original_context_length",
                              u32_value(c.uint("original_max_position_embeddings", *orig_top)));
  }
  if (type == "default") return;
  if (type == "linear") {
    check_keys({"factor"});
    out.metadata.emplace_back(p + "rope.scaling.type", string_value("linear"));
    out.metadata.emplace_back(p + "rope.scaling.factor", f32_value(num("factor", 1.0)));
  } else if (type == "yarn") {
    check_keys({"factor", "original_max_position_embeddings", "beta_fast", "beta_slow"});
    out.metadata.emplace_back(p + "rope.scaling.type", string_value("yarn"));
    out.metadata.emplace_back(p + "rope.scaling.factor", f32_value(num("factor", 1.0)));
    out.metadata.emplace_back(p + "rope.scaling.yarn_beta_fast", f32_value(num("beta_fast", 32.0)));
    out.metadata.emplace_back(p + "rope.scaling.yarn_beta_slow", f32_value(num("beta_slow", 1.0)));
    if (orig_top == nullptr && rs->contains("original_max_position_embeddings")) {
      out.metadata.emplace_back(p + "rope.scaling.original_context_length",
                                u32_value(static_cast<uint64_t>(num("original_max_position_embeddings", 0))));
    }
  } else if (type == "llama3" && fam.permute_qk) {
    check_keys({"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"});
    out.vectors.emplace_back("rope_freqs.weight",
                             llama3_rope_factors(n_rot, static_cast<float>(base), static_cast<float>(num("factor", 8.0)),
                                                 static_cast<int64_t>(num("original_max_position_embeddings", 8192)),
                                                 num("low_freq_factor", 1.0), num("high_freq_factor", 4.0)));
  } else if ((type == "longrope" || type == "su") && std::string_view(fam.arch) == "phi3") {
    check_keys({"short_factor", "long_factor"});
    TESSERA_CHECK(orig_top != nullptr, kCorruptFile, "{}: longrope needs original_max_position_embeddings", c.where());
    const double orig = static_cast<double>(orig_top->get<uint64_t>());
    const double scale = static_cast<double>(n_ctx) / orig;
    out.metadata.emplace_back(p + "rope.scaling.attn_factor",
                              f32_value(scale <= 1.0 ? 1.0 : std::sqrt(1.0 + std::log(scale) / std::log(orig))));
    for (const char* key : {"short_factor", "long_factor"}) {
      const auto it = rs->find(key);
      if (it == rs->end() || !it->is_array() || it->size() != static_cast<size_t>(n_rot / 2)) {
        fail(ErrorCode::kCorruptFile, "{}.{} must be a list of {} numbers", where, key, n_rot / 2);
      }
      std::vector<float> v;
      for (const json& x : *it) {
        if (!x.is_number()) fail(ErrorCode::kCorruptFile, "{}.{} holds {}, not a number", where, key, x.dump());
        v.push_back(x.get<float>());
      }
      out.vectors.emplace_back(key[0] == 's' ? "rope_factors_short.weight" : "rope_factors_long.weight", std::move(v));
    }
  } else {
    fail(ErrorCode::kCorruptFile, "{}: rope_scaling type '{}' is not supported for '{}' (supported: linear, yarn{})",
         c.where(), type, fam.model_type,
         fam.permute_qk ? ", llama3" : std::string_view(fam.arch) == "phi3" ? ", longrope" : "");
  }
}

}  // namespace

gguf::Value string_value(std::string v) {
  gguf::Value x;
  x.type = gguf::ValueType::kString;
  x.s = std::move(v);
  return x;
}

const Family& family_by_model_type(std::string_view model_type, const std::string& where) {
  std::string known;
  for (const Family& f : kFamilies) {
    if (model_type == f.model_type) return f;
    known += (known.empty() ? "" : ", ") + std::string(f.model_type);
  }
  fail(ErrorCode::kCorruptFile, "{}: model_type '{}' is not supported (supported: {})", where, model_type, known);
}

const Family& family_for_export(const gguf::File& f) {
  const std::string arch = f.get_string("general.architecture");
  const bool window = f.has(arch + ".attention.sliding_window");
  const bool moe = f.has(arch + ".expert_count");
  for (const Family& fam : kFamilies) {
    if (arch != fam.arch || moe != !fam.expert_names.empty()) continue;
    if (arch != "llama" || moe || fam.window == window) return fam;
  }
  fail(ErrorCode::kInvalidArgument, "{}: architecture '{}' has no Hugging Face export", f.path(), arch);
}

namespace {

// "model.layers.N." -> N and the rest; nullopt when hf is not a layer's tensor.
std::optional<std::pair<std::string_view, std::string_view>> split_layer(std::string_view hf) {
  constexpr std::string_view kLayers = "model.layers.";
  if (hf.substr(0, kLayers.size()) != kLayers) return std::nullopt;
  const size_t dot = hf.find('.', kLayers.size());
  if (dot == std::string_view::npos) return std::nullopt;
  const std::string_view index = hf.substr(kLayers.size(), dot - kLayers.size());
  if (index.empty() || index.size() > 6 || index.find_first_not_of("0123456789") != std::string_view::npos) {
    return std::nullopt;
  }
  return std::make_pair(index, hf.substr(dot + 1));
}

}  // namespace

std::string to_gguf_name(const Family& fam, std::string_view hf) {
  for (const NamePair& n : kGlobalNames) {
    if (hf == n.hf) return n.gguf;
  }
  const auto layer = split_layer(hf);
  if (!layer) return "";
  for (std::span<const NamePair> names : {fam.layer_names, fam.ffn_names}) {
    for (const NamePair& n : names) {
      if (layer->second == n.hf) return fmt::format("blk.{}.{}", layer->first, n.gguf);
    }
  }
  return "";
}

ExpertName to_gguf_expert_name(const Family& fam, std::string_view hf) {
  const auto layer = split_layer(hf);
  if (!layer) return {};
  const std::string_view rest = layer->second;
  for (const NamePair& n : fam.expert_names) {
    const std::string_view pattern = n.hf;
    const size_t star = pattern.find('*');
    const std::string_view head = pattern.substr(0, star), tail = pattern.substr(star + 1);
    if (rest.size() <= head.size() + tail.size() || rest.substr(0, head.size()) != head ||
        rest.substr(rest.size() - tail.size()) != tail) {
      continue;
    }
    const std::string_view digits = rest.substr(head.size(), rest.size() - head.size() - tail.size());
    if (digits.size() > 6 || digits.find_first_not_of("0123456789") != std::string_view::npos) continue;
    return {fmt::format("blk.{}.{}", layer->first, n.gguf), std::stoll(std::string(digits))};
  }
  return {};
}

std::string to_hf_expert_name(const Family& fam, std::string_view gguf_name, int64_t expert) {
  if (gguf_name.substr(0, 4) != "blk.") return "";
  const size_t dot = gguf_name.find('.', 4);
  if (dot == std::string_view::npos) return "";
  const std::string_view rest = gguf_name.substr(dot + 1);
  for (const NamePair& n : fam.expert_names) {
    if (rest != n.gguf) continue;
    std::string hf = n.hf;
    hf.replace(hf.find('*'), 1, std::to_string(expert));
    return fmt::format("model.layers.{}.{}", gguf_name.substr(4, dot - 4), hf);
  }
  return "";
}

std::string to_hf_name(const Family& fam, std::string_view gguf_name) {
  for (const NamePair& n : kGlobalNames) {
    if (gguf_name == n.gguf) return n.hf;
  }
  if (gguf_name.substr(0, 4) != "blk.") return "";
  const size_t dot = gguf_name.find('.', 4);
  if (dot == std::string_view::npos) return "";
  const std::string_view rest = gguf_name.substr(dot + 1);
  for (std::span<const NamePair> names : {fam.layer_names, fam.ffn_names}) {
    for (const NamePair& n : names) {
      if (rest == n.gguf) return fmt::format("model.layers.{}.{}", gguf_name.substr(4, dot - 4), n.hf);
    }
  }
  return "";
}

TranslatedConfig translate_config(const json& j, const Family& fam, const std::string& where) {
  TESSERA_CHECK(j.is_object(), kCorruptFile, "{}: not a JSON object", where);
  Config c(j, where);
  c.find("model_type");
  TranslatedConfig out;
  const std::string p = std::string(fam.arch) + ".";
  out.metadata.emplace_back("general.architecture", string_value(fam.arch));
  std::map<std::string, double> number;  // what the translation below needs, by HF key
  for (const ConfigKey& k : kConfigKeys) {
    const json* v = c.find(k.hf);
    if (v == nullptr) continue;
    const double x = k.is_float ? c.number(k.hf, *v) : static_cast<double>(c.uint(k.hf, *v));
    number[k.hf] = x;
    out.metadata.emplace_back(p + k.gguf, k.is_float ? f32_value(x) : u32_value(static_cast<uint64_t>(x)));
  }
  for (const char* key : {"hidden_size", "num_hidden_layers", "num_attention_heads"}) {
    TESSERA_CHECK(number.count(key) && number[key] > 0, kCorruptFile, "{}: missing or zero '{}'", where, key);
  }
  TESSERA_CHECK(number.count("max_position_embeddings"), kCorruptFile, "{}: missing 'max_position_embeddings'", where);
  out.n_head = static_cast<int64_t>(number["num_attention_heads"]);
  out.n_head_kv = number.count("num_key_value_heads") ? static_cast<int64_t>(number["num_key_value_heads"]) : out.n_head;
  TESSERA_CHECK(out.n_head_kv > 0, kCorruptFile, "{}: num_key_value_heads is 0", where);
  int64_t head_dim = static_cast<int64_t>(number["hidden_size"]) / out.n_head;
  if (const json* v = c.find("head_dim")) {
    head_dim = static_cast<int64_t>(c.uint("head_dim", *v));
    out.metadata.emplace_back(p + "attention.key_length", u32_value(static_cast<uint64_t>(head_dim)));
    out.metadata.emplace_back(p + "attention.value_length", u32_value(static_cast<uint64_t>(head_dim)));
  }
  int64_t n_rot = head_dim;
  if (const json* v = c.find("partial_rotary_factor")) {
    TESSERA_CHECK(std::string_view(fam.arch) == "phi3", kCorruptFile, "{}: 'partial_rotary_factor' is not supported "
                  "for '{}'", where, fam.model_type);
    n_rot = static_cast<int64_t>(std::llround(static_cast<double>(head_dim) * c.number("partial_rotary_factor", *v)));
  }
  out.metadata.emplace_back(p + "rope.dimension_count", u32_value(static_cast<uint64_t>(std::max<int64_t>(n_rot, 0))));
  const double base = number.count("rope_theta") ? number["rope_theta"] : 10000.0;
  translate_rope_scaling(c, fam, p, n_rot, base, static_cast<uint64_t>(number["max_position_embeddings"]), out);

  // A sliding window: the model's own where the family has one; Qwen's only
  // when enabled, which Tessera does not support.
  if (fam.window) {
    const json* v = c.find("sliding_window");
    if (v != nullptr || std::string_view(fam.arch) == "phi3") {
      out.metadata.emplace_back(p + "attention.sliding_window", u32_value(v ? c.uint("sliding_window", *v) : 0));
    }
  } else if (std::string_view(fam.arch).substr(0, 4) == "qwen") {  // Qwen's window is off unless enabled
    c.find("sliding_window");
    c.expect("use_sliding_window", false, "sliding-window layers of this family");
  }
  if (const json* v = c.find("layer_types")) {  // Gemma 3: must be the pattern Tessera derives
    const uint64_t period = number.count("sliding_window_pattern") ? static_cast<uint64_t>(number["sliding_window_pattern"]) : 6;
    TESSERA_CHECK(v->is_array(), kCorruptFile, "{}: 'layer_types' is not a list", where);
    for (size_t il = 0; il < v->size(); ++il) {
      const bool local = period > 0 && il % period < period - 1;
      if ((*v)[il] != (local ? "sliding_attention" : "full_attention")) {
        fail(ErrorCode::kCorruptFile, "{}: layer_types[{}] = {} differs from the every-{}th-layer-global pattern "
             "Tessera supports", where, il, (*v)[il].dump(), period);
      }
    }
  }
  if (const json* v = c.find("query_pre_attn_scalar")) {
    // Gemma: queries scaled by 1/sqrt(query_pre_attn_scalar). llama.cpp
    // derives it from the shape (GGUF has no key for it); where the config
    // says otherwise the scale is written as <arch>.attention.scale.
    TESSERA_CHECK(fam.norm_plus_one, kCorruptFile, "{}: 'query_pre_attn_scalar' is Gemma's, not {}'s", where,
                  fam.model_type);
    ModelConfig m;
    m.n_embd = static_cast<int64_t>(number["hidden_size"]);
    m.n_head = out.n_head;
    m.n_layer = static_cast<int64_t>(number["num_hidden_layers"]);
    m.head_dim = head_dim;
    const double scalar = c.number("query_pre_attn_scalar", *v);
    TESSERA_CHECK(scalar >= 1.0 && scalar <= 1e6, kCorruptFile, "{}: 'query_pre_attn_scalar' = {} is out of range",
                  where, v->dump());
    if (scalar != gemma_query_scalar(m, fam.arch)) {
      out.metadata.emplace_back(p + "attention.scale", f32_value(1.0 / std::sqrt(scalar)));
    }
  }
  c.expect(fam.act_key, fam.act, "Tessera's model uses this activation");
  c.expect(std::string_view(fam.act_key) == "hidden_act" ? "hidden_activation" : "hidden_act", fam.act,
           "Tessera's model uses this activation");
  if (!fam.expert_names.empty()) translate_moe(c, fam, p, out);
  c.expect("attention_bias", false, "biases only on Qwen2's q/k/v");
  c.expect("mlp_bias", false, "no FFN biases");
  // Gemma ties by default (its classes), the others do not.
  out.tied = c.flag("tie_word_embeddings", fam.norm_plus_one);
  if (const json* v = c.find("vocab_size")) out.n_vocab = static_cast<int64_t>(c.uint("vocab_size", *v));
  c.finish(fam);
  return out;
}

json export_config(const gguf::File& f, const Family& fam) {
  const std::string p = std::string(fam.arch) + ".";
  json j = json::object();
  j["architectures"] = json::array({fam.hf_class});
  j["model_type"] = fam.model_type;
  for (const ConfigKey& k : kConfigKeys) {
    if (!f.has(p + k.gguf)) continue;
    if (k.is_float) {
      j[k.hf] = static_cast<float>(f.get_float(p + k.gguf));
    } else {
      j[k.hf] = f.get_uint(p + k.gguf);
    }
  }
  const ModelConfig m = read_config(f, {.moe = !fam.expert_names.empty(), .attention_scale = true});
  j["head_dim"] = m.head_dim;
  if (m.n_rot != m.head_dim) {
    TESSERA_CHECK(std::string_view(fam.arch) == "phi3", kInvalidArgument, "{}: {} rotated dims of {} per head: HF's "
                  "'{}' rotates whole heads", f.path(), m.n_rot, m.head_dim, fam.model_type);
    j["partial_rotary_factor"] = static_cast<double>(m.n_rot) / static_cast<double>(m.head_dim);
  }
  j["vocab_size"] = f.tensor("token_embd.weight").ne[1];
  j["tie_word_embeddings"] = f.find_tensor("output.weight") == nullptr;
  j[fam.act_key] = fam.act;
  if (fam.window && f.has(p + "attention.sliding_window")) {
    const uint64_t w = f.get_uint(p + "attention.sliding_window");
    j["sliding_window"] = w == 0 ? json() : json(w);
  }
  if (fam.norm_plus_one) {
    const std::string scale_key = p + "attention.scale";
    j["query_pre_attn_scalar"] = f.has(scale_key) ? std::round(1.0 / std::pow(f.get_float(scale_key), 2.0))
                                                  : gemma_query_scalar(m, fam.arch);
  }
  if (!fam.expert_names.empty()) {
    j[fam.expert_count_key] = m.n_expert;
    j["norm_topk_prob"] = fam.norm_topk_prob;
  }
  if (m.rope_scaling == RopeScaling::kLinear && m.rope_freq_scale != 1.0f && f.has(p + "rope.scaling.type")) {
    j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", static_cast<float>(f.get_float(p + "rope.scaling.factor"))}};
  } else if (m.rope_scaling == RopeScaling::kYarn) {
    j["rope_scaling"] = {{"rope_type", "yarn"},
                         {"factor", static_cast<float>(f.get_float(p + "rope.scaling.factor"))},
                         {"beta_fast", m.yarn_beta_fast},
                         {"beta_slow", m.yarn_beta_slow},
                         {"original_max_position_embeddings", m.yarn_orig_ctx}};
  }
  if (const gguf::TensorInfo* t = f.find_tensor("rope_freqs.weight")) {
    j["rope_scaling"] = llama3_scaling_of(f, *t, m);
  }
  if (const gguf::TensorInfo* s = f.find_tensor("rope_factors_short.weight")) {
    const gguf::TensorInfo& l = f.tensor("rope_factors_long.weight");
    std::vector<float> sv(static_cast<size_t>(s->ne[0])), lv(static_cast<size_t>(l.ne[0]));
    std::memcpy(sv.data(), s->data, sv.size() * 4);
    std::memcpy(lv.data(), l.data, lv.size() * 4);
    j["rope_scaling"] = {{"rope_type", "longrope"}, {"short_factor", sv}, {"long_factor", lv}};
    j["original_max_position_embeddings"] = m.yarn_orig_ctx;
  }
  return j;
}

}  // namespace tessera::hf
