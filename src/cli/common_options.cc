#include "cli/common_options.h"

#include <cctype>
#include <cstdlib>
#include <filesystem>

#include "adapters/lora_gguf.h"
#include "cli/text_file.h"
#include "core/memory.h"
#include "grammar/gbnf.h"
#include "grammar/json_schema.h"
#include "kernels/attention.h"
#include "core/log.h"
#include "dist/world.h"
#include "model/fingerprint.h"
#include "model/tensor_parallel.h"
#include "template/chat_template.h"
#include "adapters/soft_prompt_file.h"
#include "spec/model_drafter.h"

namespace tessera::cli {

size_t parse_bytes(const std::string& s) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    fail(ErrorCode::kInvalidArgument, "'{}' is not a size (e.g. 512M, 2G)", s);
  }
  std::string unit = s.substr(used);
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  double mul = 1;
  if (unit == "K" || unit == "KB" || unit == "KIB") mul = 1024.0;
  else if (unit == "M" || unit == "MB" || unit == "MIB") mul = 1024.0 * 1024;
  else if (unit == "G" || unit == "GB" || unit == "GIB") mul = 1024.0 * 1024 * 1024;
  else if (!unit.empty() && unit != "B") fail(ErrorCode::kInvalidArgument, "unknown size unit in '{}'", s);
  TESSERA_CHECK(v > 0, kInvalidArgument, "size '{}' must be positive", s);
  return static_cast<size_t>(v * mul);
}

void RunOptions::add_to(CLI::App& app, bool engine_options, bool model_optional) {
  auto* m = app.add_option("-m,--model", model,
                           model_optional ? "GGUF file or Hugging Face folder (default: the bundled stories260K)"
                                          : "GGUF file or Hugging Face folder");
  if (!model_optional) m->required();
  app.add_option("-t,--threads", threads, kThreadsHelp);
  app.add_option("--tp", tp,
                 "Tensor parallelism: split the model's heads and FFN over N ranks (run under mpirun -np N; "
                 "docs/DISTRIBUTED.md)")
      ->check(CLI::Range(1, 1024));
  app.add_option("-c,--ctx", ctx, "Context length (default: the model's)");
  app.add_option("--kv-type", kv_type, "KV cache type: f32, f16, bf16, q8_0, q4_0 (quantized: int8 / 4-bit codes, an fp16 scale per 32 values of a head)")->capture_default_str();
  app.add_flag("--kv-hadamard", kv_hadamard,
               "Store a q8_0 / q4_0 cache's K and V rotated by a randomized Hadamard matrix per head (outliers "
               "spread over each block: much less error at 4 bits)");
  app.add_option("--block-size", block_size, "KV block size in tokens")->capture_default_str();
  add_integer_weight_flags(app);
  add_long_rope_option(app, long_rope);
  app.add_option("--kv-store", kv_store,
                 "Keep prefix-cache blocks beyond RAM: a directory and/or redis://HOST:PORT (repeatable; "
                 "shared safely by several servers, kept across restarts)");
  app.add_option_function<std::string>("--kv-store-max-bytes", [this](const std::string& s) {
    kv_store_max_bytes = static_cast<int64_t>(parse_bytes(s));
  }, "Bound on a --kv-store directory (e.g. 20G; least recently used blocks go first)");
  app.add_option("--kv-store-wait", kv_store_wait,
                 "Seconds a request waits for its blocks from the store before computing them")->capture_default_str();
  app.add_option("--kv-store-write", kv_store_write,
                 "When blocks go down to the store: through (as soon as they are full) or back (when RAM evicts "
                 "them, and at shutdown)")
      ->check(CLI::IsMember({"through", "back"}))
      ->capture_default_str();
  if (!engine_options) return;
  app.add_option_function<std::string>("--kv-memory", [this](const std::string& s) {
    kv_memory = static_cast<int64_t>(parse_bytes(s));
  }, "KV cache memory (e.g. 512M, 2G)");
  app.add_option("--kv-blocks", kv_blocks, "KV cache size in blocks (instead of --kv-memory)");
  app.add_option("--max-num-seqs", max_num_seqs, "Sequences per step")->capture_default_str();
  app.add_option("--max-batch-tokens", max_batch_tokens, "Tokens per step (chunked prefill budget)")->capture_default_str();
  app.add_flag("--no-prefix-cache", no_prefix_cache, "Disable automatic prefix caching");
}

