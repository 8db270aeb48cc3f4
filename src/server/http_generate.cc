// POST /v1/completions and /v1/chat/completions: the body is parsed,
// tokenized and submitted to the engine on the worker pool, and
// answered with one JSON body or an SSE stream. No thread waits for the
// engine: its RequestChannel's listener posts a wake-up to the loop, which
// takes the new outputs and writes them.
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>

#include <ctime>

#include "core/error.h"
#include "core/log.h"
#include "server/http_internal.h"
#include "server/http_session.h"
#include "server/openai_response.h"

namespace tessera::server {
namespace {

using nlohmann::json;

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

// Why a finished request has no proper result.
ApiError interruption(const RequestChannel& ch) {
  if (const std::string f = ch.failure(); !f.empty()) return ApiError(500, "the request failed: " + f);
  if (ch.shutting_down()) return ApiError(503, "the server is shutting down; the request was cancelled", "", "shutting_down");
  return ApiError(500, "the request was cancelled");
}

std::string sse(const json& j) { return "data: " + dump_json(j) + "\n\n"; }

// One generation request, from its body to its last byte. Lives while the
// worker parses and submits it, then while its channel's listener holds it
// (until the channel finishes); all but parse() run on the loop.
class Generation : public std::enable_shared_from_this<Generation> {
 public:
  Generation(HttpServer::Impl& srv, std::shared_ptr<Session> s, const ServedModel& m, Endpoint ep, std::string body)
      : srv_(srv), session_(std::move(s)), m_(m), endpoint_(ep), body_(std::move(body)),
        work_(asio::make_work_guard(srv.ioc)) {}

  // Worker pool: JSON and tokenization, which can take a while for a long prompt.
  void parse() {
    try {
      const json body = parse_body(body_, srv_.opt.max_json_depth);
      api_ = std::make_shared<ApiRequest>(endpoint_ == Endpoint::kChat ? parse_chat_request(body, m_.ctx, body_)
                                                                     : parse_completion_request(body, m_.ctx, body_));
      body_.clear();
      const int64_t samples = static_cast<int64_t>(api_->prompts.size()) * api_->params.n;
      if (samples > srv_.opt.max_samples_per_request) {
        throw ApiError(400, fmt::format("the request asks for {} completions (prompts x n); this server allows {}",
                                        samples, srv_.opt.max_samples_per_request),
                       "n");
      }
      submitted_ = submit_to_engine();
    } catch (const ApiError& e) {
      error_ = e;
    } catch (const Error& e) {
      error_ = engine_error(e, srv_.shutting_down || !m_.engine->accepting());
    } catch (const std::exception& e) {
      TESSERA_LOG_ERROR("handler failed: {}", e.what());
      error_ = ApiError(500, "internal server error");
    }
    asio::post(srv_.ioc, [self = shared_from_this()] { self->start(); });
  }

  // The client left: abort (the channel then finishes within a step).
  void client_gone() {
    gone_ = true;
    if (ch_) m_.engine->abort(*ch_);
  }

 private:
  // Worker pool: the engine's preparation of the prompts (validation, the
  // detokenizer's state) grows with their length, so it runs here too.
  std::shared_ptr<RequestChannel> submit_to_engine() {
    std::vector<engine::PromptLayout> prompts = api_->layouts;
    if (prompts.empty()) {
      for (const auto& p : api_->prompts) {
        engine::PromptLayout plain;
        plain.tokens = p;
        prompts.push_back(std::move(plain));
      }
    }
    return m_.engine->submit(std::move(prompts), api_->params, {api_->lora, api_->soft_prompt});
  }

  // The loop, once the worker is done: answer an error, or follow the channel.
  void start() {
    if (gone_) {
      if (submitted_) m_.engine->abort(*submitted_);
      return reply(ApiError(499, "the client closed the connection"));
    }
    if (error_) return reply(*error_);
    ch_ = std::move(submitted_);
    RequestLog& log = session_->log();
    log.prompt_tokens = 0;
    for (const auto& p : api_->prompts) log.prompt_tokens += static_cast<int64_t>(p.size()) + api_->virtual_tokens;
    log.id = srv_.next_id(endpoint_);
    builder_ = std::make_unique<ResponseBuilder>(*api_, *m_.ctx.tokenizer, api_->model, log.id,
                                                 static_cast<int64_t>(std::time(nullptr)));
    if (api_->stream) {
      session_->stream_open();
      std::string head;
      for (const json& j : builder_->opening_chunks()) head += sse(j);
      session_->stream_send(head);
    }
    // The engine thread calls this: it only posts (once per batch of news).
    ch_->set_listener([self = shared_from_this()] {
      if (!self->wake_.exchange(true)) asio::post(self->srv_.ioc, [self] { self->pump(); });
    });
  }

  // Takes what the engine produced and writes it (streaming) or keeps it.
  void pump() {
    if (done_) return;  // a wake-up posted before end()
    wake_ = false;
    const bool finished = ch_->finished();  // then this take gets the last outputs
    items_.clear();
    ch_->take(items_);
    std::vector<json> chunks;
    for (const ChannelItem& it : items_) builder_->add(it, api_->stream ? &chunks : nullptr);
    session_->log().output_tokens = builder_->completion_tokens();
    if (api_->stream) {
      std::string buf;
      for (const json& j : chunks) buf += sse(j);
      if (finished) {
        if (builder_->interrupted()) {
          buf += sse(interruption(*ch_).to_json());
        } else if (api_->include_usage) {
          buf += sse(builder_->usage_chunk());
        }
        buf += "data: [DONE]\n\n";
        end();
        session_->stream_close(buf);
      } else if (!gone_) {
        session_->stream_send(buf);  // false: dropped, and client_gone() aborted us
      }
      return;
    }
    if (!finished) return;
    end();
    // Nobody reads a 499; it keeps the log and the metrics honest (nginx's
    // "client closed request").
    if (gone_) return reply(ApiError(499, "the client closed the connection"));
    if (builder_->interrupted()) return reply(interruption(*ch_));
    Reply r;
    r.body = dump_json(builder_->response());
    session_->reply(r);
  }

  void end() {
    done_ = true;
    ch_->set_listener({});  // drops the listener's reference to us
  }

  void reply(const ApiError& e) { session_->reply(error_reply(e)); }

  HttpServer::Impl& srv_;
  std::shared_ptr<Session> session_;
  const ServedModel& m_;
  Endpoint endpoint_;
  std::string body_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;  // the loop runs until we are done
  std::shared_ptr<ApiRequest> api_;
  std::optional<ApiError> error_;
  std::shared_ptr<RequestChannel> ch_;
  std::shared_ptr<RequestChannel> submitted_;  // set by the worker, taken by start() on the loop
  std::unique_ptr<ResponseBuilder> builder_;
  std::vector<ChannelItem> items_;
  std::atomic<bool> wake_{false};
  bool gone_ = false;
  bool done_ = false;
};

}  // namespace

void start_generation(HttpServer::Impl& srv, const std::shared_ptr<Session>& s, Endpoint endpoint, std::string body) {
  Reply err;
  const ServedModel* m = srv.ready_model(err);
  if (m == nullptr) return s->reply(err);
  s->count_as_active();
  auto g = std::make_shared<Generation>(srv, s, *m, endpoint, std::move(body));
  s->on_gone([w = std::weak_ptr<Generation>(g)] {
    if (auto g = w.lock()) g->client_gone();
  });
  asio::post(srv.workers, [g] { g->parse(); });
}

}  // namespace tessera::server
