// Shared by the engine benchmark programs: argument parsing, random token
// workloads, percentiles, and a closed-loop driver that runs an Engine with
// clients submitting requests as earlier ones finish.
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace tessera::bench {

struct Args {
  std::map<std::string, std::string> kv;
  Args(int argc, char** argv) {
    for (int i = 1; i < argc; ++i) {
      const char* arg = argv[i];
      if (std::strncmp(arg, "--", 2) != 0) continue;
      const bool has_value = i + 1 < argc && std::strncmp(argv[i + 1], "--", 2) != 0;
      kv.insert_or_assign(std::string(arg + 2), std::string(has_value ? argv[++i] : "1"));
    }
  }
  std::string str(const std::string& k, const std::string& def = "") const {
    auto it = kv.find(k);
    return it == kv.end() ? def : it->second;
  }
  int64_t num(const std::string& k, int64_t def) const {
    auto it = kv.find(k);
    return it == kv.end() ? def : std::atoll(it->second.c_str());
  }
  bool flag(const std::string& k) const { return kv.count(k) != 0; }
};

// "a,b,c" -> {"a", "b", "c"} (empty items dropped).
inline std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  for (size_t p = 0; p <= s.size();) {
    const size_t q = std::min(s.find(sep, p), s.size());
    if (q > p) out.push_back(s.substr(p, q - p));
    p = q + 1;
  }
  return out;
}

inline double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const double idx = p * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(idx);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (idx - static_cast<double>(lo));
}

inline std::vector<int32_t> random_tokens(std::mt19937& rng, int n, int32_t n_vocab, int32_t bos) {
  std::uniform_int_distribution<int32_t> t(3, n_vocab - 1);
  std::vector<int32_t> p;
  if (bos >= 0) p.push_back(bos);
  while (static_cast<int>(p.size()) < n) p.push_back(t(rng));
  return p;
}

struct Job {
  std::vector<int32_t> prompt;
  int32_t max_tokens = 16;
};

struct JobResult {
  double ttft = 0.0;     // seconds from submission to first token
  double latency = 0.0;  // seconds from submission to finish
  int64_t output_tokens = 0;
};

// Runs `jobs` on `engine`: each of `clients` submits its next job as soon as
// its previous one finishes (clients = jobs.size() submits everything at
// once). `next_job(client, k)` picks the job index for a client's k-th
// request (-1: that client is done). Greedy, ignore_eos, exact lengths.
struct RunStats {
  double seconds = 0.0;
  int64_t output_tokens = 0;
  std::vector<JobResult> results;
  engine::EngineStats engine;
};

// `adapters`, when given, holds each job's LoRA adapter / soft prompt.
inline RunStats run_closed_loop(engine::Engine& eng, const std::vector<Job>& jobs, int clients,
                                const std::function<int(int, int)>& next_job,
                                const std::vector<engine::RequestAdapters>* adapters = nullptr) {
  RunStats st;
  st.results.resize(jobs.size());
  std::map<engine::RequestId, std::pair<int, int>> live;  // id -> (client, job)
  std::vector<int> submitted(static_cast<size_t>(clients), 0);
  auto submit = [&](int c) {
    const int j = next_job(c, submitted[c]++);
    if (j < 0) return;
    engine::SamplingParams p;
    p.temperature = 0.0f;
    p.ignore_eos = true;
    p.max_tokens = jobs[j].max_tokens;
    live[eng.add_request(jobs[j].prompt, p, {}, adapters != nullptr ? (*adapters)[j] : engine::RequestAdapters{})] = {c, j};
  };
  const auto t0 = engine::Clock::now();
  for (int c = 0; c < clients; ++c) submit(c);
  while (eng.has_unfinished()) {
    for (const engine::RequestOutput& o : eng.step()) {
      if (!o.finished) continue;
      auto it = live.find(o.id);
      if (it == live.end()) continue;
      const auto [c, j] = it->second;
      live.erase(it);
      st.results[j] = {o.time_to_first_token, o.elapsed, o.num_output_tokens};
      st.output_tokens += o.num_output_tokens;
      submit(c);
    }
  }
  st.seconds = std::chrono::duration<double>(engine::Clock::now() - t0).count();
  st.engine = eng.stats();
  return st;
}

inline nlohmann::json summary(const RunStats& s) {
  std::vector<double> ttft, lat;
  for (const JobResult& r : s.results) ttft.push_back(r.ttft), lat.push_back(r.latency);
  return {{"seconds", s.seconds},
          {"output_tokens", s.output_tokens},
          {"output_tps", static_cast<double>(s.output_tokens) / s.seconds},
          {"requests_per_s", static_cast<double>(s.results.size()) / s.seconds},
          {"ttft_p50_s", percentile(ttft, 0.5)},
          {"ttft_p99_s", percentile(ttft, 0.99)},
          {"latency_p50_s", percentile(lat, 0.5)},
          {"preemptions", s.engine.preemptions_total},
          {"prefix_hit_tokens", s.engine.prefix_hit_tokens_total}};
}

}  // namespace tessera::bench
