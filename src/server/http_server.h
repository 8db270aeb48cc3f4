// The OpenAI-compatible HTTP server: one event-loop thread (Boost.Asio)
// owns every connection, Boost.Beast parses HTTP/1.1; see docs/SERVER.md.
//
//   POST /v1/completions, /v1/chat/completions   (stream: SSE)
//   GET  /v1/models, /v1/models/{id}, /health, /metrics
//   POST /v1/load_lora_adapter, /v1/unload_lora_adapter
//
// The port is bound before the model is loaded: until attach(), /health
// and /v1/* answer 503 ("loading"). Errors are OpenAI-shaped JSON bodies.
// Threads: the loop, plus a small fixed pool for request parsing and
// adapter loading; none of them depends on the number of connections.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "server/async_engine.h"
#include "server/metrics.h"
#include "server/openai_request.h"

namespace tessera::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                  // 0: any free port (see bound_port())
  std::string api_key;              // empty: no authentication
  std::string served_model_name;
  size_t max_body_bytes = 8u << 20;     // larger bodies get 413
  size_t max_header_bytes = 16u << 10;  // request line + headers; larger get 431
  int max_json_depth = 64;          // deeper nesting gets 400
  // Ignored since the event loop (kept so that `--http-threads` and old
  // callers still work): connections no longer take a thread each.
  int threads = 0;
  int workers = 2;  // request parsing (JSON + tokenization) and adapter loading
  int64_t max_samples_per_request = 256;  // prompts x n
  // A keep-alive connection may wait this long for its next request.
  std::chrono::milliseconds idle_timeout{5000};
  // From a request's first byte to the end of its headers (slowloris).
  std::chrono::milliseconds header_timeout{5000};
  // From a request's first byte to the end of its body.
  std::chrono::milliseconds request_timeout{30000};
  // One write may not take longer (a client that stopped reading).
  std::chrono::milliseconds write_timeout{10000};
  // Bytes a stream may have written but not yet taken by its client; a
  // client further behind is dropped and its request aborted.
  size_t max_stream_buffer_bytes = 1u << 20;
  // SO_SNDBUF of client connections; 0: the kernel's (autotuned, up to
  // net.ipv4.tcp_wmem's maximum, which a stalled client can fill too).
  int socket_send_buffer = 0;
  // POST /v1/load_lora_adapter reads any path the server can read: off
  // unless asked for (vLLM: VLLM_ALLOW_RUNTIME_LORA_UPDATING).
  bool allow_runtime_lora = false;
  // SQLite file of the conversations the chat page keeps (/v1/conversations);
  // empty: that API answers 503 "off".
  std::string conversations_db;
  // The chat page's files (index.html, *.js, *.css), served at / and
  // /webui/NAME, read once at start; empty: no page (--no-webui).
  std::string webui_dir;
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
  int bound_port() const;
  // Serves on a background thread (the event loop).
  void start();
  // The model is ready; `model` must outlive the server.
  void attach(const ServedModel* model);
  // New requests get 503 from now on (in-flight ones continue).
  void begin_shutdown();
  // Waits until no request is being handled, or `timeout` passes.
  bool wait_idle(std::chrono::milliseconds timeout) const;
  // Generation requests being handled now (streams included).
  int64_t active_requests() const;
  // Open client connections (idle keep-alive ones included).
  int64_t open_connections() const;
  // Closes the listening socket and every connection, and joins the loop
  // and the worker threads.
  void stop();

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::server