std::optional<std::string> bundled_path(const std::string& rel, std::string& tried) {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return std::nullopt;
  for (const auto& base : {exe.parent_path().parent_path(), exe.parent_path().parent_path() / "share/tessera"}) {
    const std::filesystem::path p = base / rel;
    tried += (tried.empty() ? "" : ", ") + p.string();
    if (std::filesystem::exists(p)) return p.string();
  }
  return std::nullopt;
}

namespace {

// The model that ships with Tessera: beside the binary's build folder in a
// checkout (build/tessera -> models/), or under share/ once installed.
std::string bundled_model() {
  const std::string rel = "models/stories260K/stories260K.gguf";
  std::string where;
  if (auto p = bundled_path(rel, where)) return *p;
  fail(ErrorCode::kNotFound, "no -m given and the bundled model is not there ({}): give -m MODEL", where);
}

}  // namespace

void RunOptions::resolve_model() {
  if (!model.empty()) return;
  model = bundled_model();
  TESSERA_LOG_INFO("no -m given: using the bundled stories260K model ({})", model);
}

void SpecOptions::add_to(CLI::App& app) {
  app.add_option("--spec", method,
                 "Speculative decoding: none, ngram (prompt lookup), suffix (SuffixDecoding over this and earlier "
                 "outputs), draft (a smaller model: --draft-model), layers (the model itself with layers skipped)")
      ->capture_default_str();
  app.add_option("--draft-model", draft_model_path, "draft: the draft model (a GGUF with the target's vocabulary)");
  app.add_option("--draft-layers", draft_layers,
                 "layers: the layers the draft skips, 0-based, e.g. 2-5 or 1,3,4 (default: chosen at start from "
                 "measured acceptance)");
  app.add_option("--spec-k", k, "Longest draft (tokens verified per step)")->capture_default_str();
  app.add_option("--spec-ngram-min", ngram_min, "ngram: shortest suffix matched")->capture_default_str();
  app.add_option("--spec-ngram-max", ngram_max, "ngram: longest suffix matched")->capture_default_str();
  app.add_flag("--spec-fixed", fixed,
               "Verify every proposal at full length (default: draft lengths chosen from measured step costs and "
               "acceptance, none when they would not pay)");
}

namespace {
std::vector<std::pair<std::string, std::string>> name_file_pairs(const std::vector<std::string>& values) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const std::string& l : values) {
    const size_t eq = l.find('=');
    if (eq != std::string::npos) out.emplace_back(l.substr(0, eq), l.substr(eq + 1));
  }
  return out;
}
}  // namespace

void AdapterOptions::add_to(CLI::App& app, AdapterScope where) {
  scope = where;
  const bool named = where == AdapterScope::kServer;
  app.add_option("--lora", lora,
                 named ? "LoRA adapter (llama.cpp's adapter GGUF): FILE applies to every request (repeat to sum "
                            "several), NAME=FILE serves it as model NAME"
                 : where == AdapterScope::kChat
                     ? "LoRA adapter (llama.cpp's adapter GGUF): FILE for every turn, NAME=FILE for /adapter NAME"
                     : "LoRA adapter (llama.cpp's adapter GGUF); repeat to sum several");
  app.add_option("--lora-scale", lora_scale, "Scale of every --lora FILE adapter's delta")->capture_default_str();
  app.add_option("--lora-type", lora_type,
                 "How LoRA adapters are kept in memory: f32, f16, or q8_0 (pairs whose rows are not multiples of 32 "
                 "in f16); compact types cut what a decode step reads for many adapters")
      ->check(CLI::IsMember({"f32", "f16", "q8_0"}))
      ->capture_default_str();
  if (where == AdapterScope::kSequence || where == AdapterScope::kChat) return;
  app.add_option("--soft-prompt", soft_prompt,
                 named ? "Soft prompt ([n_virtual, n_embd] in .npy or GGUF): FILE prefixes every request, NAME=FILE "
                         "serves it to requests naming it in \"soft_prompt\""
                       : "Soft prompt ([n_virtual, n_embd] input embeddings in .npy or GGUF) prepended to every prompt");
  if (named) {
    app.add_option("--lora-pool", lora_pool,
                   "Memory budget of resident LoRA adapters (e.g. 512M); idle ones beyond it are evicted, least "
                   "recently used first, and reloaded from their file on demand (default: unbounded)");
  }
}

