#include "format/model_config.h"

#include <cmath>

#include "core/error.h"

namespace tessera {
namespace {

// The file's metadata, with every key read reported to `used`.
class Keys {
 public:
  Keys(const gguf::File& f, const std::function<void(const std::string&)>& used) : f_(f), used_(used) {}

  bool has(const std::string& key) const {
    if (!f_.has(key)) return false;
    if (used_) used_(key);
    return true;
  }

  // A window length: 0 (or an absent key) means none, as in llama.cpp.
  int64_t window(const std::string& key) const {
    if (!has(key)) return 0;
    return f_.get_uint(key) == 0 ? 0 : positive(key, int64_t{1} << 24);
  }

  float softcap(const std::string& key, float fallback) const {
    const double x = number_or(key, fallback);
    if (!(x >= 0.0 && x <= 1e6)) fail(ErrorCode::kCorruptFile, "{}: '{}' = {} is out of range", f_.path(), key, x);
    return static_cast<float>(x);
  }

  int64_t positive(const std::string& key, int64_t limit) const {
    has(key);
    const gguf::Value* v = f_.find(key);
    if (v != nullptr && v->type == gguf::ValueType::kArray) {
      fail(ErrorCode::kCorruptFile, "{}: '{}' varies per layer, which Tessera does not support", f_.path(), key);
    }
    const uint64_t x = f_.get_uint(key);
    if (x == 0 || x > static_cast<uint64_t>(limit)) {
      fail(ErrorCode::kCorruptFile, "{}: '{}' = {} is out of range (1..{})", f_.path(), key, x, limit);
    }
    return static_cast<int64_t>(x);
  }

  double number_or(const std::string& key, double fallback) const {
    return has(key) ? f_.get_float(key) : fallback;
  }

  std::string string_or(const std::string& key, const std::string& fallback) const {
    return has(key) ? f_.get_string(key) : fallback;
  }

