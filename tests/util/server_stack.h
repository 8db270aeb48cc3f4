// An in-process server stack on one model for the server tests: engine,
// AsyncEngine, HTTP server on an ephemeral port, adapter registry.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "engine/engine.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "adapters/registry.h"
#include "server/async_engine.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/openai_request.h"

namespace tessera::server {

// The HTTP status an ApiError thrown by f carries; 0 when f returns.
inline int status_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ApiError& e) {
    return e.status();
  }
  return 0;
}

inline engine::EngineConfig stack_config() {
  engine::EngineConfig ec;
  ec.threads = 1;
  ec.max_num_seqs = 8;
  ec.num_kv_blocks = 512;
  return ec;
}

struct Stack {
  explicit Stack(const LoadedModel& lm, const Tokenizer& tok, const engine::EngineConfig& ec = stack_config(),
                 bool runtime_lora = false, size_t lora_pool_bytes = 0, int http_threads = 24,
                 const std::function<void(ServerOptions&)>& configure = {})
      : adapters(lm.model->config(), lora_pool_bytes) {
    engine = std::make_unique<engine::Engine>(*lm.model, &tok, ec);
    async = std::make_unique<AsyncEngine>(*engine, metrics, ec.max_num_seqs + 8);
    ServerOptions opt;
    opt.port = 0;
    opt.served_model_name = "stories";
    opt.threads = http_threads;  // ignored since the event loop
    opt.max_body_bytes = 64 << 10;
    opt.allow_runtime_lora = runtime_lora;
    if (configure) configure(opt);
    http = std::make_unique<HttpServer>(opt, metrics);
    http->bind();
    http->start();
    served.engine = async.get();
    served.ctx.tokenizer = &tok;
    served.ctx.max_model_len = engine->config().max_model_len;
    served.ctx.served_model_name = "stories";
    served.ctx.adapters = &adapters;
    served.ctx.soft_prompt = engine->config().soft_prompt;
  }
  ~Stack() {
    http->begin_shutdown();
    async->shutdown();
    http->wait_idle(std::chrono::seconds(10));
    http->stop();
  }
  void attach() { http->attach(&served); }
  int port() const { return http->bound_port(); }

  AdapterRegistry adapters;
  Metrics metrics;
  std::unique_ptr<engine::Engine> engine;
  std::unique_ptr<AsyncEngine> async;
  std::unique_ptr<HttpServer> http;
  ServedModel served;
};

// The greedy text of `prompt` from an engine driven directly (no server).
inline std::string direct_greedy(const LoadedModel& lm, const Tokenizer& tok, const std::string& prompt, int32_t n,
                                 engine::RequestAdapters with = {}) {
  engine::EngineConfig ec;
  ec.threads = 1;
  ec.num_kv_blocks = 64;
  engine::Engine ref(*lm.model, &tok, ec);
  engine::SamplingParams p;
  p.temperature = 0;
  p.max_tokens = n;
  std::string text;
  ref.add_request(tok.encode(prompt, true, true), p, [&](const engine::RequestOutput& o) { text += o.text; },
                  std::move(with));
  while (ref.has_unfinished()) ref.step();
  return text;
}

}  // namespace tessera::server
