// load_model() on files that are valid GGUF but not a valid model: a missing
// tensor, a wrong shape or type, a missing or mistyped key, inconsistent
// hyperparameters, an unknown architecture. Each must fail with an Error
// whose message names the tensor or key and what was expected.
#include <cstring>
#include <functional>
#include <map>
#include <optional>

#include "core/error.h"
#include "format/gguf.h"
#include "format/gguf_writer.h"
#include "model/model.h"
#include "model/synthetic.h"
#include "util/test_util.h"

namespace tessera {
namespace {

using gguf::Value;
using gguf::ValueType;

// A small valid model: 2 layers, dim 64, 4 heads over 2 KV heads (head dim
// 16), ff 128, 64-token vocabulary.
const std::string& base_model(const std::string& arch = "llama") {
  static std::map<std::string, std::string> paths;
  auto it = paths.find(arch);
  if (it != paths.end()) return it->second;
  SyntheticModelSpec s = preset_spec("tiny");
  s.arch = arch;
  s.n_vocab = 64;
  s.seed = 7;
  const std::string path = testing::temp_path("base-" + arch + ".gguf");
  write_synthetic_model(s, path, 1);
  return paths.emplace(arch, path).first->second;
}

// What to change when copying the base model.
struct Edit {
  std::function<bool(const std::string& key)> skip_key = [](const std::string&) { return false; };
  std::vector<std::pair<std::string, Value>> set_keys;
  std::string skip_tensor;
  std::string retensor;  // replaced by a zero tensor of new_type / new_ne
  std::optional<DType> new_type;
  std::vector<int64_t> new_ne;
  std::string add_tensor;  // an extra F32 tensor of shape add_ne, filled with ones
  std::vector<int64_t> add_ne;
};

// Single edits (designated initializers would trip -Wmissing-field-initializers).
Edit drop_tensor(const std::string& name) {
  Edit e;
  e.skip_tensor = name;
  return e;
}
Edit reshape(const std::string& name, std::vector<int64_t> ne) {
  Edit e;
  e.retensor = name;
  e.new_ne = std::move(ne);
  return e;
}
Edit retype(const std::string& name, DType type) {
  Edit e;
  e.retensor = name;
  e.new_type = type;
  return e;
}
Edit drop_key(const std::string& key) {
  Edit e;
  e.skip_key = [key](const std::string& k) { return k == key; };
  return e;
}
Edit set_key(const std::string& key, Value v) {
  Edit e;
  e.set_keys.emplace_back(key, std::move(v));
  return e;
}
Edit add_tensor(const std::string& name, std::vector<int64_t> ne) {
  Edit e;
  e.add_tensor = name;
  e.add_ne = std::move(ne);
  return e;
}

std::string rewrite(const Edit& e, const std::string& name, const std::string& arch = "llama") {
  const gguf::File src = gguf::File::open(base_model(arch));
  gguf::Writer w;
  for (const auto& [k, v] : src.metadata()) {
    if (!e.skip_key(k)) w.set_value(k, v);
  }
  for (const auto& [k, v] : e.set_keys) w.set_value(k, v);
  for (const gguf::TensorInfo& t : src.tensors()) {
    if (t.name == e.skip_tensor) continue;
    if (t.name == e.retensor) {
      std::vector<int64_t> ne = e.new_ne;
      if (ne.empty()) ne.assign(t.ne, t.ne + t.n_dims);
      w.add_tensor(t.name, e.new_type.value_or(t.type), ne, [](uint8_t* out, size_t n) { std::memset(out, 0, n); });
      continue;
    }
    w.add_tensor(t.name, t.type, std::vector<int64_t>(t.ne, t.ne + t.n_dims),
                 [&t](uint8_t* out, size_t n) { std::memcpy(out, t.data, n); });
  }
  if (!e.add_tensor.empty()) {
    w.add_tensor(e.add_tensor, DType::kF32, e.add_ne, [](uint8_t* out, size_t n) {
      for (size_t i = 0; i + 4 <= n; i += 4) {
        const float one = 1.0f;
        std::memcpy(out + i, &one, 4);
      }
    });
  }
  const std::string path = testing::temp_path(name + ".gguf");
  w.write(path);
  return path;
}

Value u32(uint32_t x) {
  Value v;
  v.type = ValueType::kU32;
  v.u = x;
  return v;
}
Value str(const std::string& x) {
  Value v;
  v.type = ValueType::kString;
  v.s = x;
  return v;
}

Value f32(float x) {
  Value v;
  v.type = ValueType::kF32;
  v.f = x;
  return v;
}

using testing::expect_load_error;

TEST(ModelLoad, UneditedCopiesLoad) {
  // The copy itself is faithful, so every failure below is the edit's.
  for (const char* arch : {"llama", "qwen2", "gemma2", "gemma3", "phi3"}) {
    const LoadedModel m = load_model(rewrite({}, std::string("copy-") + arch, arch));
    EXPECT_EQ(m.model->config().arch, arch);
    EXPECT_EQ(m.model->config().n_vocab, 64);
    EXPECT_EQ(m.model->config().n_head_kv, 2);
  }
}

TEST(ModelLoad, EveryArchitectureLoads) {
  // make-model's layouts: llama3 and mistral are llama files with
  // rope_freqs.weight / a sliding window.
  struct Want {
    const char* spec;
    const char* arch;
    int64_t window;
  };
  for (const Want& w : {Want{"llama3", "llama", 0}, Want{"mistral", "llama", 4096}, Want{"qwen3", "qwen3", 0}}) {
    const LoadedModel m = load_model(rewrite({}, std::string("copy-") + w.spec, w.spec));
    EXPECT_EQ(m.model->config().arch, w.arch);
    EXPECT_EQ(m.model->config().sliding_window, w.window);
    EXPECT_EQ(m.model->config().rope_neox, std::string(w.arch) == "qwen3");
  }
}

// Gemma 2 / 3 and Phi-3 as llama.cpp reads them: local / global layers,
// soft-caps with Gemma 2's defaults, the query scale, fused tensors.
TEST(ModelLoad, GemmaAndPhi3Hyperparameters) {
  const ModelConfig g2 = load_model(base_model("gemma2")).model->config();
  EXPECT_EQ(g2.swa_window, 4096);
  EXPECT_EQ(g2.swa_period, 2);
  EXPECT_EQ(g2.sliding_window, 0);  // not every layer: the engine keeps every block
  EXPECT_TRUE(g2.local_layer(0));
  EXPECT_FALSE(g2.local_layer(1));
  EXPECT_EQ(g2.attn_softcap, 50.0f);
  EXPECT_EQ(g2.final_softcap, 30.0f);
  EXPECT_TRUE(g2.tied_output);
  EXPECT_FLOAT_EQ(g2.attn_scale, 0.25f);  // 1/sqrt(head_dim 16)
  // Without the keys, llama.cpp's defaults.
  Edit bare = drop_key("gemma2.attn_logit_softcapping");
  bare.skip_key = [](const std::string& k) { return k.find("softcapping") != std::string::npos || k == "gemma2.attention.sliding_window"; };
  const ModelConfig g2d = load_model(rewrite(bare, "gemma2-defaults", "gemma2")).model->config();
  EXPECT_EQ(g2d.attn_softcap, 50.0f);
  EXPECT_EQ(g2d.final_softcap, 30.0f);
  EXPECT_EQ(g2d.swa_window, 4096);

  const ModelConfig g3 = load_model(base_model("gemma3")).model->config();
  EXPECT_EQ(g3.swa_window, 512);
  EXPECT_EQ(g3.swa_period, 6);
  EXPECT_EQ(g3.rope_freq_base_swa, 10000.0f);
  EXPECT_EQ(g3.rope_freq_base, 1e6f);
  EXPECT_EQ(g3.attn_softcap, 0.0f);
  EXPECT_EQ(g3.final_softcap, 0.0f);
  // No window in the file: every layer global.
  EXPECT_EQ(load_model(rewrite(drop_key("gemma3.attention.sliding_window"), "gemma3-global", "gemma3"))
                .model->config().swa_window,
            0);
  Edit base_swa = set_key("gemma3.rope.freq_base_swa", f32(20000.0f));
  base_swa.set_keys.emplace_back("gemma3.attention.sliding_window_pattern", u32(3));
  const ModelConfig g3b = load_model(rewrite(base_swa, "gemma3-base-swa", "gemma3")).model->config();
  EXPECT_EQ(g3b.rope_freq_base_swa, 20000.0f);
  EXPECT_EQ(g3b.swa_period, 3);

  const ModelConfig p3 = load_model(base_model("phi3")).model->config();
  EXPECT_EQ(p3.sliding_window, 0);  // the file says 0: none
  EXPECT_TRUE(p3.rope_neox);
  EXPECT_EQ(load_model(rewrite(set_key("phi3.attention.sliding_window", u32(8)), "phi3-swa", "phi3"))
                .model->config().sliding_window,
            8);
}

TEST(ModelLoad, MissingTensor) {
  expect_load_error(rewrite(drop_tensor("blk.1.ffn_up.weight"), "no-ffn-up"),
                    "missing tensor 'blk.1.ffn_up.weight'");
  expect_load_error(rewrite(drop_tensor("token_embd.weight"), "no-embd"), "missing tensor 'token_embd.weight'");
  expect_load_error(rewrite(drop_tensor("blk.0.attn_k.bias"), "no-k-bias", "qwen2"),
                    "missing tensor 'blk.0.attn_k.bias'");
  expect_load_error(rewrite(drop_tensor("blk.1.attn_k_norm.weight"), "no-k-norm", "qwen3"),
                    "missing tensor 'blk.1.attn_k_norm.weight'");
  expect_load_error(rewrite(drop_tensor("blk.0.attn_q_norm.weight"), "no-q-norm", "qwen3"),
                    "missing tensor 'blk.0.attn_q_norm.weight'");
  expect_load_error(rewrite(drop_tensor("blk.1.post_attention_norm.weight"), "no-post-attn-norm", "gemma2"),
                    "missing tensor 'blk.1.post_attention_norm.weight'");
  expect_load_error(rewrite(drop_tensor("blk.0.post_ffw_norm.weight"), "no-post-ffw-norm", "gemma3"),
                    "missing tensor 'blk.0.post_ffw_norm.weight'");
  expect_load_error(rewrite(drop_tensor("blk.1.attn_k_norm.weight"), "gemma3-no-k-norm", "gemma3"),
                    "missing tensor 'blk.1.attn_k_norm.weight'");
  expect_load_error(rewrite(drop_tensor("blk.0.attn_qkv.weight"), "no-qkv", "phi3"),
                    "missing tensor 'blk.0.attn_qkv.weight'");
  // LongRoPE comes as a pair of tensors.
  expect_load_error(rewrite(add_tensor("rope_factors_long.weight", {8}), "phi3-long-only", "phi3"),
                    "missing tensor 'rope_factors_short.weight'");
  // Phi-3's ffn_up holds gate and up: n_ff rows alone is not its layout.
  expect_load_error(rewrite(reshape("blk.0.ffn_up.weight", {64, 128}), "phi3-up-half", "phi3"),
                    "tensor 'blk.0.ffn_up.weight' has shape [64, 128], expected [64, 256]");
}

// A tensor the architecture does not use would change what the model
// computes if it were dropped silently: refused, named.
TEST(ModelLoad, UnusedTensor) {
  expect_load_error(rewrite(add_tensor("blk.0.attn_output.bias", {64}), "o-bias"),
                    "tensor 'blk.0.attn_output.bias' is not used by Tessera's 'llama' model");
  expect_load_error(rewrite(add_tensor("rope_freqs.weight", {8}), "qwen2-rope-freqs", "qwen2"),
                    "tensor 'rope_freqs.weight' is not used by Tessera's 'qwen2' model");
  expect_load_error(rewrite(add_tensor("blk.1.attn_q_norm.weight", {16}), "llama-q-norm"),
                    "tensor 'blk.1.attn_q_norm.weight' is not used");
  // Qwen2 with Qwen3's norms is not Qwen3.
  expect_load_error(rewrite(add_tensor("blk.0.attn_k_norm.weight", {16}), "qwen2-k-norm", "qwen2"),
                    "tensor 'blk.0.attn_k_norm.weight' is not used by Tessera's 'qwen2' model");
  // llama.cpp's gemma2 has no output matrix; phi3 has no separate gate or q.
  expect_load_error(rewrite(add_tensor("output.weight", {64, 64}), "gemma2-output", "gemma2"),
                    "tensor 'output.weight' is not used by Tessera's 'gemma2' model");
  expect_load_error(rewrite(add_tensor("blk.0.ffn_gate.weight", {64, 128}), "phi3-gate", "phi3"),
                    "tensor 'blk.0.ffn_gate.weight' is not used by Tessera's 'phi3' model");
  expect_load_error(rewrite(add_tensor("blk.0.attn_q.weight", {64, 64}), "phi3-q", "phi3"),
                    "tensor 'blk.0.attn_q.weight' is not used by Tessera's 'phi3' model");
  // Old Llama conversions' rotary inverse frequencies are in the ignored list.
  EXPECT_NO_THROW(load_model(rewrite(add_tensor("blk.0.attn_rot_embd", {8}), "rot-embd")));
}

// Metadata: descriptive keys (general.*, tokenizer.*, quantize.imatrix.*)
// are ignored; anything else the architecture does not read is refused.
TEST(ModelLoad, UnknownOrUnsupportedKey) {
  Edit ok;
  ok.set_keys = {{"general.license", str("mit")}, {"general.base_model.count", u32(1)},
                 {"quantize.imatrix.file", str("x.dat")}, {"tokenizer.chat_template", str("{{ x }}")},
                 {"split.count", u32(1)}};
  EXPECT_NO_THROW(load_model(rewrite(ok, "ignorable-keys")));
  expect_load_error(rewrite(set_key("llama.attention.scale", f32(0.5f)), "attn-scale"),
                    "metadata key 'llama.attention.scale' is not supported by Tessera's 'llama' model");
  expect_load_error(rewrite(set_key("llama.final_logit_softcapping", f32(30.0f)), "softcap"),
                    "metadata key 'llama.final_logit_softcapping' is not supported");
  expect_load_error(rewrite(set_key("qwen2.attention.sliding_window", u32(8)), "qwen2-swa", "qwen2"),
                    "metadata key 'qwen2.attention.sliding_window' is not supported by Tessera's 'qwen2' model");
  expect_load_error(rewrite(set_key("llama.rope.scaling.yarn_log_multiplier", f32(0.1f)), "yarn-log-mul"),
                    "metadata key 'llama.rope.scaling.yarn_log_multiplier' is not supported");
  expect_load_error(rewrite(set_key("split.count", u32(3)), "split3"), "'split.count' = 3");
  // Gemma 3 has no attention soft-capping; a window pattern per layer is not read.
  expect_load_error(rewrite(set_key("gemma3.attn_logit_softcapping", f32(50.0f)), "gemma3-softcap", "gemma3"),
                    "metadata key 'gemma3.attn_logit_softcapping' is not supported by Tessera's 'gemma3' model");
  expect_load_error(rewrite(set_key("phi3.rope.freq_base_swa", f32(10000.0f)), "phi3-base-swa", "phi3"),
                    "metadata key 'phi3.rope.freq_base_swa' is not supported by Tessera's 'phi3' model");
  expect_load_error(rewrite(set_key("adapter.type", str("lora")), "adapter"),
                    "metadata key 'adapter.type' is not supported");
  expect_load_error(rewrite(set_key("llama.vocab_size", u32(65)), "vocab65"),
                    "'llama.vocab_size' = 65 but token_embd.weight has 64 rows");
}

TEST(ModelLoad, RopeScaling) {
  for (const char* type : {"su", "longrope", "llama3", "dynamic"}) {
    expect_load_error(rewrite(set_key("llama.rope.scaling.type", str(type)), std::string("rope-") + type),
                      fmt::format("rope scaling '{}' (llama.rope.scaling.type) is not supported", type));
  }
  Edit yarn = set_key("llama.rope.scaling.type", str("yarn"));
  yarn.set_keys.emplace_back("llama.rope.scaling.factor", f32(4.0f));
  yarn.set_keys.emplace_back("llama.rope.scaling.original_context_length", u32(512));
  const LoadedModel m = load_model(rewrite(yarn, "yarn"));
  EXPECT_EQ(m.model->config().rope_scaling, RopeScaling::kYarn);
  EXPECT_EQ(m.model->config().rope_freq_scale, 0.25f);
  EXPECT_EQ(m.model->config().yarn_orig_ctx, 512);
  // No type: linear, as llama.cpp reads it; "none" never scales.
  EXPECT_EQ(load_model(rewrite(set_key("llama.rope.scaling.factor", f32(2.0f)), "factor-only")).model->config().rope_freq_scale,
            0.5f);
  // The original context matters to YaRN only; llama.cpp reads it and leaves linear scaling alone.
  Edit linear = set_key("llama.rope.scaling.type", str("linear"));
  linear.set_keys.emplace_back("llama.rope.scaling.original_context_length", u32(512));
  EXPECT_EQ(load_model(rewrite(linear, "linear-orig-ctx")).model->config().rope_scaling, RopeScaling::kLinear);
  // A factor on cos and sin with any scaling, as llama.cpp applies it (Phi-3's LongRoPE writes one).
  EXPECT_EQ(load_model(rewrite(set_key("llama.rope.scaling.attn_factor", f32(1.5f)), "attn-factor-linear"))
                .model->config().rope_attn_factor,
            1.5f);
  Edit none = set_key("llama.rope.scaling.type", str("none"));
  none.set_keys.emplace_back("llama.rope.scaling.factor", f32(2.0f));
  EXPECT_EQ(load_model(rewrite(none, "none-factor")).model->config().rope_freq_scale, 1.0f);
  // Llama 3's factors: one per rotary pair, positive.
  expect_load_error(rewrite(reshape("rope_freqs.weight", {3}), "rope-freqs-3", "llama3"),
                    "tensor 'rope_freqs.weight' has shape [3], expected [8]");
  expect_load_error(rewrite(retype("rope_freqs.weight", DType::kF32), "rope-freqs-0", "llama3"),
                    "tensor 'rope_freqs.weight' holds 0, not a positive factor");
}

TEST(ModelLoad, WrongShape) {
  expect_load_error(rewrite(reshape("blk.0.attn_q.weight", {64, 32}), "q-shape"),
                    "tensor 'blk.0.attn_q.weight' has shape [64, 32], expected [64, 64]");
  expect_load_error(rewrite(reshape("blk.1.ffn_norm.weight", {32}), "norm-shape"),
                    "tensor 'blk.1.ffn_norm.weight' has shape [32], expected [64]");
  expect_load_error(rewrite(reshape("output_norm.weight", {64, 2}), "norm-2d"),
                    "tensor 'output_norm.weight' has shape [64, 2], expected [64]");
  expect_load_error(rewrite(reshape("output.weight", {64, 63}), "out-rows"),
                    "tensor 'output.weight' has shape [64, 63], expected [64, 64]");
}

TEST(ModelLoad, UnsupportedTensorType) {
  expect_load_error(rewrite(retype("blk.0.attn_v.weight", DType::kQ8_1), "v-q8_1"),
                    "tensor 'blk.0.attn_v.weight' has type Q8_1, which Tessera cannot multiply");
  expect_load_error(rewrite(retype("blk.0.attn_norm.weight", DType::kI32), "norm-i32"),
                    "tensor 'blk.0.attn_norm.weight' has unsupported type I32");
}

TEST(ModelLoad, MissingOrMistypedKey) {
  expect_load_error(rewrite(drop_key("llama.embedding_length"), "no-embd-len"),
                    "missing metadata key 'llama.embedding_length'");
  expect_load_error(rewrite(drop_key("llama.block_count"), "no-blocks"),
                    "missing metadata key 'llama.block_count'");
  expect_load_error(rewrite(drop_key("general.architecture"), "no-arch"),
                    "missing metadata key 'general.architecture'");
  expect_load_error(rewrite(set_key("llama.block_count", str("2")), "blocks-string"),
                    "metadata 'llama.block_count' has type string, expected a non-negative integer");
  expect_load_error(rewrite(set_key("general.architecture", u32(1)), "arch-u32"),
                    "metadata 'general.architecture' has type u32, expected string");
}

TEST(ModelLoad, InconsistentHyperparameters) {
  expect_load_error(rewrite(set_key("llama.attention.head_count_kv", u32(3)), "kv3"),
                    "4 query heads is not a multiple of 3 kv heads");
  expect_load_error(rewrite(set_key("llama.attention.head_count", u32(0)), "heads0"),
                    "'llama.attention.head_count' = 0 is out of range");
  expect_load_error(rewrite(set_key("llama.rope.dimension_count", u32(7)), "rope-odd"),
                    "rope dimension count 7 is odd");
  expect_load_error(rewrite(set_key("llama.rope.dimension_count", u32(32)), "rope-big"),
                    "'llama.rope.dimension_count' = 32 is out of range (1..16)");
  expect_load_error(rewrite(set_key("llama.block_count", u32(3)), "blocks3"),
                    "missing tensor 'blk.2.attn_norm.weight'");
}

TEST(ModelLoad, UnsupportedArchitecture) {
  expect_load_error(rewrite(set_key("general.architecture", str("gpt2")), "gpt2"),
                    "architecture 'gpt2' is not supported (supported: gemma2, gemma3, gpt-oss, llama, mistral, phi3, qwen2, qwen2moe, qwen3, qwen3moe)");
}

TEST(ModelLoad, NotAModelFile) {
  TESSERA_REQUIRE_SHARED("models/vocab/ggml-vocab-llama-spm.gguf");
  // A vocabulary-only GGUF: valid file, no weights.
  expect_load_error(testing::shared_path("models/vocab/ggml-vocab-llama-spm.gguf"), "missing");
  expect_load_error(testing::temp_path("does-not-exist.gguf"), "cannot open");
}

}  // namespace
}  // namespace tessera
