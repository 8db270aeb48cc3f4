// tessera route: an OpenAI-compatible front over `tessera serve` replicas,
// sending each request where its prefix is most likely cached
// (router/router.h, docs/DISTRIBUTED.md). Prints "listening on
// http://HOST:PORT" on stderr once bound; SIGINT / SIGTERM stop it.
#include <cstdio>

#include "cli/command.h"
#include "cli/signal_waiter.h"
#include "core/log.h"
#include "router/router.h"

namespace tessera::cli {
namespace {

int route(router::RouterOptions& o, const std::string& policy, double health_s) {
  o.routing.policy = policy == "round-robin" ? router::Policy::kRoundRobin : router::Policy::kCacheAware;
  o.health_interval = std::chrono::milliseconds(static_cast<int64_t>(health_s * 1000));
  SignalWaiter signals;
  router::Router r(o);
  r.bind();
  std::fprintf(stderr, "listening on http://%s:%d\n", o.host.c_str(), r.bound_port());
  r.start();
  TESSERA_LOG_INFO("routing to {} replicas ({})", o.replicas.size(), policy);
  signals.wait();
  TESSERA_LOG_INFO("signal {}: stopping the router", signals.signal());
  r.stop();
  return 0;
}

TESSERA_COMMAND("route", "OpenAI-compatible router over serve replicas (prefix-aware, load-aware, retries)",
                [](CLI::App& sub) {
  auto o = std::make_shared<router::RouterOptions>();
  auto policy = std::make_shared<std::string>("cache-aware");
  auto health_s = std::make_shared<double>(1.0);
  sub.add_option("--replica", o->replicas, "A replica's URL, http://HOST:PORT (repeat for each)")->required();
  sub.add_option("--policy", *policy, "cache-aware (the replica most likely to hold the prompt's prefix, unless "
                                      "loads are imbalanced) or round-robin")
      ->check(CLI::IsMember({"cache-aware", "round-robin"}))
      ->capture_default_str();
  sub.add_option("--cache-threshold", o->routing.cache_threshold,
                 "Share of a prompt's text that must match a replica's tree to route by prefix")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  sub.add_option("--balance-abs", o->routing.balance_abs,
                 "Loads count as imbalanced when the busiest replica has this many more requests in flight...")
      ->capture_default_str();
  sub.add_option("--balance-rel", o->routing.balance_rel, "...and this many times the least busy one's")
      ->capture_default_str();
  sub.add_option("--tree-chars", o->routing.tree_chars,
                 "Prompt characters remembered per replica (least recently used forgotten first)")
      ->capture_default_str();
  sub.add_option("--health-interval", *health_s, "Seconds between health checks of each replica")
      ->check(CLI::Range(0.05, 3600.0))
      ->capture_default_str();
  sub.add_option("--threads", o->threads, "Client connections served at once")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  sub.add_option("--host", o->host, "Address to listen on")->capture_default_str();
  sub.add_option("--port", o->port, "Port (0: any free port, printed on stderr)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  return [o, policy, health_s] { return route(*o, *policy, *health_s); };
});

}  // namespace
}  // namespace tessera::cli
