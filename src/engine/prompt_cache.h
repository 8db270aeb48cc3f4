// Prompt Cache (Gim et al., "Prompt Cache: Modular Attention Reuse for
// Low-Latency Inference", MLSys 2024): reuse the attention states of text
// modules that appear at *different* places in different prompts.
//
// A schema declares named modules (system text, documents, examples) and
// gives each a fixed range of position IDs, in schema order, after BOS at
// position 0. Each module's K/V is computed once, on its own (it attends to
// BOS and to itself only), at its own positions. A prompt imports any
// subset of modules, in schema order, followed by free text; the imported
// K/V are written into the request's cache and only the free text is
// computed, at positions following the last imported module.
//
// The trade-off: modules do not attend to each other (the paper's
// assumption), so the states differ from computing the whole prompt in one
// pass; bench/prompt_cache measures the KL divergence this costs.
//
// Schema file (JSON):
//   {"name": "...", "modules": [{"name": "system", "text": "..."}, ...]}
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "model/kv_cache.h"
#include "model/model.h"

namespace tessera {
class Tokenizer;
}

namespace tessera::engine {

struct PromptModule {
  std::string name;
  std::string text;
  std::vector<int32_t> tokens;  // without BOS
  int32_t start_pos = 0;        // position of its first token
};

struct PromptSchema {
  std::string name;
  std::vector<PromptModule> modules;
  int32_t end_pos = 1;  // one past the last position any module uses

  // Parses the JSON schema and tokenizes every module. Throws
  // Error(kInvalidArgument) on malformed schemas.
  static PromptSchema parse(const std::string& json_text, const Tokenizer& tok);
  static PromptSchema load(const std::string& path, const Tokenizer& tok);
};

// A prompt laid out for the engine: tokens, their positions, and the K/V of
// the leading imported part.
struct PromptLayout {
  std::vector<int32_t> tokens;
  std::vector<int32_t> positions;
  std::shared_ptr<const DenseKv> preloaded;  // K/V of tokens [0, preloaded->n_tokens)
  uint64_t cache_salt = 0;
};

class PromptCache {
 public:
  // Computes every module's K/V now (one forward pass per module).
  PromptCache(const Model& model, const Tokenizer& tok, PromptSchema schema, DType kv_type, ThreadPool& pool);

  const PromptSchema& schema() const { return schema_; }
  size_t bytes() const;

  // The layout of `modules` (names, in schema order) followed by
  // `free_tokens` (no BOS; at least one token). Thread-safe. Throws
  // Error(kInvalidArgument) for unknown or out-of-order module names.
  PromptLayout compose(const std::vector<std::string>& modules, const std::vector<int32_t>& free_tokens) const;

 private:
  PromptSchema schema_;
  int32_t bos_ = -1;
  DenseKv bos_kv_;                  // K/V of BOS at position 0
  std::vector<DenseKv> module_kv_;  // per module, its tokens at its positions
  mutable std::mutex mu_;
  mutable std::map<std::vector<size_t>, std::shared_ptr<const DenseKv>> compositions_;
};

}  // namespace tessera::engine
