// The router's view of its replicas and the routing rule, apart from HTTP
// (tested without sockets).
//
// Cache-aware routing, as SGLang's router does it:
//   1. Loads imbalanced (max - min in-flight requests > balance_abs and
//      max > balance_rel x min): the least loaded replica (load-aware
//      fallback; a prefix is worth less than a queue).
//   2. Otherwise the replica whose tree matches the longest prefix of the
//      request's text, when the match covers more than cache_threshold of it.
//   3. Otherwise (a new prefix) the replica whose tree holds the least text:
//      new tenants spread over the replicas, each prefix stays on one.
// The text is inserted into the chosen replica's tree. Round-robin ignores
// the trees (the baseline the benchmark compares against).
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "router/prefix_tree.h"

namespace tessera::router {

enum class Policy { kCacheAware, kRoundRobin };

struct RoutingOptions {
  Policy policy = Policy::kCacheAware;
  double cache_threshold = 0.5;  // matched share of the text that routes by prefix
  int64_t balance_abs = 8;       // in-flight gap that counts as imbalance...
  double balance_rel = 1.5;      // ...when the busiest also has this many times the least's load
  size_t tree_chars = size_t{1} << 24;  // text kept per replica's tree
};

enum class Reason { kPrefix, kNewPrefix, kLoad, kRoundRobin };
const char* reason_name(Reason r);

struct Pick {
  int replica = -1;  // -1: no healthy replica left to try
  Reason reason = Reason::kRoundRobin;
  size_t matched_chars = 0;  // of the chosen replica's tree
};

// Counters and state of one replica (a snapshot for /metrics).
struct ReplicaStats {
  std::string url;
  bool healthy = true;
  int64_t in_flight = 0;
  int64_t requests = 0;       // sent to it (retries included)
  int64_t failures = 0;       // that failed before a response was taken
  int64_t by_reason[4] = {};  // picks by Reason
  int64_t matched_chars = 0;  // summed over picks
  int64_t routed_chars = 0;   // text of those picks
  size_t tree_chars = 0;
};

class ReplicaSet {
 public:
  ReplicaSet(std::vector<std::string> urls, RoutingOptions options);

  size_t size() const { return replicas_.size(); }
  const std::string& url(int replica) const { return replicas_[replica].stats.url; }

  // Chooses a healthy replica not in `tried` (indices already failed for
  // this request) and counts the request as in flight there.
  Pick pick(std::string_view text, const std::vector<int>& tried);
  // The request sent by pick() ended (either way).
  void finished(int replica, bool failed);
  // Health: a replica that fails a check or a connection is taken out and
  // its tree forgotten (a restarted replica has an empty cache).
  void set_healthy(int replica, bool healthy);
  bool any_healthy() const;
  std::vector<ReplicaStats> stats() const;

 private:
  struct Replica {
    ReplicaStats stats;
    PrefixTree tree;
    Replica(std::string url, size_t tree_chars) : tree(tree_chars) { stats.url = std::move(url); }
  };
  int least_loaded(const std::vector<int>& candidates) const;

  RoutingOptions options_;
  mutable std::mutex mu_;
  std::vector<Replica> replicas_;
  size_t next_ = 0;  // round-robin cursor
};

}  // namespace tessera::router
