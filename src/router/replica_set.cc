#include "router/replica_set.h"

#include <algorithm>

namespace tessera::router {

const char* reason_name(Reason r) {
  switch (r) {
    case Reason::kPrefix: return "prefix";
    case Reason::kNewPrefix: return "new_prefix";
    case Reason::kLoad: return "load";
    case Reason::kRoundRobin: return "round_robin";
  }
  return "?";
}

ReplicaSet::ReplicaSet(std::vector<std::string> urls, RoutingOptions options) : options_(options) {
  replicas_.reserve(urls.size());
  for (std::string& u : urls) replicas_.emplace_back(std::move(u), options_.tree_chars);
}

int ReplicaSet::least_loaded(const std::vector<int>& candidates) const {
  int best = candidates.front();
  for (int i : candidates) {
    if (replicas_[i].stats.in_flight < replicas_[best].stats.in_flight) best = i;
  }
  return best;
}

Pick ReplicaSet::pick(std::string_view text, const std::vector<int>& tried) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<int> candidates;
  for (int i = 0; i < static_cast<int>(replicas_.size()); ++i) {
    const bool excluded = std::find(tried.begin(), tried.end(), i) != tried.end();
    if (replicas_[i].stats.healthy && !excluded) candidates.push_back(i);
  }
  Pick p;
  if (candidates.empty()) return p;
  if (options_.policy == Policy::kRoundRobin) {
    p.replica = candidates[next_++ % candidates.size()];
    p.reason = Reason::kRoundRobin;
  } else {
    int64_t lo = INT64_MAX, hi = 0;
    for (int i : candidates) {
      lo = std::min(lo, replicas_[i].stats.in_flight);
      hi = std::max(hi, replicas_[i].stats.in_flight);
    }
    const bool imbalanced =
        hi - lo > options_.balance_abs && static_cast<double>(hi) > options_.balance_rel * static_cast<double>(lo);
    if (imbalanced) {
      p.replica = least_loaded(candidates);
      p.reason = Reason::kLoad;
    } else {
      // Longest match; ties to the less loaded.
      int best = -1;
      size_t best_len = 0;
      for (int i : candidates) {
        const size_t m = replicas_[i].tree.match(text);
        if (best < 0 || m > best_len ||
            (m == best_len && replicas_[i].stats.in_flight < replicas_[best].stats.in_flight)) {
          best = i;
          best_len = m;
        }
      }
      if (!text.empty() && static_cast<double>(best_len) > options_.cache_threshold * static_cast<double>(text.size())) {
        p.replica = best;
        p.reason = Reason::kPrefix;
      } else {
        // A new prefix: the replica holding the least text, ties to the less loaded.
        int room = candidates.front();
        for (int i : candidates) {
          const Replica& r = replicas_[i];
          const Replica& b = replicas_[room];
          if (r.tree.chars() < b.tree.chars() ||
              (r.tree.chars() == b.tree.chars() && r.stats.in_flight < b.stats.in_flight)) {
            room = i;
          }
        }
        p.replica = room;
        p.reason = Reason::kNewPrefix;
      }
    }
  }
  Replica& r = replicas_[p.replica];
  p.matched_chars = r.tree.match(text);
  if (options_.policy == Policy::kCacheAware) r.tree.insert(text);
  r.stats.in_flight += 1;
  r.stats.requests += 1;
  r.stats.by_reason[static_cast<int>(p.reason)] += 1;
  r.stats.matched_chars += static_cast<int64_t>(p.matched_chars);
  r.stats.routed_chars += static_cast<int64_t>(text.size());
  return p;
}

void ReplicaSet::finished(int replica, bool failed) {
  std::lock_guard<std::mutex> lock(mu_);
  Replica& r = replicas_[replica];
  r.stats.in_flight -= 1;
  if (failed) r.stats.failures += 1;
}

void ReplicaSet::set_healthy(int replica, bool healthy) {
  std::lock_guard<std::mutex> lock(mu_);
  Replica& r = replicas_[replica];
  if (r.stats.healthy && !healthy) r.tree.clear();
  r.stats.healthy = healthy;
}

bool ReplicaSet::any_healthy() const {
  std::lock_guard<std::mutex> lock(mu_);
  return std::any_of(replicas_.begin(), replicas_.end(), [](const Replica& r) { return r.stats.healthy; });
}

std::vector<ReplicaStats> ReplicaSet::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ReplicaStats> out;
  for (const Replica& r : replicas_) {
    out.push_back(r.stats);
    out.back().tree_chars = r.tree.chars();
  }
  return out;
}

}  // namespace tessera::router
