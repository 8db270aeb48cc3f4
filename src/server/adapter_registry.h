// The LoRA adapters a server serves by name (vLLM's --lora-modules and
// /v1/load_lora_adapter, /v1/unload_lora_adapter): a request names one in
// its "model" field. Thread-safe. Unloading only forgets the name: requests
// already running hold the adapter (a shared_ptr) and finish with it; new
// requests naming it get a 404.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/lora.h"

namespace tessera::server {

class AdapterRegistry {
 public:
  explicit AdapterRegistry(const ModelConfig& base) : base_(base) {}

  // Loads `path` as `name`. Throws ApiError 400 (a name in use, the base
  // model's name, an unreadable or unfitting file: the loader's message).
  void load(const std::string& name, const std::string& path, const std::string& base_name);
  // False when no adapter has that name.
  bool unload(const std::string& name);
  std::shared_ptr<const LoraAdapter> find(const std::string& name) const;

  struct Entry {
    std::string name, path;
    size_t bytes = 0;
  };
  std::vector<Entry> list() const;

 private:
  struct Loaded {
    std::string path;
    std::shared_ptr<const LoraAdapter> adapter;
  };
  const ModelConfig base_;
  mutable std::mutex mu_;
  std::map<std::string, Loaded> by_name_;
};

}  // namespace tessera::server
