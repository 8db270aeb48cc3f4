// Options shared by the subcommands that run a model: one struct, one place
// that registers them, so -t, --ctx, --kv-type mean the same everywhere.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "core/dtype.h"
#include "core/error.h"
#include "engine/engine.h"
#include "engine/sampling_params.h"
#include "kv/kv_policy.h"
#include "template/chat_template.h"

namespace tessera::cli {

// -t for every subcommand: an explicit N is fixed; absent (0), the pool
// has one thread per core and adapts its width (core/thread_pool.h).
inline constexpr const char* kThreadsHelp =
    "Threads, fixed (default: one per core, using fewer while other programs keep cores busy)";

// A bounded KV cache (kv/kv_policy.h, docs/KV_POLICIES.md):
// --kv-policy dense|window|recompute|sink|h2o|spatten --kv-budget N
// [--kv-sinks S] [--kv-recent R].
struct KvPolicyOptions {
  std::string policy = "dense";
  int64_t budget = 0;
  int32_t sinks = 4;
  int32_t recent = -1;  // -1: the policy's default
  void add_to(CLI::App& app);
  // Throws Error (kInvalidArgument) for an unknown name or a budget that
  // does not fit the policy.
  // tp: the run's --tp (bounded policies move keys outside the steps the
  // other ranks follow: refused under tensor parallelism).
  kv::KvPolicy get(int tp = 1) const;
};

// Prompt Cache modules are copied into a cache outside any step, which the
// other ranks of --tp would not see: refused (every rank, before loading).
void check_prompt_cache_tp(const std::string& prompt_schema, int tp);

struct RunOptions {
  std::string model;
  int threads = 0;  // 0: adaptive, all cores
  int64_t ctx = 0;           // 0: the model's training context
  std::string kv_type = "f16";
  bool kv_hadamard = false;
  int32_t block_size = 16;
  int64_t kv_memory = 0;     // bytes; 0: sized for the sequences and context
  int32_t kv_blocks = 0;
  int32_t max_num_seqs = 64;
  int32_t max_batch_tokens = 512;
  bool no_prefix_cache = false;
  std::string long_rope = "sequence";
  // The global prompt cache's lower tiers (engine/engine.h EngineConfig::kv_store).
  std::vector<std::string> kv_store;
  int64_t kv_store_max_bytes = 0;
  double kv_store_wait = 2.0;
  std::string kv_store_write = "through";
  int tp = 1;  // --tp: ranks the model is split over (mpirun -np tp)

  // model_optional: -m may be omitted; resolve_model() then picks the
  // bundled stories260K (models/ in the repository or the install).
  void add_to(CLI::App& app, bool engine_options = true, bool model_optional = false);
  void resolve_model();
  DType kv_dtype() const;
  LongRopeMode long_rope_mode() const;
  engine::EngineConfig engine_config() const;
  // The same, with what needs the loaded model (the weights' fingerprint
  // when --kv-store is given).
  engine::EngineConfig engine_config(const LoadedModel& lm) const;
  // The model of -m. With --tp N (under mpirun -np N): this rank's shard;
  // rank 0 gets a TensorParallelModel and goes on with the command, the
  // other ranks follow rank 0's steps here and exit when it is done.
  LoadedModel load();
};

// --long-rope sequence|context (model/model.h LongRopeMode); throws Error
// for another name.
LongRopeMode parse_long_rope(const std::string& name);
// Registers --long-rope into `value`.
void add_long_rope_option(CLI::App& app, std::string& value);
// --w8a8 and --w4a8 (they set TESSERA_W8A8 / TESSERA_W4A8 for the model's load).
void add_integer_weight_flags(CLI::App& app);

// --temp, --top-k, ... ; defaults as llama.cpp's CLI uses.
struct SamplingOptions {
  float temperature = 0.8f;
  int32_t top_k = 40;
  float top_p = 0.95f;
  float min_p = 0.05f;
  float repeat_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int64_t seed = -1;
  int32_t n_predict = 64;
  bool ignore_eos = false;
  std::vector<std::string> stop;
  // Structured output (at most one): a JSON Schema file, a GBNF file, a regex.
  std::string json_schema_file;
  std::string grammar_file;
  std::string regex;
  std::string json_whitespace = "spaced";

  void add_to(CLI::App& app);
  engine::SamplingParams params(int64_t remaining_context) const;
};

// --spec, --spec-k, ...: speculative decoding (spec/, engine/engine.h).
struct SpecOptions {
  std::string method = "none";
  int32_t k = 8;
  int32_t ngram_min = 2;
  int32_t ngram_max = 4;
  bool fixed = false;
  std::string draft_model_path;  // --draft-model (draft)
  std::string draft_layers;      // --draft-layers (layers)
  LoadedModel draft_model;       // loaded by apply(); outlives the engine with these options

  void add_to(CLI::App& app);
  // Fills c's speculative fields for `target` (loads the draft model).
  void apply(engine::EngineConfig& c, const Model& target);
};

// Where adapter options are offered: the single-sequence commands (logits,
// perplexity: --lora), the engine's (generate, batch: also --soft-prompt
// FILE) and the server's (NAME=FILE for both, --lora-pool).
// kChat: --lora FILE for every turn, NAME=FILE for /adapter NAME.
enum class AdapterScope { kSequence, kEngine, kServer, kChat };

// --lora FILE (repeatable: deltas summed), --lora-scale S, --soft-prompt
// FILE. With `serve`, --lora NAME=FILE serves an adapter by name (a
// request's "model") and --soft-prompt NAME=FILE a soft prompt (a request's
// "soft_prompt"); --lora-pool caps the resident adapters' memory.
// --lora-type keeps adapters in F16 or Q8_0 (adapters::store_lora).
struct AdapterOptions {
  std::vector<std::string> lora;
  float lora_scale = 1.0f;
  std::vector<std::string> soft_prompt;
  std::string lora_pool;  // bytes ("512M"); empty: unbounded
  std::string lora_type = "f32";  // how adapters are kept: f32, f16, q8_0
  AdapterScope scope = AdapterScope::kSequence;

  kernels::LoraWeightType weight_type() const;

  void add_to(CLI::App& app, AdapterScope where);
  // The NAME=FILE entries of --lora / --soft-prompt (serve only; elsewhere
  // they are an error).
  std::vector<std::pair<std::string, std::string>> named() const;
  std::vector<std::pair<std::string, std::string>> named_soft_prompts() const;
  // Loads the adapters for `base` into c.lora and c.soft_prompt (nothing
  // without --lora FILE / --soft-prompt FILE).
  void apply(engine::EngineConfig& c, const Model& base) const;
  std::shared_ptr<const LoraAdapter> load(const Model& base) const;  // nullptr without plain --lora FILE
};

// --chat-template wins; else the model's own (nullopt when it has none, or
// when its own cannot be parsed: a warning says so). A template the user
// named must load.
std::optional<server::ChatTemplate> resolve_chat_template(const std::string& option, const gguf::File& file);

// A file that ships with Tessera (the bundled model, the chat page): beside
// the binary's build folder in a checkout (build/tessera -> REL), or under
// share/tessera once installed. `tried` lists where it looked.
std::optional<std::string> bundled_path(const std::string& rel, std::string& tried);

// Parses "512", "64M", "2G" (binary units).
size_t parse_bytes(const std::string& s);

}  // namespace tessera::cli
