// tessera route: an OpenAI-compatible front over data-parallel replicas
// (`tessera serve` processes, on this machine or others); docs/DISTRIBUTED.md.
//
//   POST /v1/completions, /v1/chat/completions   forwarded, streams relayed
//   GET  /v1/models                              from a healthy replica
//   GET  /health                                 200 while a replica is up
//   GET  /metrics                                per replica (Prometheus text)
//
// Each request goes where its prompt's prefix most likely sits in a
// replica's cache (router/replica_set.h). A replica that refuses a
// connection, dies, or answers 502/503/504 before the router has passed a
// byte of its response on is tried no more for that request, which goes to
// the next pick: a request is lost only when its stream had already begun
// (then the client gets an SSE error event and the stream ends). Health
// checks (GET /health) take replicas out and put them back.
//
// cpp-httplib (Debian) on both sides: one thread per open client connection
// from a fixed pool, one more per upstream request in flight.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "router/replica_set.h"

namespace tessera::router {

struct RouterOptions {
  std::vector<std::string> replicas;  // http://HOST:PORT
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port (bound_port())
  RoutingOptions routing;
  std::chrono::milliseconds health_interval{1000};
  std::chrono::milliseconds connect_timeout{2000};
  std::chrono::seconds read_timeout{600};  // longest silence of a replica mid-response
  int threads = 128;                       // client connections served at once
  size_t max_body_bytes = 8u << 20;
  size_t max_buffered_bytes = 1u << 20;  // of a stream its client has not taken yet
};

// The text a request is routed by: the chat messages (role and content, in
// order) or the completion prompt. Empty for a body it cannot read (the
// replica will answer 400 for it).
std::string routing_text(const nlohmann::json& body);

class Router {
 public:
  explicit Router(RouterOptions options);
  ~Router();
  Router(const Router&) = delete;
  Router& operator=(const Router&) = delete;

  void bind();  // throws Error(kIo) when the port cannot be bound
  int bound_port() const;
  void start();  // serves and checks health on background threads
  void stop();
  std::string metrics_text() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::router
