#include "engine/prompt_cache.h"

#include <nlohmann/json.hpp>

#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "core/error.h"
#include "engine/sequence_runner.h"
#include "kv/prefix_hash.h"
#include "tokenizer/tokenizer.h"

namespace tessera::engine {

PromptSchema PromptSchema::parse(const std::string& text, const Tokenizer& tok) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(ErrorCode::kInvalidArgument, "prompt schema is not valid JSON: {}", e.what());
  }
  TESSERA_CHECK(j.is_object() && j.contains("modules") && j["modules"].is_array() && !j["modules"].empty(),
                kInvalidArgument, "prompt schema needs a non-empty 'modules' array");
  PromptSchema s;
  s.name = j.value("name", "schema");
  std::set<std::string> seen;
  int32_t pos = 1;  // BOS sits at 0
  for (const auto& m : j["modules"]) {
    TESSERA_CHECK(m.is_object() && m.contains("name") && m["name"].is_string() && m.contains("text") &&
                      m["text"].is_string(), kInvalidArgument, "each module needs string fields 'name' and 'text'");
    PromptModule pm;
    pm.name = m["name"].get<std::string>();
    pm.text = m["text"].get<std::string>();
    TESSERA_CHECK(seen.insert(pm.name).second, kInvalidArgument, "module '{}' is declared twice", pm.name);
    pm.tokens = tok.encode(pm.text, /*add_special=*/false);
    TESSERA_CHECK(!pm.tokens.empty(), kInvalidArgument, "module '{}' has no tokens", pm.name);
    pm.start_pos = pos;
    pos += static_cast<int32_t>(pm.tokens.size());
    s.modules.push_back(std::move(pm));
  }
  s.end_pos = pos;
  return s;
}

