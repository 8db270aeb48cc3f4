#include "server/metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace tessera::server {

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  if (!std::isfinite(value)) return;
  // First bucket whose upper bound holds the value (le is inclusive).
  const size_t b = static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin());
  std::lock_guard<std::mutex> lock(mu_);
  ++counts_[b];
  sum_ += value;
  ++count_;
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot s;
  s.bounds = bounds_;
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t acc = 0;
  for (uint64_t c : counts_) {
    acc += c;
    s.cumulative.push_back(acc);
  }
  s.sum = sum_;
  s.count = count_;
  return s;
}

namespace {

// vLLM's buckets for the same three histograms, so dashboards carry over.
std::vector<double> ttft_buckets() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};
}
std::vector<double> itl_buckets() {
  return {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};
}
std::vector<double> e2e_buckets() {
  return {0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0};
}

// Prometheus floats: shortest round-trip form; integers without exponent.
std::string num(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", v);
}

void header(std::string& out, const char* name, const char* type, const char* help) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

void scalar(std::string& out, const char* name, const char* type, const char* help, double value) {
  header(out, name, type, help);
  out += fmt::format("{} {}\n", name, num(value));
}

void histogram(std::string& out, const char* name, const char* help, const Histogram& h) {
  header(out, name, "histogram", help);
  const Histogram::Snapshot s = h.snapshot();
  for (size_t i = 0; i < s.bounds.size(); ++i) {
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, num(s.bounds[i]), s.cumulative[i]);
  }
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n", name, s.cumulative.back());
  out += fmt::format("{}_sum {}\n{}_count {}\n", name, num(s.sum), name, s.count);
}

// Label values escape backslash, double quote and newline.
std::string label(const std::string& v) {
  std::string o;
  for (char c : v) {
    if (c == '\\' || c == '"') o += '\\';
    if (c == '\n') {
      o += "\\n";
      continue;
    }
    o += c;
  }
  return o;
}

}  // namespace

Metrics::Metrics() : ttft_(ttft_buckets()), itl_(itl_buckets()), e2e_(e2e_buckets()) {}

// The global prompt cache's tiers: one series per tier and counter.
static void write_kv_store(std::string& out, const kvstore::KvStoreStats& k, int64_t hit_tokens) {
  scalar(out, "tessera_kv_store_hit_tokens_total", "counter", "Prompt tokens loaded from the lower tiers of the prefix cache.",
         static_cast<double>(hit_tokens));
  const auto per_tier = [&](const char* name, const char* help, auto field) {
    header(out, name, "counter", help);
    for (const kvstore::TierStats& t : k.tiers) out += fmt::format("{}{{tier=\"{}\"}} {}\n", name, t.tier, field(t));
  };
  per_tier("tessera_kv_store_hits_total", "Blocks loaded from the tier.", [](const auto& t) { return t.hits; });
  per_tier("tessera_kv_store_misses_total", "Block lookups the tier did not have.", [](const auto& t) { return t.misses; });
  per_tier("tessera_kv_store_corrupt_total", "Records that failed their check (dropped, recomputed).",
           [](const auto& t) { return t.corrupt; });
  per_tier("tessera_kv_store_read_errors_total", "Lookups the tier could not answer.",
           [](const auto& t) { return t.read_errors; });
  per_tier("tessera_kv_store_writes_total", "Blocks written to the tier.", [](const auto& t) { return t.writes; });
  per_tier("tessera_kv_store_write_errors_total", "Blocks the tier refused (full disk, connection).",
           [](const auto& t) { return t.write_errors; });
  per_tier("tessera_kv_store_read_bytes_total", "Bytes loaded from the tier.", [](const auto& t) { return t.bytes_read; });
  per_tier("tessera_kv_store_written_bytes_total", "Bytes written to the tier.",
           [](const auto& t) { return t.bytes_written; });
  scalar(out, "tessera_kv_store_writes_dropped_total", "counter", "Blocks not written: the write queue was full.",
         static_cast<double>(k.writes_dropped));
  scalar(out, "tessera_kv_store_queue_bytes", "gauge", "Bytes waiting to be written.", static_cast<double>(k.queue_bytes));
  header(out, "tessera_kv_store_load_seconds", "summary", "Time from a request's arrival to its stored blocks being ready.");
  out += fmt::format("tessera_kv_store_load_seconds_sum {}\ntessera_kv_store_load_seconds_count {}\n", k.load_seconds_sum,
                     k.loads);
  scalar(out, "tessera_kv_store_load_seconds_max", "gauge", "Longest load so far.", k.load_seconds_max);
}

