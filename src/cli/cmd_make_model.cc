// tessera make-model: write a random-weight GGUF (llama, llama3, mistral, qwen2,
// qwen3, gemma2, gemma3, phi3 layouts; mixtral, qwen2moe, qwen3moe, gpt-oss mixtures)
// of a named or explicit shape.
#include <fmt/format.h>

#include "cli/command.h"
#include "core/error.h"
#include "core/log.h"
#include "model/synthetic.h"

namespace tessera::cli {
namespace {

struct MakeModelArgs {
  std::string preset = "tiny";
  std::string out;
  std::string type = "f32";
  std::string output_type;
  std::string arch = "llama";
  std::string vocab_from;
  int64_t n_vocab = 0;
  uint64_t seed = 1;
  int64_t dim = 0, layers = 0, heads = 0, kv_heads = 0, ff = 0, head_dim = 0, ctx = 0, rope_dims = 0;
  float rope_base = 0.0f;
  std::string rope_scaling;
  float rope_scaling_factor = 0.0f;
  int64_t rope_orig_ctx = 0, sliding_window = 0;
  float attn_softcap = 0.0f, final_softcap = 0.0f;
  bool tied = false;
  int threads = 0;
  std::string format = "gguf";
  std::string tokenizer_from;
  int64_t shard_bytes = 0;
  int64_t experts = 0, experts_used = 0, ff_exp = 0, ff_shexp = 0;
};

TESSERA_COMMAND("make-model", "Write a random-weight model GGUF or Hugging Face folder (tests, benchmarks)", [](CLI::App& sub) {
  auto a = std::make_shared<MakeModelArgs>();
  sub.add_option("-o,--out", a->out, "Output GGUF path (--format hf: folder)")->required();
  sub.add_option("--format", a->format, "gguf, or hf (the Hugging Face twin: config.json, model.safetensors)")
      ->capture_default_str();
  sub.add_option("--tokenizer-from", a->tokenizer_from, "--format hf: copy tokenizer.json and tokenizer_config.json "
                 "of this folder (the vocabulary size is theirs)");
  sub.add_option("--shard-bytes", a->shard_bytes, "--format hf: shards of at most this many bytes, with an index");
  sub.add_option("--preset", a->preset, "Shape: tiny, 110m, 1b")->capture_default_str();
  sub.add_option("--type", a->type, "Weight type: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, iq4_nl, iq4_xs, mxfp4, tq1_0, tq2_0")->capture_default_str();
  sub.add_option("--output-type", a->output_type, "Type of the output matrix (default: --type)");
  sub.add_option("--arch", a->arch,
                 "llama, llama3 (rope_freqs.weight), mistral (sliding window), qwen2 (QKV bias, NeoX RoPE), "
                 "qwen3 (q/k norm, NeoX RoPE), gemma2, gemma3, phi3; mixtures of experts: mixtral, qwen2moe (shared "
                 "expert), qwen3moe, gpt-oss (sinks, biases, clamped SwiGLU, window 128 on even layers)")->capture_default_str();
  sub.add_option("--experts", a->experts, "Mixtures: experts (default 8)");
  sub.add_option("--experts-used", a->experts_used, "Mixtures: experts per token (default 2)");
  sub.add_option("--ff-exp", a->ff_exp, "Mixtures: an expert's FFN width (default --ff; mixtral: always --ff)");
  sub.add_option("--ff-shexp", a->ff_shexp, "qwen2moe: the shared expert's FFN width (default --ff)");
  sub.add_option("--vocab-from", a->vocab_from, "Copy the tokenizer of this GGUF");
  sub.add_option("--n-vocab", a->n_vocab, "Synthetic vocabulary size (without --vocab-from)");
  sub.add_option("--seed", a->seed, "Random seed")->capture_default_str();
  sub.add_option("--dim", a->dim, "Override: embedding width");
  sub.add_option("--layers", a->layers, "Override: layers");
  sub.add_option("--heads", a->heads, "Override: attention heads");
  sub.add_option("--kv-heads", a->kv_heads, "Override: KV heads");
  sub.add_option("--ff", a->ff, "Override: feed-forward width");
  sub.add_option("--head-dim", a->head_dim, "Override: head dimension (default dim/heads)");
  sub.add_option("--ctx", a->ctx, "Override: context length");
  sub.add_option("--rope-dims", a->rope_dims, "Override: rotated dims per head");
  sub.add_option("--rope-base", a->rope_base, "Override: RoPE frequency base");
  sub.add_option("--rope-scaling", a->rope_scaling, "Write rope.scaling.type: linear or yarn (phi3: longrope)");
  sub.add_option("--rope-scaling-factor", a->rope_scaling_factor, "RoPE scaling factor (llama3 default 32)");
  sub.add_option("--rope-orig-ctx", a->rope_orig_ctx, "Original context of the RoPE scaling (llama3 default 8192)");
  sub.add_option("--sliding-window", a->sliding_window, "Sliding attention window (llama family, phi3; mistral default 4096; gemma's local layers, default 4096 / 512)");
  sub.add_option("--attn-softcap", a->attn_softcap, "Attention logit soft-cap (gemma2; default 50)");
  sub.add_option("--final-softcap", a->final_softcap, "Final logit soft-cap (gemma2 default 30; gemma3 none)");
  sub.add_flag("--tied", a->tied, "Tie the output matrix to the token embedding");
  sub.add_option("-t,--threads", a->threads, "Threads (default: all cores)");
  return [a]() {
    SyntheticModelSpec s = preset_spec(a->preset);
    auto type = parse_dtype(a->type);
    TESSERA_CHECK(type.has_value(), kInvalidArgument, "unknown type '{}'", a->type);
    s.type = *type;
    if (!a->output_type.empty()) {
      auto ot = parse_dtype(a->output_type);
      TESSERA_CHECK(ot.has_value(), kInvalidArgument, "unknown type '{}'", a->output_type);
      s.output_type = *ot;
    }
    s.arch = a->arch;
    s.vocab_from = a->vocab_from;
    s.n_vocab = a->n_vocab;
    s.seed = a->seed;
    s.tied_output = a->tied;
    if (a->dim) s.n_embd = a->dim;
    if (a->layers) s.n_layer = a->layers;
    if (a->heads) s.n_head = a->heads;
    if (a->kv_heads) s.n_head_kv = a->kv_heads;
    else if (a->heads) s.n_head_kv = a->heads;
    if (a->ff) s.n_ff = a->ff;
    if (a->head_dim) s.head_dim = a->head_dim;
    if (a->ctx) s.n_ctx = a->ctx;
    if (a->rope_dims) s.n_rot = a->rope_dims;
    if (a->rope_base > 0.0f) s.rope_freq_base = a->rope_base;
    s.rope_scaling = a->rope_scaling;
    s.rope_scaling_factor = a->rope_scaling_factor;
    s.rope_orig_ctx = a->rope_orig_ctx;
    s.sliding_window = a->sliding_window;
    s.attn_softcap = a->attn_softcap;
    s.final_softcap = a->final_softcap;
    if (a->experts) s.n_expert = a->experts;
    if (a->experts_used) s.n_expert_used = a->experts_used;
    s.n_ff_exp = a->ff_exp;
    s.n_ff_shexp = a->ff_shexp;
    if (s.vocab_from.empty() && a->tokenizer_from.empty() && s.n_vocab == 0) s.n_vocab = 512;
    TESSERA_CHECK(a->format == "gguf" || a->format == "hf", kInvalidArgument, "--format {}: gguf or hf", a->format);
    TESSERA_CHECK(a->format == "hf" || (a->tokenizer_from.empty() && a->shard_bytes == 0), kInvalidArgument,
                  "--tokenizer-from and --shard-bytes go with --format hf");
    if (a->format == "hf") {
      write_synthetic_hf_folder(s, a->out, a->tokenizer_from, a->shard_bytes, a->threads);
    } else {
      write_synthetic_model(s, a->out, a->threads);
    }
    TESSERA_LOG_INFO("wrote {} ({} layers, dim {}, {} weights)", a->out, s.n_layer, s.n_embd, dtype_name(s.type));
    return 0;
  };
});

}  // namespace
}  // namespace tessera::cli
