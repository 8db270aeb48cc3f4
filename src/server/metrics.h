// Server metrics in the Prometheus text exposition format (version 0.0.4):
// engine gauges and counters read from Engine::stats(), latency histograms
// observed per request, HTTP request counts by status, the LoRA pool and the
// Prompt Cache's compositions.
//
// Histograms are cumulative as Prometheus wants them: bucket i counts
// observations <= bound i, and a last "+Inf" bucket equals _count.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/prompt_cache.h"
#include "adapters/registry.h"

namespace tessera::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);  // ascending upper bounds (le)
  void observe(double value);

  struct Snapshot {
    std::vector<double> bounds;
    std::vector<uint64_t> cumulative;  // per bound, then +Inf
    double sum = 0.0;
    uint64_t count = 0;
  };
  Snapshot snapshot() const;

 private:
  mutable std::mutex mu_;
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket (not cumulative), last is +Inf
  double sum_ = 0.0;
  uint64_t count_ = 0;
};

class Metrics {
 public:
  Metrics();

  // Latencies, in seconds. Called on the engine thread (cheap: one lock each).
  void observe_ttft(double s) { ttft_.observe(s); }
  void observe_inter_token(double s) { itl_.observe(s); }
  void observe_e2e(double s) { e2e_.observe(s); }
  void count_finished(const char* finish_reason);
  // One per HTTP response, by endpoint path and status code.
  void count_http(const std::string& path, int status);

  // The whole exposition. `stats` is null while the model is loading (the
  // engine gauges are then left out); `in_flight` counts admitted requests;
  // `pool`: the LoRA adapter pool's figures, when the server has one.
  std::string render(const engine::EngineStats* stats, int64_t in_flight,
                     const AdapterRegistry::PoolStats* pool = nullptr) const;
  // The Prompt Cache whose compositions render() reports (null: none). It
  // must outlive every render() call made while it is watched.
  void watch_prompt_cache(const engine::PromptCache* pc);

 private:
  Histogram ttft_, itl_, e2e_;
  mutable std::mutex mu_;  // guards the maps below
  std::map<std::string, uint64_t> finished_;                  // finish_reason -> count
  std::map<std::pair<std::string, int>, uint64_t> http_;      // (path, status) -> count
  const engine::PromptCache* prompt_cache_ = nullptr;
};

}  // namespace tessera::server