std::vector<std::pair<std::string, std::string>> AdapterOptions::named() const { return name_file_pairs(lora); }

std::vector<std::pair<std::string, std::string>> AdapterOptions::named_soft_prompts() const {
  return name_file_pairs(soft_prompt);
}

std::shared_ptr<const LoraAdapter> AdapterOptions::load(const Model& base) const {
  // Under --tp the adapters are read whole (the file's shapes); each rank
  // computes with its part (model/tensor_parallel.h).
  const ModelConfig shape = base.whole_config();
  TESSERA_CHECK(scope == AdapterScope::kServer || scope == AdapterScope::kChat || named().empty(), kInvalidArgument,
                "--lora NAME=FILE serves an adapter by name (tessera serve); here give --lora FILE");
  std::vector<std::shared_ptr<const LoraAdapter>> all;
  for (const std::string& path : lora) {
    if (path.find('=') == std::string::npos) all.push_back(adapters::load_lora(path, shape, lora_scale));
  }
  if (all.empty()) return nullptr;
  return adapters::stored_as(adapters::sum_loras(all), weight_type());
}

kernels::LoraWeightType AdapterOptions::weight_type() const {
  if (lora_type == "f16") return kernels::LoraWeightType::kF16;
  if (lora_type == "q8_0") return kernels::LoraWeightType::kQ8_0;
  TESSERA_CHECK(lora_type == "f32", kInvalidArgument, "--lora-type {}: give f32, f16 or q8_0", lora_type);
  return kernels::LoraWeightType::kF32;
}

void AdapterOptions::apply(engine::EngineConfig& c, const Model& base) const {
  c.lora = load(base);
  TESSERA_CHECK(scope == AdapterScope::kServer || named_soft_prompts().empty(), kInvalidArgument,
                "--soft-prompt NAME=FILE serves a soft prompt by name (tessera serve); here give --soft-prompt FILE");
  for (const std::string& path : soft_prompt) {
    if (path.find('=') != std::string::npos) continue;
    TESSERA_CHECK(!c.soft_prompt, kInvalidArgument, "give at most one --soft-prompt FILE");
    c.soft_prompt = adapters::load_soft_prompt(path, base.config());
  }
}

LoadedModel RunOptions::load() {
  if (tp == 1) return load_model(model);
  dist::World& world = dist::World::current();
  TESSERA_CHECK(world.size() == tp, kInvalidArgument, "--tp {} needs {} ranks (mpirun -np {}); this job has {}", tp, tp,
                tp, world.size());
  TESSERA_CHECK(kv_store.empty(), kInvalidArgument, "--tp does not support --kv-store yet");
  if (threads == 0) threads = world.threads_per_rank();
  LoadedModel lm = load_model(model, {.rank = world.rank(), .size = tp, .group = &world});
  if (world.rank() != 0) {
    ThreadPool pool(threads);
    const int64_t steps = follow_steps(*lm.model, world, pool);
    TESSERA_LOG_INFO("rank {}: followed {} steps; peak RSS {} MiB", world.rank(), steps, peak_rss_bytes() >> 20);
    lm = {};
    world.exit(0);
  }
  lm.model = std::make_unique<TensorParallelModel>(std::move(lm.model), world);
  return lm;
}

void SpecOptions::apply(engine::EngineConfig& c, const Model& target) {
  c.spec_method = spec::parse_method(method);
  TESSERA_CHECK(draft_model_path.empty() || c.spec_method == spec::Method::kDraft, kInvalidArgument,
                "--draft-model is for --spec draft");
  TESSERA_CHECK(draft_layers.empty() || c.spec_method == spec::Method::kLayers, kInvalidArgument,
                "--draft-layers is for --spec layers");
  if (c.spec_method == spec::Method::kDraft) {
    TESSERA_CHECK(!draft_model_path.empty(), kInvalidArgument, "--spec draft needs --draft-model FILE");
    draft_model = load_model(draft_model_path);
    c.spec_draft_model = draft_model.model.get();
  }
  if (!draft_layers.empty()) c.spec_skip_layers = spec::parse_layer_list(draft_layers, target.config().n_layer);
  c.spec_k = k;
  c.spec_ngram = {ngram_min, ngram_max};
  c.spec_adaptive = !fixed;
}

