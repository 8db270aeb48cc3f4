#include "adapters/registry.h"

#include <fmt/format.h>

#include "adapters/lora_gguf.h"
#include "adapters/soft_prompt_file.h"
#include "core/error.h"
#include "core/api_error.h"

namespace tessera {

namespace {

std::shared_ptr<const LoraAdapter> read_adapter(const std::string& name, const std::string& path,
                                                const ModelConfig& base, kernels::LoraWeightType type) {
  try {
    return adapters::stored_as(adapters::load_lora(path, base), type);
  } catch (const Error& e) {
    throw ApiError(400, fmt::format("cannot load LoRA adapter '{}': {}", name, e.what()), "lora_path");
  }
}

}  // namespace

void AdapterRegistry::Pool::evict_over_budget(const std::string& keep) {
  while (budget != 0 && resident_bytes > budget) {
    Loaded* lru = nullptr;
    for (auto& [name, l] : by_name) {
      // use_count 1: only the pool holds it (no lease of a running request).
      if (name == keep || !l.adapter || l.adapter.use_count() > 1) continue;
      if (lru == nullptr || l.last_used < lru->last_used) lru = &l;
    }
    if (lru == nullptr) return;  // every resident adapter is in use: over budget until one is released
    lru->adapter.reset();
    resident_bytes -= lru->bytes;
    ++evictions_total;
  }
}

std::shared_ptr<const LoraAdapter> AdapterRegistry::lease(const std::shared_ptr<Pool>& pool,
                                                          std::shared_ptr<const LoraAdapter> adapter) {
  struct Lease {
    std::shared_ptr<const LoraAdapter> adapter;
  };
  const LoraAdapter* raw = adapter.get();
  std::shared_ptr<Lease> l(new Lease{std::move(adapter)}, [weak = std::weak_ptr<Pool>(pool)](Lease* l) {
    delete l;  // first: the adapter may now be idle
    if (std::shared_ptr<Pool> p = weak.lock()) {
      std::lock_guard<std::mutex> lock(p->mu);
      p->evict_over_budget("");
    }
  });
  return std::shared_ptr<const LoraAdapter>(std::move(l), raw);  // aliasing: the lease owns, the adapter is seen
}

void AdapterRegistry::load(const std::string& name, const std::string& path, const std::string& base_name) {
  if (name.empty()) throw ApiError(400, "'lora_name' must not be empty", "lora_name");
  if (name == base_name) {
    throw ApiError(400, fmt::format("'{}' is the base model's name", name), "lora_name");
  }
  Pool& p = *pool_;
  {
    std::lock_guard<std::mutex> lock(p.mu);
    if (p.by_name.count(name) != 0) {
      throw ApiError(400, fmt::format("The lora adapter '{}' has already been loaded.", name), "lora_name");
    }
  }
  std::shared_ptr<const LoraAdapter> a = read_adapter(name, path, base_, type_);  // outside the lock: lookups go on
  const size_t bytes = a->bytes();
  if (p.budget != 0 && bytes > p.budget) {
    throw ApiError(400, fmt::format("LoRA adapter '{}' needs {:.2f} MiB, more than the adapter pool's budget of "
                                    "{:.2f} MiB",
                                    name, bytes / 1048576.0, p.budget / 1048576.0),
                   "lora_path");
  }
  std::lock_guard<std::mutex> lock(p.mu);
  if (!p.by_name.emplace(name, Loaded{path, bytes, std::move(a), ++p.clock}).second) {
    throw ApiError(400, fmt::format("The lora adapter '{}' has already been loaded.", name), "lora_name");
  }
  p.resident_bytes += bytes;
  ++p.loads_total;
  p.evict_over_budget(name);
}

bool AdapterRegistry::unload(const std::string& name) {
  Pool& p = *pool_;
  std::shared_ptr<const LoraAdapter> dropped;  // released after the lock
  std::lock_guard<std::mutex> lock(p.mu);
  auto it = p.by_name.find(name);
  if (it == p.by_name.end()) return false;
  if (it->second.adapter) p.resident_bytes -= it->second.bytes;
  dropped = std::move(it->second.adapter);
  p.by_name.erase(it);
  return true;
}

std::shared_ptr<const LoraAdapter> AdapterRegistry::find(const std::string& name) {
  Pool& p = *pool_;
  std::string path;
  {
    std::lock_guard<std::mutex> lock(p.mu);
    auto it = p.by_name.find(name);
    if (it == p.by_name.end()) return nullptr;
    it->second.last_used = ++p.clock;
    if (it->second.adapter) return lease(pool_, it->second.adapter);
    path = it->second.path;
  }
  // Evicted: reload outside the lock (other lookups go on meanwhile).
  std::shared_ptr<const LoraAdapter> a;
  try {
    a = adapters::stored_as(adapters::load_lora(path, base_), type_);
  } catch (const Error& e) {
    throw ApiError(500, fmt::format("LoRA adapter '{}' was evicted from the adapter pool and cannot be reloaded: {}",
                                    name, e.what()));
  }
  std::lock_guard<std::mutex> lock(p.mu);
  auto it = p.by_name.find(name);
  if (it == p.by_name.end() || it->second.path != path) return nullptr;  // unloaded (or replaced) meanwhile
  ++p.loads_total;
  if (!it->second.adapter) {  // else another request reloaded it first: share that copy
    it->second.adapter = std::move(a);
    p.resident_bytes += it->second.bytes;
  }
  it->second.last_used = ++p.clock;
  std::shared_ptr<const LoraAdapter> out = lease(pool_, it->second.adapter);
  p.evict_over_budget(name);
  return out;
}

void AdapterRegistry::add_soft_prompt(const std::string& name, const std::string& path, const std::string& base_name) {
  if (name.empty() || name == base_name) {
    throw ApiError(400, fmt::format("'{}' cannot name a soft prompt", name), "soft_prompt");
  }
  std::shared_ptr<const SoftPrompt> sp;
  try {
    sp = adapters::load_soft_prompt(path, base_);
  } catch (const Error& e) {
    throw ApiError(400, fmt::format("cannot load soft prompt '{}': {}", name, e.what()), "soft_prompt");
  }
  std::lock_guard<std::mutex> lock(pool_->mu);
  if (!soft_prompts_.emplace(name, std::make_pair(path, std::move(sp))).second) {
    throw ApiError(400, fmt::format("soft prompt '{}' is already loaded", name), "soft_prompt");
  }
}

std::shared_ptr<const SoftPrompt> AdapterRegistry::find_soft_prompt(const std::string& name) const {
  std::lock_guard<std::mutex> lock(pool_->mu);
  auto it = soft_prompts_.find(name);
  return it == soft_prompts_.end() ? nullptr : it->second.second;
}

std::vector<AdapterRegistry::Entry> AdapterRegistry::list() const {
  std::lock_guard<std::mutex> lock(pool_->mu);
  std::vector<Entry> out;
  for (const auto& [name, l] : pool_->by_name) out.push_back({name, l.path, l.bytes, l.adapter != nullptr});
  return out;
}

std::vector<AdapterRegistry::Entry> AdapterRegistry::soft_prompts() const {
  std::lock_guard<std::mutex> lock(pool_->mu);
  std::vector<Entry> out;
  for (const auto& [name, p] : soft_prompts_) out.push_back({name, p.first, p.second->bytes(), true});
  return out;
}

AdapterRegistry::PoolStats AdapterRegistry::pool_stats() const {
  const Pool& p = *pool_;
  std::lock_guard<std::mutex> lock(pool_->mu);
  PoolStats s;
  s.budget_bytes = p.budget;
  s.resident_bytes = p.resident_bytes;
  s.registered = static_cast<int64_t>(p.by_name.size());
  for (const auto& [name, l] : p.by_name) s.resident += l.adapter != nullptr;
  s.loads_total = p.loads_total;
  s.evictions_total = p.evictions_total;
  return s;
}

}  // namespace tessera
