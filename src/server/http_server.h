// The OpenAI-compatible HTTP server (cpp-httplib, a thread per connection
// from a pool sized for the admitted concurrency; see docs/SERVER.md).
//
//   POST /v1/completions, /v1/chat/completions   (stream: SSE)
//   GET  /v1/models, /v1/models/{id}, /health, /metrics
//
// The port is bound before the model is loaded: until attach(), /health
// and /v1/* answer 503 ("loading"). Errors are OpenAI-shaped JSON bodies.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "server/async_engine.h"
#include "server/metrics.h"
#include "server/openai_request.h"

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace tessera::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                  // 0: any free port (see bound_port())
  std::string api_key;              // empty: no authentication
  std::string served_model_name;
  size_t max_body_bytes = 8u << 20;  // larger bodies get 413
  int max_json_depth = 64;          // deeper nesting gets 400
  int threads = 64;                 // HTTP worker threads (one per open connection)
  int64_t max_samples_per_request = 256;  // prompts x n
  std::chrono::milliseconds poll_interval{100};  // how often a waiting handler checks its client
  // POST /v1/load_lora_adapter reads any path the server can read: off
  // unless asked for (vLLM: VLLM_ALLOW_RUNTIME_LORA_UPDATING).
  bool allow_runtime_lora = false;
};

// What the server needs once the model is loaded.
struct ServedModel {
  AsyncEngine* engine = nullptr;
  ModelContext ctx;
  int64_t created = 0;  // unix time the model was loaded (GET /v1/models)
};

class HttpServer {
 public:
  HttpServer(ServerOptions options, Metrics& metrics);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds the listening socket; throws Error(kIo) when it cannot.
  void bind();
  int bound_port() const { return port_; }
  // Serves on a background thread.
  void start();
  // The model is ready; `model` must outlive the server.
  void attach(const ServedModel* model);
  // New requests get 503 from now on (in-flight ones continue).
  void begin_shutdown() { shutting_down_ = true; }
  // Waits until no request is being handled, or `timeout` passes.
  bool wait_idle(std::chrono::milliseconds timeout) const;
  // Requests being handled now (streams included): one worker thread each.
  int64_t active_requests() const { return active_.load(); }
  // Closes the listening socket and joins every worker.
  void stop();

 private:
  class Impl;
  void handle_generate(const httplib::Request& req, httplib::Response& res, Endpoint endpoint);
  void handle_models(const httplib::Request& req, httplib::Response& res);
  // POST /v1/load_lora_adapter (load) and /v1/unload_lora_adapter.
  void handle_lora(const httplib::Request& req, httplib::Response& res, bool load);
  void handle_health(httplib::Response& res);
  void handle_metrics(httplib::Response& res);
  const ServedModel* ready_model(httplib::Response& res);  // null (and a 503 set) until ready
  void stream(httplib::Response& res, const ServedModel& m, std::shared_ptr<ApiRequest> api,
              std::shared_ptr<RequestChannel> ch, const std::string& id);
  void respond(httplib::Response& res, const ServedModel& m, const ApiRequest& api, RequestChannel& ch,
               const std::string& id);

  ServerOptions opt_;
  Metrics& metrics_;
  std::unique_ptr<Impl> impl_;
  std::thread thread_;
  int port_ = 0;
  std::atomic<const ServedModel*> model_{nullptr};
  std::atomic<bool> shutting_down_{false};
  std::atomic<int64_t> active_{0};  // requests being handled (streams included)
  std::atomic<uint64_t> next_id_{0};
  uint64_t id_salt_ = 0;
};

// Sets an OpenAI error body (and Retry-After for 429/503).
void set_error(httplib::Response& res, const ApiError& e);

}  // namespace tessera::server