PromptSchema PromptSchema::load(const std::string& path, const Tokenizer& tok) {
  std::ifstream in(path);
  TESSERA_CHECK(in.good(), kIo, "cannot open prompt schema '{}'", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return parse(ss.str(), tok);
}

PromptCache::PromptCache(const Model& model, const Tokenizer& tok, PromptSchema schema, DType kv_type, ThreadPool& pool,
                         PromptCacheOptions options)
    : schema_(std::move(schema)), bos_(tok.bos_id()), options_(options) {
  stats_.budget_bytes = options_.compositions_bytes;
  TESSERA_CHECK(bos_ >= 0, kInvalidArgument, "Prompt Cache needs a model with a BOS token");
  TESSERA_CHECK(schema_.end_pos <= model.config().n_ctx_train, kOutOfRange,
                "prompt schema spans {} positions, more than the model's context of {}", schema_.end_pos,
                model.config().n_ctx_train);
  int64_t longest = 1;
  for (const PromptModule& m : schema_.modules) longest = std::max<int64_t>(longest, 1 + static_cast<int64_t>(m.tokens.size()));
  SequenceRunner runner(model, {.n_ctx = longest, .kv_type = kv_type}, pool);
  for (const PromptModule& m : schema_.modules) {
    // BOS at 0, then the module at its own positions: it attends to BOS and
    // to itself, never to other modules.
    std::vector<int32_t> toks = {bos_};
    std::vector<int32_t> pos = {0};
    for (size_t i = 0; i < m.tokens.size(); ++i) {
      toks.push_back(m.tokens[i]);
      pos.push_back(m.start_pos + static_cast<int32_t>(i));
    }
    runner.reset();
    runner.append(toks, false, pos);
    if (bos_kv_.n_tokens == 0) bos_kv_ = runner.export_kv(0, 1);
    module_kv_.push_back(runner.export_kv(1, runner.n_past()));
  }
}

size_t PromptCache::bytes() const {
  size_t n = bos_kv_.bytes();
  for (const DenseKv& d : module_kv_) n += d.bytes();
  return n;
}

PromptLayout PromptCache::compose(const std::vector<std::string>& names, const std::vector<int32_t>& free_tokens) const {
  TESSERA_CHECK(!free_tokens.empty(), kInvalidArgument, "a Prompt Cache prompt needs some text after its modules");
  std::vector<size_t> idx;
  for (const std::string& n : names) {
    size_t i = 0;
    while (i < schema_.modules.size() && schema_.modules[i].name != n) ++i;
    TESSERA_CHECK(i < schema_.modules.size(), kInvalidArgument, "unknown prompt module '{}' (schema '{}')", n, schema_.name);
    TESSERA_CHECK(idx.empty() || i > idx.back(), kInvalidArgument,
                  "prompt modules must be imported once each, in schema order ('{}' is out of order)", n);
    idx.push_back(i);
  }
  PromptLayout out;
  out.tokens = {bos_};
  out.positions = {0};
  int32_t next_pos = 1;
  for (size_t i : idx) {
    const PromptModule& m = schema_.modules[i];
    for (size_t t = 0; t < m.tokens.size(); ++t) {
      out.tokens.push_back(m.tokens[t]);
      out.positions.push_back(m.start_pos + static_cast<int32_t>(t));
    }
    next_pos = m.start_pos + static_cast<int32_t>(m.tokens.size());
  }
  for (int32_t t : free_tokens) {
    out.tokens.push_back(t);
    out.positions.push_back(next_pos++);
  }
  // The salt identifies the composition, so cached blocks of these states
  // are shared only between requests importing the same modules (never 0,
  // which plain prompts use).
  const std::vector<int32_t> ids(idx.begin(), idx.end());
  out.cache_salt = kv::block_hash(std::hash<std::string>{}(schema_.name), 0x50c4ac4e, ids) | 1;

  out.preloaded = composition(idx);
  return out;
}

std::shared_ptr<const DenseKv> PromptCache::build(const std::vector<size_t>& idx) const {
  auto d = std::make_shared<DenseKv>();
  d->n_layer = bos_kv_.n_layer;
  d->kv_dim = bos_kv_.kv_dim;
  d->n_tokens = 1;
  for (size_t i : idx) d->n_tokens += module_kv_[i].n_tokens;
  d->k.resize(static_cast<size_t>(d->n_layer * d->n_tokens * d->kv_dim));
  d->v.resize(d->k.size());
  const size_t row = static_cast<size_t>(d->kv_dim) * sizeof(float);
  for (int64_t l = 0; l < d->n_layer; ++l) {
    int64_t at = 0;
    std::memcpy(d->k_at(l, at), bos_kv_.k_at(l, 0), row);
    std::memcpy(d->v_at(l, at), bos_kv_.v_at(l, 0), row);
    ++at;
    for (size_t i : idx) {
      const DenseKv& m = module_kv_[i];
      std::memcpy(d->k_at(l, at), m.k_at(l, 0), row * m.n_tokens);
      std::memcpy(d->v_at(l, at), m.v_at(l, 0), row * m.n_tokens);
      at += m.n_tokens;
    }
  }
  return d;
}

std::shared_ptr<const DenseKv> PromptCache::composition(const std::vector<size_t>& idx) const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = compositions_.find(idx); it != compositions_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);  // now the most recent
      return it->second->second;
    }
  }
  // Built outside the lock (a copy of up to every module's K/V); two
  // requests racing for the same new subset may both build it, and the
  // second keeps the first's.
  std::shared_ptr<const DenseKv> d = build(idx);
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.builds_total;
  if (auto it = compositions_.find(idx); it != compositions_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second);
    return it->second->second;
  }
  const size_t need = d->bytes();
  if (need > options_.compositions_bytes) return d;  // served, not kept
  while (!lru_.empty() && stats_.bytes + need > options_.compositions_bytes) {
    stats_.bytes -= lru_.back().second->bytes();
    compositions_.erase(lru_.back().first);
    lru_.pop_back();
    ++stats_.evictions_total;
  }
  lru_.emplace_front(idx, d);
  compositions_.emplace(idx, lru_.begin());
  stats_.bytes += need;
  return d;
}

PromptCache::CompositionStats PromptCache::composition_stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  CompositionStats s = stats_;
  s.compositions = static_cast<int64_t>(compositions_.size());
  return s;
}

}  // namespace tessera::engine
