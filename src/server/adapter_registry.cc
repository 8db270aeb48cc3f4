#include "server/adapter_registry.h"

#include <fmt/format.h>

#include "adapters/lora_gguf.h"
#include "core/error.h"
#include "server/openai_request.h"

namespace tessera::server {

void AdapterRegistry::load(const std::string& name, const std::string& path, const std::string& base_name) {
  if (name.empty()) throw ApiError(400, "'lora_name' must not be empty", "lora_name");
  if (name == base_name) {
    throw ApiError(400, fmt::format("'{}' is the base model's name", name), "lora_name");
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (by_name_.count(name) != 0) {
      throw ApiError(400, fmt::format("The lora adapter '{}' has already been loaded.", name), "lora_name");
    }
  }
  std::shared_ptr<const LoraAdapter> a;
  try {
    a = adapters::load_lora(path, base_);  // outside the lock: a slow file does not stall lookups
  } catch (const Error& e) {
    throw ApiError(400, fmt::format("cannot load LoRA adapter '{}': {}", name, e.what()), "lora_path");
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!by_name_.emplace(name, Loaded{path, std::move(a)}).second) {
    throw ApiError(400, fmt::format("The lora adapter '{}' has already been loaded.", name), "lora_name");
  }
}

bool AdapterRegistry::unload(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  return by_name_.erase(name) != 0;
}

std::shared_ptr<const LoraAdapter> AdapterRegistry::find(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second.adapter;
}

std::vector<AdapterRegistry::Entry> AdapterRegistry::list() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Entry> out;
  for (const auto& [name, l] : by_name_) out.push_back({name, l.path, l.adapter->bytes()});
  return out;
}

}  // namespace tessera::server