void KvPolicyOptions::add_to(CLI::App& app) {
  app.add_option("--kv-policy", policy,
                 "KV cache policy: dense, window, recompute, sink, h2o or spatten (docs/KV_POLICIES.md)")
      ->capture_default_str();
  app.add_option("--kv-budget", budget, "Most keys a token attends to under a bounded --kv-policy");
  app.add_option("--kv-sinks", sinks, "Tokens from the start kept by --kv-policy sink")->capture_default_str();
  app.add_option("--kv-recent", recent,
                 "Recent tokens always kept by --kv-policy h2o / spatten (default: budget / 2, spatten budget / 4)");
}

void check_prompt_cache_tp(const std::string& prompt_schema, int tp) {
  TESSERA_CHECK(tp == 1 || prompt_schema.empty(), kInvalidArgument,
                "tensor parallelism (--tp) does not support Prompt Cache modules (--prompt-schema) yet");
}

kv::KvPolicy KvPolicyOptions::get(int tp) const {
  const std::optional<kv::KvPolicyKind> kind = kv::parse_kv_policy(policy);
  TESSERA_CHECK(kind.has_value(), kInvalidArgument,
                "--kv-policy '{}' is not one of dense, window, recompute, sink, h2o, spatten", policy);
  kv::KvPolicy p{*kind, budget, sinks, 0};
  p.recent = recent;
  const std::string bad = kv::check_kv_policy(p);
  TESSERA_CHECK(bad.empty(), kInvalidArgument, "{}", bad);
  TESSERA_CHECK(tp == 1 || !p.bounded(), kInvalidArgument,
                "tensor parallelism (--tp) does not support bounded KV caches (--kv-policy {}) yet", policy);
  return p;
}

DType RunOptions::kv_dtype() const {
  auto t = parse_dtype(kv_type);
  TESSERA_CHECK(t && kernels::kv_type_supported(*t), kInvalidArgument,
                "--kv-type '{}' must be f32, f16, bf16, q8_0 or q4_0", kv_type);
  return *t;
}

LongRopeMode parse_long_rope(const std::string& name) {
  if (name == "sequence") return LongRopeMode::kSequence;
  TESSERA_CHECK(name == "context", kInvalidArgument, "--long-rope '{}' must be sequence or context", name);
  return LongRopeMode::kContext;
}

void add_integer_weight_flags(CLI::App& app) {
  app.add_flag_callback(
      "--w8a8", [] { setenv("TESSERA_W8A8", "1", 1); },
      "Quantize the layers' matrices to W8A8 at load (int8 per output channel; activations int8 per token; "
      "integer products at the int8 peak) (experimental; no SmoothQuant calibration)");
  app.add_flag_callback(
      "--w4a8", [] { setenv("TESSERA_W4A8", "1", 1); },
      "Quantize the layers' matrices to W4A8 at load (4-bit codes per output channel, clipped; activations "
      "int8 per token; the W8A8 products on unpacked codes): meant for a QuaRot-rotated model (quantize "
      "--method quarot --type f32)");
}

void add_long_rope_option(CLI::App& app, std::string& value) {
  app.add_option("--long-rope", value,
                 "Phi-3 LongRoPE: 'sequence' (transformers: a sequence past the original context turns with the long "
                 "factors, computed again when it crosses) or 'context' (llama.cpp: every sequence, when --ctx is "
                 "longer than the original context)")
      ->capture_default_str();
}

LongRopeMode RunOptions::long_rope_mode() const { return parse_long_rope(long_rope); }

engine::EngineConfig RunOptions::engine_config() const {
  engine::EngineConfig c;
  c.threads = threads;
  c.max_model_len = ctx;
  c.kv_type = kv_dtype();
  c.kv_hadamard = kv_hadamard;
  c.block_size = block_size;
  c.kv_memory_bytes = static_cast<size_t>(kv_memory);
  c.num_kv_blocks = kv_blocks;
  c.max_num_seqs = max_num_seqs;
  c.max_num_batched_tokens = max_batch_tokens;
  c.enable_prefix_caching = !no_prefix_cache;
  c.long_rope = long_rope_mode();
  c.kv_store = kv_store;
  c.kv_store_max_bytes = kv_store_max_bytes;
  c.kv_store_wait_s = kv_store_wait;
  c.kv_store_write_back = kv_store_write == "back";
  return c;
}