void Metrics::count_finished(const char* finish_reason) {
  std::lock_guard<std::mutex> lock(mu_);
  ++finished_[finish_reason];
}

void Metrics::watch_prompt_cache(const engine::PromptCache* pc) {
  std::lock_guard<std::mutex> lock(mu_);
  prompt_cache_ = pc;
}

void Metrics::count_http(const std::string& path, int status) {
  std::lock_guard<std::mutex> lock(mu_);
  ++http_[{path, status}];
}

std::string Metrics::render(const engine::EngineStats* st, int64_t in_flight,
                            const AdapterRegistry::PoolStats* pool) const {
  std::string out;
  out.reserve(8192);
  if (st != nullptr) {
    scalar(out, "tessera_num_requests_running", "gauge", "Sequences in the running batch.", st->num_running);
    scalar(out, "tessera_num_requests_waiting", "gauge", "Sequences waiting to be scheduled.", st->num_waiting);
    scalar(out, "tessera_kv_blocks_used", "gauge", "KV cache blocks referenced by a sequence.", st->kv_blocks_used);
    scalar(out, "tessera_kv_blocks_total", "gauge", "Usable KV cache blocks.", st->kv_blocks_total);
    scalar(out, "tessera_kv_cache_usage_ratio", "gauge", "Fraction of KV blocks in use.",
           st->kv_blocks_total > 0 ? static_cast<double>(st->kv_blocks_used) / st->kv_blocks_total : 0.0);
    scalar(out, "tessera_prefix_cache_cached_blocks", "gauge", "Blocks holding a hashed prefix.", st->prefix_cached_blocks);
    scalar(out, "tessera_prompt_tokens_total", "counter", "Prompt tokens admitted.", st->prompt_tokens_total);
    scalar(out, "tessera_generation_tokens_total", "counter", "Tokens generated.", st->generation_tokens_total);
    scalar(out, "tessera_prefix_cache_query_tokens_total", "counter", "Prompt tokens looked up in the prefix cache.",
           st->prefix_query_tokens_total);
    scalar(out, "tessera_prefix_cache_hit_tokens_total", "counter", "Prompt tokens served from the prefix cache.",
           st->prefix_hit_tokens_total);
    scalar(out, "tessera_prefix_cache_evictions_total", "counter", "Cached blocks evicted for reuse.",
           st->prefix_evictions_total);
    scalar(out, "tessera_preemptions_total", "counter", "Sequences preempted (recomputed later).", st->preemptions_total);
    scalar(out, "tessera_long_rope_restarts_total", "counter",
           "Sequences computed again on growing past LongRoPE's original context.", st->long_rope_restarts_total);
    scalar(out, "tessera_requests_failed_total", "counter",
           "Sequences ended by a fault in their own work (the others stepped on).", st->requests_failed_total);
    scalar(out, "tessera_engine_restarts_total", "counter",
           "Faults in shared work (the forward pass) the engine restarted from.", st->engine_restarts_total);
    scalar(out, "tessera_engine_steps_total", "counter", "Engine iterations run.", st->steps_total);
    scalar(out, "tessera_spec_draft_tokens_total", "counter", "Speculative draft tokens verified.",
           st->spec_drafted_tokens_total);
    scalar(out, "tessera_spec_accepted_tokens_total", "counter", "Speculative draft tokens accepted.",
           st->spec_accepted_tokens_total);
    scalar(out, "tessera_spec_verify_steps_total", "counter", "Sequence-steps that verified a draft.",
           st->spec_verify_steps_total);
    scalar(out, "tessera_generation_tokens_per_step", "gauge", "Tokens generated per engine step, over the run.",
           st->steps_total > 0 ? static_cast<double>(st->generation_tokens_total) / st->steps_total : 0.0);
    if (st->kv_store) write_kv_store(out, *st->kv_store, st->store_hit_tokens_total);
    if (st->n_expert > 0 && !st->expert_tokens_total.empty()) {
      header(out, "tessera_moe_expert_tokens_total", "counter", "Tokens routed to each expert of each layer.");
      for (size_t i = 0; i < st->expert_tokens_total.size(); ++i) {
        out += fmt::format("tessera_moe_expert_tokens_total{{layer=\"{}\",expert=\"{}\"}} {}\n",
                           i / static_cast<size_t>(st->n_expert), i % static_cast<size_t>(st->n_expert),
                           st->expert_tokens_total[i]);
      }
    }
  }
  if (pool != nullptr) {
    scalar(out, "tessera_lora_adapters_registered", "gauge", "LoRA adapters served by name.",
           static_cast<double>(pool->registered));
    scalar(out, "tessera_lora_adapters_resident", "gauge", "LoRA adapters whose weights are in memory.",
           static_cast<double>(pool->resident));
    scalar(out, "tessera_lora_pool_bytes", "gauge", "Bytes of resident LoRA weights.",
           static_cast<double>(pool->resident_bytes));
    scalar(out, "tessera_lora_pool_budget_bytes", "gauge", "The LoRA pool's memory budget (0: unbounded).",
           static_cast<double>(pool->budget_bytes));
    scalar(out, "tessera_lora_loads_total", "counter", "LoRA adapter files read (loads and reloads).",
           static_cast<double>(pool->loads_total));
    scalar(out, "tessera_lora_evictions_total", "counter", "Idle LoRA adapters evicted to fit the pool's budget.",
           static_cast<double>(pool->evictions_total));
  }
  scalar(out, "tessera_model_loaded", "gauge", "1 once the model is loaded and the server is ready.", st != nullptr ? 1 : 0);
  scalar(out, "tessera_requests_in_flight", "gauge", "Engine requests admitted and not yet finished.",
         static_cast<double>(in_flight));
  histogram(out, "tessera_time_to_first_token_seconds", "Time from arrival to the first output token.", ttft_);
  histogram(out, "tessera_inter_token_latency_seconds", "Time between successive output tokens of a request.", itl_);
  histogram(out, "tessera_e2e_request_latency_seconds", "Time from arrival to the last output token.", e2e_);
  std::lock_guard<std::mutex> lock(mu_);
  if (prompt_cache_ != nullptr) {
    const engine::PromptCache::CompositionStats pc = prompt_cache_->composition_stats();
    scalar(out, "tessera_prompt_cache_compositions", "gauge", "Prompt Cache module subsets whose composed K/V is kept.",
           static_cast<double>(pc.compositions));
    scalar(out, "tessera_prompt_cache_compositions_bytes", "gauge", "Bytes of kept Prompt Cache compositions.",
           static_cast<double>(pc.bytes));
    scalar(out, "tessera_prompt_cache_compositions_budget_bytes", "gauge",
           "The budget of kept compositions (--prompt-cache-compositions-bytes).", static_cast<double>(pc.budget_bytes));
    scalar(out, "tessera_prompt_cache_composition_builds_total", "counter",
           "Prompt Cache compositions built (first use, or again after eviction).", static_cast<double>(pc.builds_total));
    scalar(out, "tessera_prompt_cache_composition_evictions_total", "counter",
           "Least recently used compositions dropped to stay within the budget.", static_cast<double>(pc.evictions_total));
  }
  header(out, "tessera_request_finished_total", "counter", "Engine requests finished, by finish reason.");
  for (const auto& [reason, n] : finished_) {
    out += fmt::format("tessera_request_finished_total{{finish_reason=\"{}\"}} {}\n", label(reason), n);
  }
  header(out, "tessera_http_requests_total", "counter", "HTTP responses, by path and status code.");
  for (const auto& [key, n] : http_) {
    out += fmt::format("tessera_http_requests_total{{path=\"{}\",status=\"{}\"}} {}\n", label(key.first), key.second, n);
  }
  return out;
}

}  // namespace tessera::server