 private:
  const gguf::File& f_;
  const std::function<void(const std::string&)>& used_;
};

void read_rope(const gguf::File& f, const Keys& k, const std::string& p, ModelConfig& c) {
  c.n_rot = k.has(p + "rope.dimension_count") ? k.positive(p + "rope.dimension_count", c.head_dim) : c.head_dim;
  if (c.n_rot % 2 != 0) fail(ErrorCode::kCorruptFile, "{}: rope dimension count {} is odd", f.path(), c.n_rot);
  c.rope_freq_base = static_cast<float>(k.number_or(p + "rope.freq_base", 10000.0));
  if (!(c.rope_freq_base > 1.0f)) fail(ErrorCode::kCorruptFile, "{}: rope.freq_base {} is out of range", f.path(), c.rope_freq_base);
  // As llama.cpp: no type means linear; the factor (or the older
  // rope.scale_linear) divides every angle for linear and YaRN; "none" never scales.
  const std::string scaling = k.string_or(p + "rope.scaling.type", "linear");
  if (scaling == "none") {
    c.rope_scaling = RopeScaling::kNone;
  } else if (scaling == "linear") {
    c.rope_scaling = RopeScaling::kLinear;
  } else if (scaling == "yarn") {
    c.rope_scaling = RopeScaling::kYarn;
  } else {
    fail(ErrorCode::kCorruptFile, "{}: rope scaling '{}' ({}rope.scaling.type) is not supported (supported: none, "
         "linear, yarn; Llama 3's scaling comes as the tensor rope_freqs.weight)", f.path(), scaling, p);
  }
  const std::string factor_key = k.has(p + "rope.scaling.factor") ? p + "rope.scaling.factor" : p + "rope.scale_linear";
  const double factor = k.number_or(factor_key, 1.0);
  if (!(factor >= 1.0 && factor <= 1e6) && !(factor == 0.0)) {
    fail(ErrorCode::kCorruptFile, "{}: {} {} is out of range", f.path(), factor_key, factor);
  }
  c.rope_freq_scale = c.rope_scaling == RopeScaling::kNone || factor == 0.0 ? 1.0f : static_cast<float>(1.0 / factor);
  if (c.rope_scaling == RopeScaling::kYarn) {
    c.yarn_orig_ctx = k.has(p + "rope.scaling.original_context_length")
                          ? k.positive(p + "rope.scaling.original_context_length", int64_t{1} << 24)
                          : c.n_ctx_train;
    c.yarn_beta_fast = static_cast<float>(k.number_or(p + "rope.scaling.yarn_beta_fast", 32.0));
    c.yarn_beta_slow = static_cast<float>(k.number_or(p + "rope.scaling.yarn_beta_slow", 1.0));
    if (!(c.yarn_beta_fast > 0.0f && c.yarn_beta_slow > 0.0f)) {
      fail(ErrorCode::kCorruptFile, "{}: YaRN betas {} / {} must be positive", f.path(), c.yarn_beta_fast, c.yarn_beta_slow);
    }
  }
  // A factor on cos and sin whatever the scaling (llama.cpp multiplies it
  // into every rotation; Phi-3's LongRoPE converter writes it).
  c.rope_attn_factor = static_cast<float>(k.number_or(p + "rope.scaling.attn_factor", 1.0));
  if (!(c.rope_attn_factor > 0.0f && c.rope_attn_factor < 100.0f)) {
    fail(ErrorCode::kCorruptFile, "{}: rope.scaling.attn_factor {} is out of range", f.path(), c.rope_attn_factor);
  }
  // The original context matters to YaRN and to Phi-3's LongRoPE factors
  // only (as in llama.cpp); the others read it without effect.
  if (c.rope_scaling != RopeScaling::kYarn) {
    c.yarn_orig_ctx = k.has(p + "rope.scaling.original_context_length")
                          ? k.positive(p + "rope.scaling.original_context_length", int64_t{1} << 24)
                          : c.n_ctx_train;
  }
  k.has(p + "rope.scaling.finetuned");
}

// Local (sliding-window) layers interleaved with global ones, as llama.cpp's
// gemma2 / gemma3 read them.
void read_interleaved_swa(const gguf::File& f, const Keys& k, const std::string& p, const ConfigOptions& o,
                          ModelConfig& c) {
  const std::string window_key = p + "attention.sliding_window";
  c.swa_window = f.has(window_key) ? k.window(window_key) : o.swa_window;
  if (c.swa_window == 0) return;  // every layer global
  const std::string period_key = p + "attention.sliding_window_pattern";
  c.swa_period = k.has(period_key) ? k.positive(period_key, 1024) : o.swa_period;
  const bool own = o.swa_rope_base > 0.0f;
  c.rope_freq_base_swa = static_cast<float>(k.number_or(p + "rope.freq_base_swa", own ? o.swa_rope_base : c.rope_freq_base));
  c.rope_freq_scale_swa = own ? 1.0f : c.rope_freq_scale;
  if (!(c.rope_freq_base_swa > 1.0f)) {
    fail(ErrorCode::kCorruptFile, "{}: rope.freq_base_swa {} is out of range", f.path(), c.rope_freq_base_swa);
  }
}

// Mixture-of-experts hyperparameters, as llama.cpp names them.
void read_moe(const gguf::File& f, const Keys& k, const std::string& p, const ConfigOptions& o, ModelConfig& c) {
  const std::string count_key = p + "expert_count";
  if (!f.has(count_key)) {
    if (o.moe_required) fail(ErrorCode::kCorruptFile, "{}: '{}' is missing ({} is a mixture of experts)", f.path(), count_key, c.arch);
    return;
  }
  c.n_expert = k.positive(count_key, 1 << 16);
  c.n_expert_used = k.positive(p + "expert_used_count", c.n_expert);
  const std::string ff_key = p + "expert_feed_forward_length";
  c.n_ff_exp = k.has(ff_key) ? k.positive(ff_key, 1 << 20) : c.n_ff;
  const std::string sh_key = p + "expert_shared_feed_forward_length";
  c.n_ff_shexp = k.has(sh_key) ? k.positive(sh_key, 1 << 20) : 0;
}

}  // namespace

ModelConfig read_config(const gguf::File& f, const ConfigOptions& options,
                        const std::function<void(const std::string&)>& used) {
  const Keys k(f, used);
  ModelConfig c;
  k.has("general.architecture");
  c.arch = f.get_string("general.architecture");
  c.name = k.string_or("general.name", "");
  const std::string p = c.arch + ".";
  c.n_ctx_train = k.positive(p + "context_length", int64_t{1} << 24);
  c.n_embd = k.positive(p + "embedding_length", 1 << 16);
  c.n_layer = k.positive(p + "block_count", 1024);
  c.n_ff = k.positive(p + "feed_forward_length", 1 << 20);
  c.n_head = k.positive(p + "attention.head_count", 1024);
  c.n_head_kv = k.has(p + "attention.head_count_kv") ? k.positive(p + "attention.head_count_kv", 1024) : c.n_head;
  if (c.n_head % c.n_head_kv != 0) {
    fail(ErrorCode::kCorruptFile, "{}: {} query heads is not a multiple of {} kv heads", f.path(), c.n_head, c.n_head_kv);
  }
  if (k.has(p + "attention.key_length")) {
    c.head_dim = k.positive(p + "attention.key_length", 1024);
    const int64_t vlen = k.has(p + "attention.value_length") ? k.positive(p + "attention.value_length", 1024) : c.head_dim;
    if (vlen != c.head_dim) {
      fail(ErrorCode::kCorruptFile, "{}: key length {} != value length {} is not supported", f.path(), c.head_dim, vlen);
    }
  } else {
    if (c.n_embd % c.n_head != 0) {
      fail(ErrorCode::kCorruptFile, "{}: embedding length {} is not a multiple of {} heads", f.path(), c.n_embd, c.n_head);
    }
    c.head_dim = c.n_embd / c.n_head;
  }
  c.rms_eps = static_cast<float>(k.number_or(p + "attention.layer_norm_rms_epsilon", 1e-5));
  if (!(c.rms_eps > 0.0f && c.rms_eps < 1.0f)) {
    fail(ErrorCode::kCorruptFile, "{}: rms epsilon {} is out of range", f.path(), c.rms_eps);
  }
  read_rope(f, k, p, c);
  if (options.sliding_window) c.sliding_window = k.window(p + "attention.sliding_window");
  if (options.swa_period > 0) read_interleaved_swa(f, k, p, options, c);
  if (options.softcap) c.attn_softcap = k.softcap(p + "attn_logit_softcapping", options.attn_softcap);
  if (options.softcap || options.final_softcap) {
    c.final_softcap = k.softcap(p + "final_logit_softcapping", options.final_softcap_default);
  }
  if (options.moe || options.moe_required) read_moe(f, k, p, options, c);
  if (options.attention_scale && k.has(p + "attention.scale")) {
    c.attn_scale = static_cast<float>(f.get_float(p + "attention.scale"));
    if (!(c.attn_scale > 0.0f && c.attn_scale <= 1.0f)) {
      fail(ErrorCode::kCorruptFile, "{}: '{}attention.scale' = {} is out of range (0, 1]", f.path(), p, c.attn_scale);
    }
  }
  return c;
}

std::vector<float> llama3_rope_factors(int64_t n_rot, float freq_base, float factor, int64_t orig_ctx,
                                       double low_freq_factor, double high_freq_factor) {
  // Hugging Face's rope_scaling {"rope_type": "llama3"}: wavelengths shorter
  // than orig_ctx / high_freq_factor keep their frequency, longer than
  // orig_ctx / low_freq_factor are divided by `factor`, and a smooth mix in
  // between; the file stores the divisor of each pair's frequency.
  const double low_wavelen = static_cast<double>(orig_ctx) / low_freq_factor;
  const double high_wavelen = static_cast<double>(orig_ctx) / high_freq_factor;
  std::vector<float> out;
  for (int64_t i = 0; i < n_rot / 2; ++i) {
    const double freq = 1.0 / std::pow(static_cast<double>(freq_base), 2.0 * static_cast<double>(i) / static_cast<double>(n_rot));
    const double wavelen = 2.0 * M_PI / freq;
    if (wavelen < high_wavelen) {
      out.push_back(1.0f);
    } else if (wavelen > low_wavelen) {
      out.push_back(factor);
    } else {
      const double smooth = (static_cast<double>(orig_ctx) / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
      out.push_back(static_cast<float>(1.0 / ((1.0 - smooth) / factor + smooth)));
    }
  }
  return out;
}

}  // namespace tessera
