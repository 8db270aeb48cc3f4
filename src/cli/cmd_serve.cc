// tessera serve: the OpenAI-compatible HTTP server (docs/SERVER.md).
//
// Start-up binds the port first (so /health can say "loading"), prints
// "listening on http://HOST:PORT" to stderr, then loads the model. SIGINT /
// SIGTERM are taken by a sigwait thread (no work in a signal handler): the
// server stops admitting, aborts what is in flight (every stream gets a
// final event), waits for the handlers, and exits 0. A second signal exits
// at once.
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <optional>

#include "cli/command.h"
#include "cli/common_options.h"
#include "cli/signal_waiter.h"
#include "dist/world.h"
#include "core/thread_pool.h"
#include "core/log.h"
#include "model/model.h"
#include "model/tensor_parallel.h"
#include "engine/prompt_cache.h"
#include "tokenizer/tokenizer.h"
#include "server/async_engine.h"
#include "adapters/registry.h"
#include "template/chat_template.h"
#include "server/http_server.h"

namespace tessera::cli {
namespace {

struct ServeArgs {
  RunOptions run;
  SpecOptions spec;
  AdapterOptions adapters;
  KvPolicyOptions kv_policy;  // the default of requests without "kv_policy"
  server::ServerOptions http;
  std::string chat_template;
  std::string prompt_schema;  // Prompt Cache modules (engine/prompt_cache.h)
  engine::PromptCacheOptions prompt_cache;
  int64_t max_queue = 256;
  int http_threads = 0;
  std::string stream_buffer = "1M";
  int64_t seed = 0;
  bool no_webui = false;
  std::string webui_dir;
};

std::string default_model_name(const std::string& path) { return std::filesystem::path(path).stem().string(); }

int serve(ServeArgs& a) {
  SignalWaiter signals;
  server::Metrics metrics;
  server::ServerOptions http_opt = a.http;
  http_opt.max_stream_buffer_bytes = parse_bytes(a.stream_buffer);
  if (!a.no_webui) {
    std::string tried;
    if (!a.webui_dir.empty()) {
      http_opt.webui_dir = a.webui_dir;
    } else if (auto dir = bundled_path("webui", tried)) {
      http_opt.webui_dir = *dir;
    } else {
      TESSERA_LOG_WARN("the chat page is not installed (looked in {}): / answers 404", tried);
    }
  }
  a.run.resolve_model();
  if (http_opt.served_model_name.empty()) http_opt.served_model_name = default_model_name(a.run.model);
  if (a.http_threads > 0) {
    TESSERA_LOG_WARN("--http-threads is ignored: connections are served by one event-loop thread (docs/SERVER.md)");
  }
  // What --tp refuses, on every rank before any loads.
  const kv::KvPolicy kv_policy = a.kv_policy.get(a.run.tp);
  check_prompt_cache_tp(a.prompt_schema, a.run.tp);
  // --tp: ranks other than 0 serve no HTTP; they follow rank 0's steps
  // (RunOptions::load does not return on them).
  if (a.run.tp > 1 && dist::World::current().rank() != 0) a.run.load();
  server::HttpServer http(http_opt, metrics);
  http.bind();
  std::fprintf(stderr, "listening on http://%s:%d\n", http_opt.host.c_str(), http.bound_port());
  std::fflush(stderr);
  http.start();

  const auto t0 = engine::Clock::now();
  const LoadedModel lm = a.run.load();
  const auto tok = load_tokenizer(lm);
  engine::EngineConfig ec = a.run.engine_config(lm);
  a.spec.apply(ec, *lm.model);
  a.adapters.apply(ec, *lm.model);
  ec.seed = static_cast<uint64_t>(a.seed);
  engine::Engine eng(*lm.model, tok.get(), ec);
  const std::optional<server::ChatTemplate> chat = resolve_chat_template(a.chat_template, *lm.file);
  std::optional<engine::PromptCache> prompt_cache;
  if (!a.prompt_schema.empty()) {
    ThreadPool pool(a.run.threads);
    prompt_cache.emplace(*lm.model, *tok, engine::PromptSchema::load(a.prompt_schema, *tok), ec.kv_type, pool,
                         a.prompt_cache);
    TESSERA_LOG_INFO("Prompt Cache: {} modules of '{}' computed ({:.1f} MiB of K/V)", prompt_cache->schema().modules.size(),
                     prompt_cache->schema().name, static_cast<double>(prompt_cache->bytes()) / (1 << 20));
  }
  server::AsyncEngine async(eng, metrics, eng.config().max_num_seqs + a.max_queue);

  server::ServedModel served;
  served.engine = &async;
  served.ctx.tokenizer = tok.get();
  served.ctx.chat_template = chat ? &*chat : nullptr;
  served.ctx.max_model_len = eng.config().max_model_len;
  served.ctx.kv_policy = kv_policy;
  served.ctx.bounded_kv = a.run.tp == 1;
  served.ctx.served_model_name = http_opt.served_model_name;
  served.ctx.prompt_cache = prompt_cache ? &*prompt_cache : nullptr;
  metrics.watch_prompt_cache(served.ctx.prompt_cache);
  // prompt_cache is destroyed before the HTTP server: unwatched first, on
  // every way out of this function.
  struct Unwatch {
    server::Metrics& m;
    ~Unwatch() { m.watch_prompt_cache(nullptr); }
  } unwatch{metrics};
  served.ctx.soft_prompt = eng.config().soft_prompt;
  AdapterRegistry adapters(lm.model->whole_config(),  // under --tp: the file's shapes; ranks split adapters themselves
                                   a.adapters.lora_pool.empty() ? 0 : parse_bytes(a.adapters.lora_pool),
                                   a.adapters.weight_type());
  for (const auto& [name, path] : a.adapters.named()) {
    try {
      adapters.load(name, path, http_opt.served_model_name);
    } catch (const server::ApiError& e) {
      fail(ErrorCode::kInvalidArgument, "--lora {}={}: {}", name, path, e.what());
    }
    TESSERA_LOG_INFO("LoRA adapter '{}' served from {}", name, path);
  }
  for (const auto& [name, path] : a.adapters.named_soft_prompts()) {
    try {
      adapters.add_soft_prompt(name, path, http_opt.served_model_name);
    } catch (const server::ApiError& e) {
      fail(ErrorCode::kInvalidArgument, "--soft-prompt {}={}: {}", name, path, e.what());
    }
    TESSERA_LOG_INFO("soft prompt '{}' served from {}", name, path);
  }
  served.ctx.adapters = &adapters;
  served.created = static_cast<int64_t>(std::time(nullptr));
  http.attach(&served);
  const engine::EngineStats st = eng.stats();
  TESSERA_LOG_INFO("ready: model '{}' loaded in {:.2f} s; context {} tokens, {} KV blocks, {} sequences per step, "
                   "queue {}, HTTP: 1 loop thread + {} workers, chat template: {}",
                   served.ctx.served_model_name, std::chrono::duration<double>(engine::Clock::now() - t0).count(),
                   served.ctx.max_model_len, st.kv_blocks_total, eng.config().max_num_seqs, a.max_queue,
                   http_opt.workers, chat ? "yes" : "none");

  signals.wait();
  TESSERA_LOG_INFO("signal {}: shutting down ({} requests in flight)", signals.signal(), async.in_flight());
  http.begin_shutdown();
  async.shutdown();
  if (!http.wait_idle(std::chrono::seconds(30))) TESSERA_LOG_WARN("some requests did not finish in 30 s");
  http.stop();
  TESSERA_LOG_INFO("stopped");
  return 0;
}

TESSERA_COMMAND("serve", "OpenAI-compatible HTTP server", [](CLI::App& sub) {
  auto a = std::make_shared<ServeArgs>();
  a->run.add_to(sub, /*engine_options=*/true, /*model_optional=*/true);
  a->spec.add_to(sub);
  a->adapters.add_to(sub, AdapterScope::kServer);
  a->kv_policy.add_to(sub);
  sub.add_flag("--no-webui", a->no_webui, "Do not serve the chat page at /");
  sub.add_option("--webui-dir", a->webui_dir, "Serve the chat page from this folder (default: the one installed)");
  sub.add_option("--conversations-db", a->http.conversations_db,
                 "SQLite file where /v1/conversations keeps conversations (the chat page's history)");
  sub.add_flag("--allow-runtime-lora", a->http.allow_runtime_lora,
               "Allow POST /v1/load_lora_adapter and /v1/unload_lora_adapter (loading reads any file the server can)");
  sub.add_option("--host", a->http.host, "Address to listen on")->capture_default_str();
  sub.add_option("--port", a->http.port, "Port (0: any free port, printed on stderr)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  sub.add_option("--api-key", a->http.api_key, "Require 'Authorization: Bearer KEY' on /v1/*")
      ->envname("TESSERA_API_KEY");
  sub.add_option("--served-model-name", a->http.served_model_name, "Model name in the API (default: file stem)");
  sub.add_option("--chat-template", a->chat_template, "Chat template: a built-in name or a Jinja file "
                                                      "(default: the model's)");
  sub.add_option("--prompt-schema", a->prompt_schema,
                 "Prompt Cache schema (JSON); requests import its modules with \"prompt_cache\": {\"modules\": [...]}");
  sub.add_option_function<std::string>("--prompt-cache-compositions-bytes", [a](const std::string& s) {
    a->prompt_cache.compositions_bytes = parse_bytes(s);
  }, "Memory for composed Prompt Cache K/V kept per module subset, least recently used evicted first (default 256M)");
  sub.add_option("--max-queue", a->max_queue, "Requests waiting beyond the running batch before 429")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  sub.add_option_function<std::string>("--max-body-bytes", [a](const std::string& s) {
    a->http.max_body_bytes = parse_bytes(s);
  }, "Largest request body (e.g. 8M); larger ones get 413");
  sub.add_option("--http-threads", a->http_threads,
                 "Deprecated and ignored: the HTTP server runs one event-loop thread whatever the connections");
  sub.add_option("--http-workers", a->http.workers,
                 "Threads that parse and tokenize request bodies and load LoRA adapters, off the event loop")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  sub.add_option("--max-stream-buffer", a->stream_buffer,
                 "Bytes of a stream its client may leave unread before it is dropped and its request aborted (e.g. 1M)")
      ->capture_default_str();
  sub.add_option("--seed", a->seed, "Seed for requests without one (0: random)");
  return [a]() { return serve(*a); };
});

}  // namespace
}  // namespace tessera::cli
