#include "model/synthetic.h"

#include <cmath>
#include <filesystem>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "core/thread_pool.h"
#include "kernels/quant.h"
#include "format/gguf.h"
#include "format/gguf_writer.h"
#include "format/hf_model.h"
#include "tokenizer/tokenizer.h"

namespace tessera {
namespace {

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// Each row draws from its own stream (seed, tensor, row), so the weights do
// not depend on the thread count.
void fill_gaussian_rows(float* out, int64_t cols, uint64_t stream, float stddev) {
  Rng rng(stream);
  for (int64_t i = 0; i < cols; i += 2) {
    // Box-Muller
    const float u1 = std::max(rng.uniform(), 1e-7f);
    const float u2 = rng.uniform();
    const float r = std::sqrt(-2.0f * std::log(u1)) * stddev;
    out[i] = r * std::cos(6.2831853f * u2);
    if (i + 1 < cols) out[i + 1] = r * std::sin(6.2831853f * u2);
  }
}

struct TensorPlan {
  std::string name;
  DType type;
  int64_t cols, rows;
  float stddev;  // 0: a norm vector near 1
  std::vector<float> values = {};  // a vector with these exact values (rope_freqs), if not empty
  int64_t experts = 0;  // > 0: a 3-D tensor of this many [rows, cols] matrices (ne = [cols, rows, experts])
  bool one_row_matrix = false;  // rows == 1 written as ne = [cols, 1], as HF's [1, cols] converts
};

}  // namespace

SyntheticModelSpec preset_spec(const std::string& name) {
  SyntheticModelSpec s;
  if (name == "tiny") {
    s.n_embd = 64; s.n_layer = 2; s.n_head = 4; s.n_head_kv = 2; s.n_ff = 128; s.n_ctx = 2048;
  } else if (name == "110m") {
    s.n_embd = 768; s.n_layer = 12; s.n_head = 12; s.n_head_kv = 12; s.n_ff = 2048; s.n_ctx = 4096;
  } else if (name == "1b") {
    s.n_embd = 2048; s.n_layer = 16; s.n_head = 32; s.n_head_kv = 8; s.n_ff = 8192; s.n_ctx = 4096;
  } else {
    fail(ErrorCode::kInvalidArgument, "unknown preset '{}' (tiny, 110m, 1b)", name);
  }
  return s;
}

namespace {

// What the architecture's name implies for the file.
struct ArchTraits {
  std::string file_arch;  // llama3, mistral and mixtral are llama files with more in them
  bool gemma = false, phi3 = false, qkv_bias = false, qk_norm = false;
  bool moe = false, shared_expert = false;
  bool gpt_oss = false;  // sinks, output and expert biases, post_attention_norm, alternating window
};

ArchTraits arch_traits(const std::string& arch) {
  TESSERA_CHECK(arch == "llama" || arch == "llama3" || arch == "mistral" || arch == "qwen2" || arch == "qwen3" ||
                    arch == "gemma2" || arch == "gemma3" || arch == "phi3" || arch == "mixtral" ||
                    arch == "qwen2moe" || arch == "qwen3moe" || arch == "gpt-oss",
                kInvalidArgument, "arch '{}' must be llama, llama3, mistral, qwen2, qwen3, gemma2, gemma3, phi3, "
                "mixtral, qwen2moe, qwen3moe or gpt-oss", arch);
  ArchTraits t;
  t.file_arch = arch == "llama3" || arch == "mistral" || arch == "mixtral" ? "llama" : arch;
  t.gemma = arch == "gemma2" || arch == "gemma3";
  t.phi3 = arch == "phi3";
  t.gpt_oss = arch == "gpt-oss";
  t.qkv_bias = arch == "qwen2" || arch == "qwen2moe" || t.gpt_oss;
  t.qk_norm = arch == "qwen3" || arch == "gemma3" || arch == "qwen3moe";
  t.moe = arch == "mixtral" || arch == "qwen2moe" || arch == "qwen3moe" || t.gpt_oss;
  t.shared_expert = arch == "qwen2moe";
  return t;
}

// Fills in the architecture's defaults and refuses what its files cannot hold.
void resolve_spec(SyntheticModelSpec& s, const ArchTraits& t) {
  if (s.rope_freq_base == 0.0f) {
    s.rope_freq_base = s.arch == "llama3"                                                   ? 500000.0f
                       : s.arch == "qwen3" || s.arch == "gemma3" || s.arch == "qwen3moe" ? 1e6f
                       : t.gpt_oss                                                       ? 150000.0f
                                                                                        : 10000.0f;
  }
  if (t.moe) {
    TESSERA_CHECK(s.n_expert > 0 && s.n_expert_used > 0 && s.n_expert_used <= s.n_expert, kInvalidArgument,
                  "{} experts, {} per token: need 0 < per token <= experts", s.n_expert, s.n_expert_used);
    TESSERA_CHECK(s.arch != "mixtral" || s.n_ff_exp == 0 || s.n_ff_exp == s.n_ff, kInvalidArgument,
                  "mixtral's experts are n_ff wide (no expert_feed_forward_length)");
    if (s.n_ff_exp == 0) s.n_ff_exp = s.n_ff;
    if (t.shared_expert && s.n_ff_shexp == 0) s.n_ff_shexp = s.n_ff;
    TESSERA_CHECK(t.shared_expert || s.n_ff_shexp == 0, kInvalidArgument, "only qwen2moe has a shared expert");
  }
  if (s.arch == "mistral" && s.sliding_window == 0) s.sliding_window = 4096;
  // Gemma's local layers' window (Gemma 2: 4096, Gemma 3 1B: 512).
  if (t.gemma && s.sliding_window == 0) s.sliding_window = s.arch == "gemma2" ? 4096 : 512;
  if (s.arch == "gemma2") s.tied_output = true;  // llama.cpp's gemma2 has no output matrix
  if (t.gpt_oss && s.sliding_window == 0) s.sliding_window = 128;  // gpt-oss's local layers
  TESSERA_CHECK(!t.gpt_oss || !s.tied_output, kInvalidArgument, "gpt-oss files always have an output matrix");
  TESSERA_CHECK(s.sliding_window >= 0, kInvalidArgument, "sliding window {} is negative", s.sliding_window);
  TESSERA_CHECK(s.sliding_window == 0 || t.file_arch == "llama" || t.gemma || t.phi3 || t.gpt_oss, kInvalidArgument,
                "a sliding window is written for llama-family, gemma, phi3 and gpt-oss files only, not {}", s.arch);
  TESSERA_CHECK(s.rope_scaling.empty() || s.rope_scaling == "linear" || s.rope_scaling == "yarn" ||
                    (t.phi3 && s.rope_scaling == "longrope"),
                kInvalidArgument, "rope scaling '{}' must be linear or yarn (or longrope for phi3)", s.rope_scaling);
  TESSERA_CHECK(!t.phi3 || s.rope_scaling.empty() || s.rope_scaling == "longrope", kInvalidArgument,
                "phi3 files take longrope scaling only");
  TESSERA_CHECK(s.arch != "gemma2" || s.rope_scaling.empty(), kInvalidArgument, "gemma2 files have no RoPE scaling");
  TESSERA_CHECK(s.rope_scaling_factor == 0.0f || s.rope_scaling_factor >= 1.0f, kInvalidArgument,
                "rope scaling factor {} must be >= 1", s.rope_scaling_factor);
  TESSERA_CHECK(s.n_embd > 0 && s.n_layer > 0 && s.n_head > 0 && s.n_head_kv > 0 && s.n_ff > 0, kInvalidArgument,
                "model dimensions must be positive");
  TESSERA_CHECK(s.n_head % s.n_head_kv == 0, kInvalidArgument, "heads {} not a multiple of kv heads {}", s.n_head, s.n_head_kv);
  if (s.head_dim == 0) {
    TESSERA_CHECK(s.n_embd % s.n_head == 0, kInvalidArgument, "dim {} not a multiple of heads {}", s.n_embd, s.n_head);
    s.head_dim = s.n_embd / s.n_head;
  }
  if (s.n_rot == 0) s.n_rot = s.head_dim;
  TESSERA_CHECK(s.n_rot % 2 == 0 && s.n_rot <= s.head_dim, kInvalidArgument, "rope dims {} must be even and <= head dim {}", s.n_rot, s.head_dim);
  TESSERA_CHECK(kernels::can_quantize(s.type), kInvalidArgument, "cannot write weights of type {}", dtype_name(s.type));
  const DType out_type = s.output_type.value_or(s.type);
  TESSERA_CHECK(kernels::can_quantize(out_type), kInvalidArgument, "cannot write weights of type {}", dtype_name(out_type));
  TESSERA_CHECK(s.attn_softcap >= 0.0f && s.final_softcap >= 0.0f, kInvalidArgument, "soft-caps must be >= 0");
  TESSERA_CHECK(s.attn_softcap == 0.0f || s.arch == "gemma2", kInvalidArgument, "attention soft-capping is gemma2's only");
  TESSERA_CHECK(s.final_softcap == 0.0f || t.gemma, kInvalidArgument, "final soft-capping is written for gemma only");
}

// The hyperparameters, as the architecture's converter writes them.
void write_hparams(gguf::Writer& w, const SyntheticModelSpec& s, const ArchTraits& t) {
  const std::string a = t.file_arch + ".";
  w.set_string("general.architecture", t.file_arch);
  w.set_string("general.name", fmt::format("tessera-synthetic-{}x{}", s.n_layer, s.n_embd));
  w.set_u32("general.file_type", gguf::llama_file_type(s.type));
  w.set_u32(a + "context_length", static_cast<uint32_t>(s.n_ctx));
  w.set_u32(a + "embedding_length", static_cast<uint32_t>(s.n_embd));
  w.set_u32(a + "block_count", static_cast<uint32_t>(s.n_layer));
  w.set_u32(a + "feed_forward_length", static_cast<uint32_t>(s.n_ff));
  w.set_u32(a + "attention.head_count", static_cast<uint32_t>(s.n_head));
  w.set_u32(a + "attention.head_count_kv", static_cast<uint32_t>(s.n_head_kv));
  if (s.head_dim != s.n_embd / s.n_head || s.arch == "qwen3" || t.gemma) {  // these converters always write them
    w.set_u32(a + "attention.key_length", static_cast<uint32_t>(s.head_dim));
    w.set_u32(a + "attention.value_length", static_cast<uint32_t>(s.head_dim));
  }
  w.set_f32(a + "attention.layer_norm_rms_epsilon", s.rms_eps);
  w.set_u32(a + "rope.dimension_count", static_cast<uint32_t>(s.n_rot));
  w.set_f32(a + "rope.freq_base", s.rope_freq_base);
  if (!s.rope_scaling.empty() && !t.phi3) {
    w.set_string(a + "rope.scaling.type", s.rope_scaling);
    w.set_f32(a + "rope.scaling.factor", s.rope_scaling_factor > 0.0f ? s.rope_scaling_factor : 1.0f);
    if (s.rope_orig_ctx > 0) w.set_u32(a + "rope.scaling.original_context_length", static_cast<uint32_t>(s.rope_orig_ctx));
  }
  // Phi-3's converter always writes the window (0: none, Phi-4).
  if (s.sliding_window > 0 || t.phi3) w.set_u32(a + "attention.sliding_window", static_cast<uint32_t>(s.sliding_window));
  if (t.moe) {
    w.set_u32(a + "expert_count", static_cast<uint32_t>(s.n_expert));
    w.set_u32(a + "expert_used_count", static_cast<uint32_t>(s.n_expert_used));
    if (t.file_arch != "llama") w.set_u32(a + "expert_feed_forward_length", static_cast<uint32_t>(s.n_ff_exp));
    if (t.shared_expert) w.set_u32(a + "expert_shared_feed_forward_length", static_cast<uint32_t>(s.n_ff_shexp));
  }
  if (s.arch == "gemma2") {  // Gemma 2's config values by default
    w.set_f32(a + "attn_logit_softcapping", s.attn_softcap > 0.0f ? s.attn_softcap : 50.0f);
    w.set_f32(a + "final_logit_softcapping", s.final_softcap > 0.0f ? s.final_softcap : 30.0f);
  } else if (s.final_softcap > 0.0f) {
    w.set_f32(a + "final_logit_softcapping", s.final_softcap);
  }
}

// Phi-3's LongRoPE: per-pair short and long factors, the original context
// and a magnitude factor on cos/sin, as the converter writes them.
struct LongRopeFactors {
  std::vector<float> short_factors, long_factors;  // empty: no LongRoPE
};

LongRopeFactors write_longrope(gguf::Writer& w, const SyntheticModelSpec& s, const ArchTraits& t) {
  LongRopeFactors f;
  if (!t.phi3 || s.rope_scaling != "longrope") return f;
  const std::string a = t.file_arch + ".";
  const int64_t orig = s.rope_orig_ctx > 0 ? s.rope_orig_ctx : 4096;
  TESSERA_CHECK(orig < s.n_ctx, kInvalidArgument, "longrope needs an original context {} below the context {}", orig,
                s.n_ctx);
  const double scale = static_cast<double>(s.n_ctx) / static_cast<double>(orig);
  w.set_u32(a + "rope.scaling.original_context_length", static_cast<uint32_t>(orig));
  w.set_f32(a + "rope.scaling.attn_factor", static_cast<float>(std::sqrt(1.0 + std::log(scale) / std::log(static_cast<double>(orig)))));
  const int64_t half = s.n_rot / 2;
  const double factor = s.rope_scaling_factor > 0.0f ? s.rope_scaling_factor : scale;
  for (int64_t i = 0; i < half; ++i) {
    const double x = half > 1 ? static_cast<double>(i) / static_cast<double>(half - 1) : 0.0;
    f.short_factors.push_back(static_cast<float>(1.0 + 0.25 * x * x));      // near 1 (Phi-3's short factors)
    f.long_factors.push_back(static_cast<float>(1.0 + (factor - 1.0) * x));  // up to the scaling factor
  }
  return f;
}

// The tokenizer: copied from another GGUF, or a minimal SentencePiece-style
// vocabulary (<unk>, <s>, </s>, then pieces). Returns the vocabulary size.
int64_t write_vocab(gguf::Writer& w, const SyntheticModelSpec& s) {
  if (!s.vocab_from.empty()) {
    const gguf::File vocab = gguf::File::open(s.vocab_from);
    for (const auto& [k, v] : vocab.metadata()) {
      if (k.rfind("tokenizer.", 0) == 0) w.set_value(k, v);
    }
    return static_cast<int64_t>(vocab.get_array("tokenizer.ggml.tokens").size());
  }
  const int64_t n_vocab = s.n_vocab;
  TESSERA_CHECK(n_vocab > 0, kInvalidArgument, "give --vocab-from FILE or a vocabulary size");
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
  for (int64_t i = 0; i < n_vocab; ++i) {
    tokens.push_back(i == 0 ? "<unk>" : i == 1 ? "<s>" : i == 2 ? "</s>" : fmt::format("tok{}", i));
    scores.push_back(-static_cast<float>(i));
    types.push_back(i == 0 ? 2 : i < 3 ? 3 : 1);
  }
  w.set_string("tokenizer.ggml.model", "llama");
  w.set_strings("tokenizer.ggml.tokens", tokens);
  w.set_f32s("tokenizer.ggml.scores", scores);
  w.set_i32s("tokenizer.ggml.token_type", types);
  w.set_u32("tokenizer.ggml.bos_token_id", 1);
  w.set_u32("tokenizer.ggml.eos_token_id", 2);
  w.set_u32("tokenizer.ggml.unknown_token_id", 0);
  return n_vocab;
}

// A mixture's tensors, as llama.cpp's converter writes them: the router
// (kept F32, as llama-quantize keeps it), the experts stacked in 3-D tensors,
// and Qwen2-MoE's shared expert with its gate vector.
void plan_experts(std::vector<TensorPlan>& plan, const SyntheticModelSpec& s, const ArchTraits& t, int64_t il) {
  const int64_t E = s.n_embd, F = s.n_ff_exp, NE = s.n_expert;
  const float std_in = 0.02f;
  const float std_out = 0.02f / std::sqrt(2.0f * static_cast<float>(s.n_layer));
  auto n = [&](const char* name) { return fmt::format("blk.{}.{}", il, name); };
  // Router logits of a few units' spread: the choice is clear-cut for most
  // tokens, and the second expert's weight is not negligible.
  const float std_router = 2.0f / std::sqrt(static_cast<float>(E));
  plan.push_back({n("ffn_gate_inp.weight"), DType::kF32, E, NE, std_router});
  if (t.gpt_oss) {
    // Gate and up of a few units' spread (std 4), so that gpt-oss's clamps
    // at +-7 act on some values; down shrunk to keep the residual in range.
    const float std_big = 4.0f / std::sqrt(static_cast<float>(E));
    const float std_down = std_out / 8.0f;
    plan.push_back({n("ffn_gate_inp.bias"), DType::kF32, NE, 1, 0.5f});
    plan.push_back({n("ffn_gate_exps.weight"), s.type, E, F, std_big, {}, NE});
    plan.push_back({n("ffn_gate_exps.bias"), DType::kF32, F, NE, 1.0f});
    plan.push_back({n("ffn_down_exps.weight"), s.type, F, E, std_down, {}, NE});
    plan.push_back({n("ffn_down_exps.bias"), DType::kF32, E, NE, std_in});
    plan.push_back({n("ffn_up_exps.weight"), s.type, E, F, std_big, {}, NE});
    plan.push_back({n("ffn_up_exps.bias"), DType::kF32, F, NE, 1.0f});
    return;
  }
  plan.push_back({n("ffn_gate_exps.weight"), s.type, E, F, std_in, {}, NE});
  plan.push_back({n("ffn_down_exps.weight"), s.type, F, E, std_out, {}, NE});
  plan.push_back({n("ffn_up_exps.weight"), s.type, E, F, std_in, {}, NE});
  if (t.shared_expert) {
    const int64_t S = s.n_ff_shexp;
    plan.push_back({n("ffn_gate_inp_shexp.weight"), DType::kF32, E, 1, std_router, {}, 0, true});
    plan.push_back({n("ffn_gate_shexp.weight"), s.type, E, S, std_in});
    plan.push_back({n("ffn_down_shexp.weight"), s.type, S, E, std_out});
    plan.push_back({n("ffn_up_shexp.weight"), s.type, E, S, std_in});
  }
}

// One block's tensors, with llama.cpp's names.
void plan_block(std::vector<TensorPlan>& plan, const SyntheticModelSpec& s, const ArchTraits& t, int64_t il) {
  const int64_t E = s.n_embd, Q = s.n_head * s.head_dim, KV = s.n_head_kv * s.head_dim, F = s.n_ff;
  // Scaled like common initialisations (std 0.02, output projections shrunk
  // by depth) so activations stay in a realistic range through the layers.
  const float std_in = 0.02f;
  const float std_out = 0.02f / std::sqrt(2.0f * static_cast<float>(s.n_layer));
  auto n = [&](const char* name) { return fmt::format("blk.{}.{}", il, name); };
  plan.push_back({n("attn_norm.weight"), DType::kF32, E, 1, 0.0f});
  if (t.phi3) {
    plan.push_back({n("attn_qkv.weight"), s.type, E, Q + 2 * KV, std_in});
  } else {
    plan.push_back({n("attn_q.weight"), s.type, E, Q, std_in});
    plan.push_back({n("attn_k.weight"), s.type, E, KV, std_in});
    plan.push_back({n("attn_v.weight"), s.type, E, KV, std_in});
  }
  if (t.qkv_bias) {
    plan.push_back({n("attn_q.bias"), DType::kF32, Q, 1, std_in});
    plan.push_back({n("attn_k.bias"), DType::kF32, KV, 1, std_in});
    plan.push_back({n("attn_v.bias"), DType::kF32, KV, 1, std_in});
  }
  if (t.qk_norm) {
    plan.push_back({n("attn_q_norm.weight"), DType::kF32, s.head_dim, 1, 0.0f});
    plan.push_back({n("attn_k_norm.weight"), DType::kF32, s.head_dim, 1, 0.0f});
  }
  plan.push_back({n("attn_output.weight"), s.type, Q, E, std_out});
  if (t.gpt_oss) {
    plan.push_back({n("attn_output.bias"), DType::kF32, E, 1, std_in});
    plan.push_back({n("attn_sinks.weight"), DType::kF32, s.n_head, 1, 1.5f});  // logits of a few units
  }
  // gpt-oss's FFN norm has llama.cpp's name for the norm after attention.
  if (t.gemma || t.gpt_oss) plan.push_back({n("post_attention_norm.weight"), DType::kF32, E, 1, 0.0f});
  if (!t.gpt_oss) plan.push_back({n("ffn_norm.weight"), DType::kF32, E, 1, 0.0f});
  if (t.moe) {
    plan_experts(plan, s, t, il);
  } else if (t.phi3) {
    plan.push_back({n("ffn_up.weight"), s.type, E, 2 * F, std_in});  // gate rows, then up rows
    plan.push_back({n("ffn_down.weight"), s.type, F, E, std_out});
  } else {
    plan.push_back({n("ffn_gate.weight"), s.type, E, F, std_in});
    plan.push_back({n("ffn_up.weight"), s.type, E, F, std_in});
    plan.push_back({n("ffn_down.weight"), s.type, F, E, std_out});
  }
  if (t.gemma) plan.push_back({n("post_ffw_norm.weight"), DType::kF32, E, 1, 0.0f});
}

std::vector<TensorPlan> plan_tensors(const SyntheticModelSpec& s, const ArchTraits& t, int64_t n_vocab,
                                     const LongRopeFactors& longrope) {
  const int64_t E = s.n_embd;
  const float std_in = 0.02f;
  std::vector<TensorPlan> plan;
  if (s.arch == "llama3") {
    plan.push_back({"rope_freqs.weight", DType::kF32, s.n_rot / 2, 1, 0.0f,
                    llama3_rope_factors(s.n_rot, s.rope_freq_base, s.rope_scaling_factor > 0.0f ? s.rope_scaling_factor : 32.0f,
                                        s.rope_orig_ctx > 0 ? s.rope_orig_ctx : 8192)});
  }
  if (!longrope.long_factors.empty()) {
    plan.push_back({"rope_factors_long.weight", DType::kF32, s.n_rot / 2, 1, 0.0f, longrope.long_factors});
    plan.push_back({"rope_factors_short.weight", DType::kF32, s.n_rot / 2, 1, 0.0f, longrope.short_factors});
  }
  plan.push_back({"token_embd.weight", s.type, E, n_vocab, std_in});
  plan.push_back({"output_norm.weight", DType::kF32, E, 1, 0.0f});
  if (!s.tied_output) plan.push_back({"output.weight", s.output_type.value_or(s.type), E, n_vocab, std_in});
  for (int64_t il = 0; il < s.n_layer; ++il) plan_block(plan, s, t, il);
  return plan;
}

// Adds each planned tensor; its rows are drawn and quantized when the writer
// asks for them, in parallel on the pool.
void add_planned_tensors(gguf::Writer& w, const std::vector<TensorPlan>& plan, uint64_t seed, ThreadPool& pool) {
  for (const TensorPlan& t : plan) {
    const DTypeTraits tr = dtype_traits(t.type);
    TESSERA_CHECK(t.cols % tr.block_size == 0, kInvalidArgument,
                  "tensor '{}': {} columns is not a multiple of the {} block size {}; choose dims "
                  "that are multiples of {}", t.name, t.cols, tr.name, tr.block_size, tr.block_size);
    const bool is_norm = t.stddev == 0.0f;
    std::vector<int64_t> ne = t.experts > 0 ? std::vector<int64_t>{t.cols, t.rows, t.experts}
                              : t.rows == 1 && !t.one_row_matrix ? std::vector<int64_t>{t.cols}
                                            : std::vector<int64_t>{t.cols, t.rows};
    const uint64_t stream = seed * 0x9e3779b97f4a7c15ull ^ fnv1a(t.name);
    const int64_t rows = t.rows * std::max<int64_t>(t.experts, 1);
    w.add_tensor(t.name, t.type, ne, [t, rows, stream, is_norm, &pool](uint8_t* out, size_t) {
      const size_t rb = row_bytes(t.type, t.cols);
      if (!t.values.empty()) {
        kernels::quantize_row(t.type, t.values.data(), out, t.cols);
        return;
      }
      pool.parallel_for(rows, 1, [&](int64_t r0, int64_t r1) {
        std::vector<float> row(static_cast<size_t>(t.cols));
        for (int64_t r = r0; r < r1; ++r) {
          if (is_norm) {
            // Norm weights near 1 with some spread, so a reference that
            // ignored them would not match.
            fill_gaussian_rows(row.data(), t.cols, stream + static_cast<uint64_t>(r), 0.1f);
            for (float& v : row) v += 1.0f;
          } else {
            fill_gaussian_rows(row.data(), t.cols, stream + static_cast<uint64_t>(r), t.stddev);
          }
          kernels::quantize_row(t.type, row.data(), out + rb * static_cast<size_t>(r), t.cols);
        }
      });
    });
  }
}

}  // namespace

void write_synthetic_model(const SyntheticModelSpec& spec, const std::string& path, int n_threads) {
  SyntheticModelSpec s = spec;
  const ArchTraits t = arch_traits(s.arch);
  resolve_spec(s, t);
  gguf::Writer w;
  write_hparams(w, s, t);
  const LongRopeFactors longrope = write_longrope(w, s, t);
  const int64_t n_vocab = write_vocab(w, s);
  if (s.arch == "llama3") w.set_u32("llama.vocab_size", static_cast<uint32_t>(n_vocab));  // as the converter writes it
  ThreadPool pool(n_threads);
  add_planned_tensors(w, plan_tensors(s, t, n_vocab, longrope), s.seed, pool);
  w.write(path);
}

void write_synthetic_hf_folder(const SyntheticModelSpec& spec, const std::string& dir, const std::string& tokenizer_from,
                               int64_t max_shard_bytes, int n_threads) {
  namespace fs = std::filesystem;
  TESSERA_CHECK(spec.vocab_from.empty(), kInvalidArgument, "a Hugging Face folder takes its vocabulary from a "
                "tokenizer.json folder (tokenizer_from), not a GGUF");
  SyntheticModelSpec s = spec;
  std::error_code ec;
  fs::create_directories(dir, ec);
  TESSERA_CHECK(!ec, kIo, "cannot create {}: {}", dir, ec.message());
  if (!tokenizer_from.empty()) {
    for (const char* name : {"tokenizer.json", "tokenizer_config.json"}) {
      fs::copy_file(fs::path(tokenizer_from) / name, fs::path(dir) / name, fs::copy_options::overwrite_existing, ec);
      TESSERA_CHECK(!ec, kIo, "cannot copy {}/{} to {}: {}", tokenizer_from, name, dir, ec.message());
      fs::permissions(fs::path(dir) / name, fs::perms::owner_write, fs::perm_options::add, ec);  // a read-only source
    }
    s.n_vocab = Tokenizer::from_hf_json(hf::tokenizer_json_path(dir))->n_vocab();
  }
  // The GGUF first, then its twin: one generator for both formats.
  const std::string tmp = (fs::path(dir) / ".tessera-make-model.gguf").string();
  write_synthetic_model(s, tmp, n_threads);
  try {
    hf::export_folder(gguf::File::open(tmp), dir, {.max_shard_bytes = max_shard_bytes});
  } catch (...) {
    fs::remove(tmp, ec);
    throw;
  }
  fs::remove(tmp, ec);
}

}  // namespace tessera