// --chat-template wins; else the model's own. A model whose template cannot
// be parsed is still served (completions work; chat answers 400), but a
// template the user named must load.
std::optional<server::ChatTemplate> resolve_chat_template(const std::string& option, const gguf::File& file) {
  const std::string own = file.get_string_or("tokenizer.chat_template", "");
  if (option.empty() && own.empty()) return std::nullopt;
  if (!option.empty()) return server::ChatTemplate::resolve(option, std::nullopt);
  try {
    return server::ChatTemplate::resolve("", own);
  } catch (const Error& e) {
    TESSERA_LOG_WARN("the model's chat template is not usable ({}); /v1/chat/completions will answer 400", e.what());
    return std::nullopt;
  }
}

engine::EngineConfig RunOptions::engine_config(const LoadedModel& lm) const {
  engine::EngineConfig c = engine_config();
  if (!c.kv_store.empty() && lm.file) c.weights_fingerprint = weights_fingerprint(*lm.file);
  return c;
}

void SamplingOptions::add_to(CLI::App& app) {
  app.add_option("-n,--n-predict", n_predict, "Tokens to generate (-1: until end of text or context)")->capture_default_str();
  app.add_option("--temp", temperature, "Temperature (0: greedy)")->capture_default_str();
  app.add_option("--top-k", top_k, "Top-k (0: off)")->capture_default_str();
  app.add_option("--top-p", top_p, "Top-p (1: off)")->capture_default_str();
  app.add_option("--min-p", min_p, "Min-p (0: off)")->capture_default_str();
  app.add_option("--repeat-penalty", repeat_penalty, "Repetition penalty (1: off)")->capture_default_str();
  app.add_option("--presence-penalty", presence_penalty, "Presence penalty")->capture_default_str();
  app.add_option("--frequency-penalty", frequency_penalty, "Frequency penalty")->capture_default_str();
  app.add_option("--seed", seed, "Random seed (-1: random)")->capture_default_str();
  app.add_flag("--ignore-eos", ignore_eos, "Do not stop at end-of-text tokens");
  app.add_option("--stop", stop, "Stop string (repeatable)");
  auto* js = app.add_option("--json-schema", json_schema_file, "Constrain the output to JSON valid against this JSON Schema file");
  auto* gr = app.add_option("--grammar", grammar_file, "Constrain the output to this GBNF grammar file (llama.cpp's format)");
  auto* rx = app.add_option("--regex", regex, "Constrain the output to match this regex (whole output)");
  js->excludes(gr)->excludes(rx);
  gr->excludes(rx);
  app.add_option("--json-whitespace", json_whitespace, "JSON layout under --json-schema: compact, spaced, flexible")
      ->check(CLI::IsMember({"compact", "spaced", "flexible"}))
      ->capture_default_str();
}

engine::SamplingParams SamplingOptions::params(int64_t remaining_context) const {
  engine::SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  p.repetition_penalty = repeat_penalty;
  p.presence_penalty = presence_penalty;
  p.frequency_penalty = frequency_penalty;
  if (seed >= 0) p.seed = static_cast<uint64_t>(seed);
  p.max_tokens = n_predict < 0 ? static_cast<int32_t>(remaining_context) : n_predict;
  p.ignore_eos = ignore_eos;
  p.stop = stop;
  if (!json_schema_file.empty()) {
    grammar::JsonSchemaOptions o;
    o.whitespace = json_whitespace == "compact" ? grammar::JsonWhitespace::kCompact
                   : json_whitespace == "flexible" ? grammar::JsonWhitespace::kFlexible
                                                   : grammar::JsonWhitespace::kSpaced;
    p.constraint = grammar::compile_json_schema_text(read_text_file(json_schema_file), o);
  } else if (!grammar_file.empty()) {
    p.constraint = grammar::compile_gbnf(read_text_file(grammar_file));
  } else if (!regex.empty()) {
    p.constraint = grammar::compile_regex(regex);
  }
  return p;
}

}  // namespace tessera::cli
