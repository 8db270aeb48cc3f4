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
#include <list>
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

struct PromptCacheOptions {
  // Bytes of composed K/V kept for reuse. A schema of m modules has 2^m
  // subsets, each composed once into its own copy of BOS + modules, so
  // without a bound clients naming many subsets would grow memory without
  // end. Least recently used compositions go first; one larger than the
  // whole budget is built for its request and not kept.
  size_t compositions_bytes = size_t{256} << 20;
};

class PromptCache {
 public:
  // Computes every module's K/V now (one forward pass per module).
  PromptCache(const Model& model, const Tokenizer& tok, PromptSchema schema, DType kv_type, ThreadPool& pool,
              PromptCacheOptions options = {});

  const PromptSchema& schema() const { return schema_; }
  // The modules' own K/V (compositions not counted).
  size_t bytes() const;

  struct CompositionStats {
    size_t bytes = 0;         // held by the kept compositions
    size_t budget_bytes = 0;  // PromptCacheOptions::compositions_bytes
    int64_t compositions = 0;
    int64_t builds_total = 0;     // compositions built (first use, or again after eviction)
    int64_t evictions_total = 0;  // dropped to stay within the budget
  };
  CompositionStats composition_stats() const;

  // The layout of `modules` (names, in schema order) followed by
  // `free_tokens` (no BOS; at least one token). Thread-safe. Throws
  // Error(kInvalidArgument) for unknown or out-of-order module names.
  PromptLayout compose(const std::vector<std::string>& modules, const std::vector<int32_t>& free_tokens) const;

 private:
  PromptSchema schema_;
  int32_t bos_ = -1;
  DenseKv bos_kv_;                  // K/V of BOS at position 0
  std::vector<DenseKv> module_kv_;  // per module, its tokens at its positions
  // BOS and the modules idx, concatenated: a request's preloaded K/V.
  std::shared_ptr<const DenseKv> build(const std::vector<size_t>& idx) const;
  // The kept composition of idx, or a new one (kept if it fits the budget).
  std::shared_ptr<const DenseKv> composition(const std::vector<size_t>& idx) const;

  PromptCacheOptions options_;
  // Compositions by module subset, in LRU order (front: most recent). A
  // request holds its composition's shared_ptr, so evicting one in use only
  // drops the cache's reference.
  using Lru = std::list<std::pair<std::vector<size_t>, std::shared_ptr<const DenseKv>>>;
  mutable std::mutex mu_;  // guards the members below
  mutable Lru lru_;
  mutable std::map<std::vector<size_t>, Lru::iterator> compositions_;
  mutable CompositionStats stats_;
};

}  // namespace tessera::engine
