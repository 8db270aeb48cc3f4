// The adapters a server serves by name: LoRA adapters (vLLM's
// --lora-modules and /v1/load_lora_adapter, /v1/unload_lora_adapter; a
// request names one in its "model" field) and soft prompts (a request's
// "soft_prompt"). Thread-safe.
//
// LoRA adapters live in a pool with a memory budget: when resident adapters
// exceed it, the least recently used idle ones (no running request holds
// them) give back their weights and keep only their name and file; the next
// request naming one reloads it from that file. Adapters in use are never
// evicted, so the pool may exceed its budget while they run. Unloading only
// forgets the name: requests already running hold the adapter (a
// shared_ptr) and finish with it; new requests naming it get a 404.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "format/model_config.h"
#include "adapters/lora.h"
#include "adapters/soft_prompt.h"

namespace tessera {

class AdapterRegistry {
 public:
  // budget_bytes: the pool's budget for resident LoRA weights; 0: unbounded.
  // type: how loaded adapters are kept (store_lora).
  explicit AdapterRegistry(const ModelConfig& base, size_t budget_bytes = 0,
                           kernels::LoraWeightType type = kernels::LoraWeightType::kF32)
      : base_(base), type_(type) {
    pool_->budget = budget_bytes;
  }

  // Loads `path` as `name`. Throws ApiError 400 (a name in use, the base
  // model's name, an unreadable or unfitting file: the loader's message, an
  // adapter larger than the whole budget).
  void load(const std::string& name, const std::string& path, const std::string& base_name);
  // False when no adapter has that name.
  bool unload(const std::string& name);
  // The adapter named `name`, reloaded from its file if it was evicted;
  // nullptr when no adapter has that name. Throws ApiError 500 when an
  // evicted adapter's file can no longer be read.
  std::shared_ptr<const LoraAdapter> find(const std::string& name);

  // Soft prompts (adapters/soft_prompt_file.h), registered at start.
  // Throws ApiError 400 like load().
  void add_soft_prompt(const std::string& name, const std::string& path, const std::string& base_name);
  std::shared_ptr<const SoftPrompt> find_soft_prompt(const std::string& name) const;

  struct Entry {
    std::string name, path;
    size_t bytes = 0;       // of its weights, resident or not
    bool resident = false;  // false: evicted, reloaded on demand
  };
  std::vector<Entry> list() const;
  std::vector<Entry> soft_prompts() const;

  struct PoolStats {
    size_t budget_bytes = 0, resident_bytes = 0;
    int64_t registered = 0, resident = 0;
    int64_t loads_total = 0;      // file reads: loads and reloads
    int64_t evictions_total = 0;  // weights given back under the budget
  };
  PoolStats pool_stats() const;

 private:
  struct Loaded {
    std::string path;
    size_t bytes = 0;
    std::shared_ptr<const LoraAdapter> adapter;  // null while evicted
    uint64_t last_used = 0;
  };
  // The pool's state, shared with the leases handed to requests: a lease
  // released after the registry is gone finds nothing to do.
  struct Pool {
    size_t budget = 0;
    std::mutex mu;
    std::map<std::string, Loaded> by_name;
    size_t resident_bytes = 0;
    uint64_t clock = 0;
    int64_t loads_total = 0, evictions_total = 0;
    // Evicts least recently used idle adapters other than `keep` until the
    // resident weights fit the budget (or nothing idle is left). mu held.
    void evict_over_budget(const std::string& keep);
  };
  // What find() hands out: the adapter, whose release re-checks the budget
  // (the moment an adapter becomes idle is when it can be evicted).
  static std::shared_ptr<const LoraAdapter> lease(const std::shared_ptr<Pool>& pool,
                                                  std::shared_ptr<const LoraAdapter> adapter);

  const ModelConfig base_;
  const kernels::LoraWeightType type_;
  std::shared_ptr<Pool> pool_ = std::make_shared<Pool>();
  std::map<std::string, std::pair<std::string, std::shared_ptr<const SoftPrompt>>> soft_prompts_;  // under pool_->mu
};

}  // namespace tessera
