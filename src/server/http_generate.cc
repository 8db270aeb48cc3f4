// POST /v1/completions and /v1/chat/completions: parse, submit to the
// engine, then answer with one JSON body or an SSE stream.
#include <httplib.h>

#include <ctime>

#include "core/error.h"
#include "core/log.h"
#include "server/http_connection.h"
#include "server/http_internal.h"
#include "server/http_server.h"
#include "server/openai_response.h"

namespace tessera::server {
namespace {

using nlohmann::json;

// Decrements a counter when the last copy goes away (a streamed response's
// provider outlives the handler).
struct ActiveGuard {
  explicit ActiveGuard(std::atomic<int64_t>& n) : n_(n) { ++n_; }
  ~ActiveGuard() { --n_; }
  ActiveGuard(const ActiveGuard&) = delete;
  ActiveGuard& operator=(const ActiveGuard&) = delete;
  std::atomic<int64_t>& n_;
};

ApiError engine_error(const Error& e, bool shutting_down) {
  switch (e.code()) {
    case ErrorCode::kInvalidArgument:
    case ErrorCode::kOutOfRange:
    case ErrorCode::kNotFound:
      return ApiError(400, e.what());
    case ErrorCode::kResourceExhausted:
      return shutting_down ? ApiError(503, e.what(), "", "shutting_down") : ApiError(429, e.what(), "", "rate_limit_exceeded");
    default:
      return ApiError(500, e.what());
  }
}

// Why a finished request has no proper result, or "" when it has one.
ApiError interruption(const RequestChannel& ch) {
  if (const std::string f = ch.failure(); !f.empty()) return ApiError(500, "the engine failed: " + f);
  if (ch.shutting_down()) return ApiError(503, "the server is shutting down; the request was cancelled", "", "shutting_down");
  return ApiError(500, "the request was cancelled");
}

std::string sse(const json& j) { return "data: " + dump_json(j) + "\n\n"; }

// A streamed request's state, owned by the response's content provider.
struct StreamState {
  std::shared_ptr<ApiRequest> api;
  std::unique_ptr<ResponseBuilder> builder;
  std::shared_ptr<RequestChannel> ch;
  std::unique_ptr<ActiveGuard> active;
  bool opened = false;
  bool done = false;
  std::vector<ChannelItem> items;
  std::vector<json> chunks;
};

}  // namespace

void HttpServer::handle_generate(const httplib::Request& req, httplib::Response& res, Endpoint endpoint) {
  auto active = std::make_unique<ActiveGuard>(active_);
  const ServedModel* m = ready_model(res);
  if (m == nullptr) return;
  RequestLog& log = current_request_log();
  auto api = std::make_shared<ApiRequest>();
  std::shared_ptr<RequestChannel> ch;
  try {
    const json body = parse_body(req.body, opt_.max_json_depth);
    *api = endpoint == Endpoint::kChat ? parse_chat_request(body, m->ctx) : parse_completion_request(body, m->ctx);
    const int64_t samples = static_cast<int64_t>(api->prompts.size()) * api->params.n;
    if (samples > opt_.max_samples_per_request) {
      throw ApiError(400, fmt::format("the request asks for {} completions (prompts x n); this server allows {}", samples,
                                      opt_.max_samples_per_request),
                     "n");
    }
    log.prompt_tokens = 0;
    for (const auto& p : api->prompts) log.prompt_tokens += static_cast<int64_t>(p.size());
    std::vector<engine::PromptLayout> prompts = api->layouts;
    if (prompts.empty()) {
      for (const auto& p : api->prompts) {
        engine::PromptLayout plain;
        plain.tokens = p;
        prompts.push_back(std::move(plain));
      }
    }
    ch = m->engine->submit(std::move(prompts), api->params, {api->lora, api->soft_prompt});
  } catch (const ApiError& e) {
    set_error(res, e);
    return;
  } catch (const Error& e) {
    set_error(res, engine_error(e, shutting_down_ || !m->engine->accepting()));
    return;
  }
  const uint64_t n = next_id_.fetch_add(1);
  const std::string id = fmt::format("{}-{:016x}{:08x}", endpoint == Endpoint::kChat ? "chatcmpl" : "cmpl",
                                     id_salt_ ^ (n * 0x9e3779b97f4a7c15ull), static_cast<uint32_t>(n));
  log.id = id;
  if (api->stream) {
    stream(res, *m, std::move(api), std::move(ch), id);
    // The stream's state holds its own guard until the provider is released.
    return;
  }
  respond(res, *m, *api, *ch, id);
}

void HttpServer::respond(httplib::Response& res, const ServedModel& m, const ApiRequest& api, RequestChannel& ch,
                         const std::string& id) {
  ResponseBuilder b(api, *m.ctx.tokenizer, api.model, id, static_cast<int64_t>(std::time(nullptr)));
  const int fd = current_connection_fd();
  bool gone = false;
  std::vector<ChannelItem> items;
  for (;;) {
    const bool finished = ch.finished();  // then this wait takes the last outputs
    items.clear();
    ch.wait(items, opt_.poll_interval);
    for (const ChannelItem& it : items) b.add(it, nullptr);
    if (finished) break;
    if (!gone && peer_gone(fd)) {
      gone = true;  // keep waiting: the aborts come back within a step
      m.engine->abort(ch);
    }
  }
  RequestLog& log = current_request_log();
  log.output_tokens = b.completion_tokens();
  if (gone) {
    log.note = "client disconnected";
    // Nobody reads this; 499 (nginx's "client closed request") keeps the
    // log and the metrics honest.
    set_error(res, ApiError(499, "the client closed the connection"));
    return;
  }
  if (b.interrupted()) {
    set_error(res, interruption(ch));
    return;
  }
  res.set_content(dump_json(b.response()), "application/json");
}

void HttpServer::stream(httplib::Response& res, const ServedModel& m, std::shared_ptr<ApiRequest> api,
                        std::shared_ptr<RequestChannel> ch, const std::string& id) {
  auto st = std::make_shared<StreamState>();
  st->builder = std::make_unique<ResponseBuilder>(*api, *m.ctx.tokenizer, api->model, id,
                                                  static_cast<int64_t>(std::time(nullptr)));
  st->api = std::move(api);
  st->ch = std::move(ch);
  st->active = std::make_unique<ActiveGuard>(active_);
  AsyncEngine* engine = m.engine;
  const auto poll_interval = opt_.poll_interval;
  const int fd = current_connection_fd();
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  // Called again and again on this connection's worker thread until it
  // calls sink.done() or returns false (then httplib drops the connection).
  auto provider = [st, poll_interval, fd](size_t, httplib::DataSink& sink) -> bool {
    std::string buf;
    if (!st->opened) {
      for (const json& j : st->builder->opening_chunks()) buf += sse(j);
      st->opened = true;
    }
    const bool finished = st->ch->finished();
    st->items.clear();
    st->ch->wait(st->items, poll_interval);
    st->chunks.clear();
    for (const ChannelItem& it : st->items) st->builder->add(it, &st->chunks);
    for (const json& j : st->chunks) buf += sse(j);
    RequestLog& log = current_request_log();
    log.output_tokens = st->builder->completion_tokens();
    // Checked on every wake-up, also while the request waits for a slot
    // and nothing is written: a client that left is aborted (the releaser).
    if (!finished && peer_gone(fd)) {
      log.note = "client disconnected";
      return false;
    }
    if (finished) {
      if (st->builder->interrupted()) {
        buf += sse(interruption(*st->ch).to_json());
      } else if (st->api->include_usage) {
        buf += sse(st->builder->usage_chunk());
      }
      buf += "data: [DONE]\n\n";
    }
    if (!buf.empty() && !sink.write(buf.data(), buf.size())) {
      log.note = "client disconnected";
      return false;
    }
    if (finished) {
      st->done = true;
      sink.done();
    }
    return true;
  };
  // Runs when the response is destroyed, whether the stream completed or
  // the client went away: an unfinished request is aborted, so its KV
  // blocks are freed at the engine's next step.
  auto releaser = [st, engine](bool) {
    if (!st->done) engine->abort(*st->ch);
    st->active.reset();
  };
  res.set_chunked_content_provider("text/event-stream", provider, releaser);
}

}  // namespace tessera::server
