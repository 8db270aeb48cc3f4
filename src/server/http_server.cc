#include "server/http_server.h"

#include <optional>
#include <httplib.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <random>

#include "core/error.h"
#include "core/log.h"
#include "server/adapter_registry.h"
#include "server/http_connection.h"
#include "server/http_internal.h"
#include "server/openai_response.h"

namespace tessera::server {

class HttpServer::Impl : public httplib::Server {
 public:
  // httplib's compiled-in listen backlog is 5: a burst of a few hundred
  // clients connecting at once would see SYNs dropped and 1 s retransmits.
  // listen() again on the bound socket raises it (Linux allows that).
  void raise_backlog(int n) { ::listen(svr_sock_, n); }

 private:
  // Replaces httplib's per-connection loop (see http_connection.h); the
  // request parsing, routing and response writing stay httplib's.
  bool process_and_close_socket(socket_t sock) override {
    int one = 1;
    ::setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // SSE events are small and latency-bound
    using std::chrono::milliseconds;
    SocketStream strm(sock, milliseconds(read_timeout_sec_ * 1000 + read_timeout_usec_ / 1000),
                      milliseconds(write_timeout_sec_ * 1000 + write_timeout_usec_ / 1000));
    auto stopping = [this] { return svr_sock_ == INVALID_SOCKET; };
    // Byte ranges mean nothing for this API's responses (httplib would cut
    // JSON bodies, errors included, into multipart/byteranges).
    const std::function<void(httplib::Request&)> ignore_ranges = [](httplib::Request& req) { req.ranges.clear(); };
    set_current_connection_fd(sock);
    take_close_request();
    bool ok = true;
    for (size_t left = keep_alive_max_count_; left > 0; --left) {
      if (!strm.wait_request(std::chrono::seconds(keep_alive_timeout_sec_), stopping)) break;
      RequestLog& log = current_request_log();
      log = RequestLog{};
      log.start = std::chrono::steady_clock::now();
      bool closed = false;
      ok = process_request(strm, /*close_connection=*/left == 1 || stopping(), closed, ignore_ranges);
      if (!ok || closed || take_close_request()) break;
    }
    set_current_connection_fd(-1);
    ::shutdown(sock, SHUT_RDWR);
    ::close(sock);
    return ok;
  }
};

namespace {

using nlohmann::json;

constexpr int kBacklog = 1024;

// Paths as metric labels: only the routes this server knows (an unknown
// path from a client must not grow the label set).
std::string route_label(const std::string& path) {
  for (const char* known : {"/v1/completions", "/v1/chat/completions", "/v1/models", "/health", "/metrics"}) {
    if (path == known) return known;
  }
  if (path.starts_with("/v1/models/")) return "/v1/models/{id}";
  return "other";
}

// Compares without an early exit on the first differing byte, so timing
// does not reveal how much of a guessed key was right.
bool same_secret(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

std::string status_message(int status) {
  switch (status) {
    case 400: return "the request is malformed";
    case 404: return "not found";
    case 405: return "method not allowed";
    case 413: return "the request body is too large";
    case 414: return "the request URI is too long";
    case 416: return "range not satisfiable";
    case 431: return "request header fields are too large";
    default: return status >= 500 ? "internal server error" : "the request was refused";
  }
}

}  // namespace

RequestLog& current_request_log() {
  // A connection's requests are handled, streamed and logged on one worker
  // thread, so the handler can leave the log line's numbers here.
  thread_local RequestLog log;
  return log;
}

void set_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status();
  if (e.status() == 429 || e.status() == 503) res.set_header("Retry-After", "1");
  res.set_content(dump_json(e.to_json()), "application/json");
}

HttpServer::HttpServer(ServerOptions options, Metrics& metrics)
    : opt_(std::move(options)), metrics_(metrics), impl_(std::make_unique<Impl>()) {
  id_salt_ = std::random_device{}();
  id_salt_ = (id_salt_ << 32) ^ std::random_device{}();
  Impl& svr = *impl_;
  const int threads = std::max(4, opt_.threads);
  svr.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  svr.set_payload_max_length(opt_.max_body_bytes);
  svr.set_keep_alive_max_count(1000);
  svr.set_keep_alive_timeout(5);  // an idle connection holds its worker this long
  svr.set_read_timeout(10);
  svr.set_write_timeout(10);

  svr.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!opt_.api_key.empty() && req.path.starts_with("/v1/")) {
      const std::string auth = req.get_header_value("Authorization");
      const std::string prefix = "Bearer ";
      if (!auth.starts_with(prefix) || !same_secret(auth.substr(prefix.size()), opt_.api_key)) {
        set_error(res, ApiError(401, auth.empty() ? "missing API key: send 'Authorization: Bearer KEY'"
                                                  : "incorrect API key provided",
                                "", "invalid_api_key"));
        res.set_header("WWW-Authenticate", "Bearer");
        // Answered before httplib reads the body: the unread body would be
        // taken for the next request on this connection.
        res.set_header("Connection", "close");
        close_connection_after_response();
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });

  // Statuses httplib sets itself (404 unknown path, 400 bad request line,
  // 413 too large...) get an OpenAI-shaped body too.
  svr.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    // httplib found the request itself broken (request line, size, a body
    // left unread): what follows on the connection cannot be trusted.
    if (res.status != 404) {
      res.set_header("Connection", "close");
      close_connection_after_response();
    }
    std::string msg = status_message(res.status);
    if (res.status == 404) msg = fmt::format("no route for {} {}", req.method, req.path);
    set_error(res, ApiError(res.status, msg, "", res.status == 404 ? "not_found" : ""));
    return httplib::Server::HandlerResponse::Handled;
  }));
  svr.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown exception";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    TESSERA_LOG_ERROR("handler failed: {}", what);
    set_error(res, ApiError(500, "internal server error"));
  });
  svr.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    RequestLog& log = current_request_log();
    metrics_.count_http(route_label(req.path), res.status);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - log.start).count();
    TESSERA_LOG_INFO("{} {} {} {} prompt={} output={} latency={:.3f}s{}", req.method, req.path, res.status,
                     log.id.empty() ? "-" : log.id, log.prompt_tokens, log.output_tokens, secs,
                     log.note.empty() ? "" : " " + log.note);
  });

  auto method_not_allowed = [](const httplib::Request& req, httplib::Response& res) {
    set_error(res, ApiError(405, fmt::format("{} is not allowed on {}", req.method, req.path)));
  };
  for (const char* path : {"/v1/completions", "/v1/chat/completions"}) {
    const Endpoint ep = std::string_view(path) == "/v1/completions" ? Endpoint::kCompletions : Endpoint::kChat;
    svr.Post(path, [this, ep](const httplib::Request& req, httplib::Response& res) { handle_generate(req, res, ep); });
    svr.Get(path, method_not_allowed);
    svr.Put(path, method_not_allowed);
    svr.Patch(path, method_not_allowed);
    svr.Delete(path, method_not_allowed);
  }
  svr.Post("/v1/load_lora_adapter",
           [this](const httplib::Request& req, httplib::Response& res) { handle_lora(req, res, true); });
  svr.Post("/v1/unload_lora_adapter",
           [this](const httplib::Request& req, httplib::Response& res) { handle_lora(req, res, false); });
  svr.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) { handle_models(req, res); });
  svr.Get(R"(/v1/models/(.+))", [this](const httplib::Request& req, httplib::Response& res) { handle_models(req, res); });
  svr.Get("/health", [this](const httplib::Request&, httplib::Response& res) { handle_health(res); });
  svr.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) { handle_metrics(res); });
  for (const char* path : {"/v1/models", "/health", "/metrics"}) {
    svr.Post(path, method_not_allowed);
    svr.Put(path, method_not_allowed);
    svr.Patch(path, method_not_allowed);
    svr.Delete(path, method_not_allowed);
  }
}

HttpServer::~HttpServer() { stop(); }

void HttpServer::bind() {
  Impl& svr = *impl_;
  if (opt_.port == 0) {
    port_ = svr.bind_to_any_port(opt_.host);
    TESSERA_CHECK(port_ > 0, kIo, "cannot bind to {} (any port)", opt_.host);
  } else {
    TESSERA_CHECK(svr.bind_to_port(opt_.host, opt_.port), kIo, "cannot bind to {}:{} (in use, or not an address here)",
                  opt_.host, opt_.port);
    port_ = opt_.port;
  }
  svr.raise_backlog(kBacklog);
}

void HttpServer::start() {
  thread_ = std::thread([this] { impl_->listen_after_bind(); });
}

void HttpServer::attach(const ServedModel* model) { model_.store(model); }

bool HttpServer::wait_idle(std::chrono::milliseconds timeout) const {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (active_.load() > 0) {
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

void HttpServer::stop() {
  if (!thread_.joinable()) return;
  impl_->stop();
  thread_.join();
}

const ServedModel* HttpServer::ready_model(httplib::Response& res) {
  if (shutting_down_) {
    set_error(res, ApiError(503, "the server is shutting down", "", "shutting_down"));
    return nullptr;
  }
  const ServedModel* m = model_.load();
  if (m == nullptr) {
    set_error(res, ApiError(503, "the model is loading; retry shortly", "", "model_loading"));
    return nullptr;
  }
  return m;
}

void HttpServer::handle_models(const httplib::Request& req, httplib::Response& res) {
  const ServedModel* m = ready_model(res);
  if (m == nullptr) return;
  // The base model, then its LoRA adapters (vLLM's cards: root is the
  // adapter's file, parent the base model).
  json cards = json::array({{{"id", m->ctx.served_model_name},
                             {"object", "model"},
                             {"created", m->created},
                             {"owned_by", "tessera"},
                             {"root", m->ctx.served_model_name},
                             {"parent", nullptr},
                             {"max_model_len", m->ctx.max_model_len}}});
  if (m->ctx.adapters != nullptr) {
    for (const AdapterRegistry::Entry& e : m->ctx.adapters->list()) {
      cards.push_back({{"id", e.name},
                       {"object", "model"},
                       {"created", m->created},
                       {"owned_by", "tessera"},
                       {"root", e.path},
                       {"parent", m->ctx.served_model_name},
                       {"max_model_len", m->ctx.max_model_len}});
    }
  }
  if (req.matches.size() > 1) {
    for (const json& card : cards) {
      if (card["id"] == req.matches[1].str()) {
        res.set_content(dump_json(card), "application/json");
        return;
      }
    }
    set_error(res, ApiError(404, fmt::format("The model `{}` does not exist.", req.matches[1].str()), "model",
                            "model_not_found"));
    return;
  }
  res.set_content(dump_json(json{{"object", "list"}, {"data", cards}}), "application/json");
}

void HttpServer::handle_lora(const httplib::Request& req, httplib::Response& res, bool load) {
  const ServedModel* m = ready_model(res);
  if (m == nullptr) return;
  try {
    if (!opt_.allow_runtime_lora || m->ctx.adapters == nullptr) {
      throw ApiError(403, "loading and unloading LoRA adapters at run time is off (start the server with "
                          "--allow-runtime-lora)");
    }
    const json body = parse_body(req.body, opt_.max_json_depth);
    auto str = [&](const char* key) {
      if (!body.is_object() || !body.contains(key) || !body[key].is_string()) {
        throw ApiError(400, fmt::format("'{}' (a string) is required", key), key);
      }
      return body[key].get<std::string>();
    };
    const std::string name = str("lora_name");
    if (load) {
      m->ctx.adapters->load(name, str("lora_path"), m->ctx.served_model_name);
      res.set_content(fmt::format("Success: LoRA adapter '{}' added successfully.", name), "text/plain");
    } else {
      // Running requests keep the adapter until they finish; new ones get 404.
      if (!m->ctx.adapters->unload(name)) {
        throw ApiError(404, fmt::format("The lora adapter '{}' cannot be found.", name), "lora_name",
                       "model_not_found");
      }
      res.set_content(fmt::format("Success: LoRA adapter '{}' removed successfully.", name), "text/plain");
    }
  } catch (const ApiError& e) {
    set_error(res, e);
  }
}

void HttpServer::handle_health(httplib::Response& res) {
  const ServedModel* m = model_.load();
  json body;
  if (shutting_down_) {
    res.status = 503;
    body = {{"status", "shutting_down"}};
  } else if (m == nullptr) {
    res.status = 503;
    body = {{"status", "loading"}};
  } else if (!m->engine->accepting()) {
    res.status = 503;
    body = {{"status", "error"}};
  } else {
    body = {{"status", "ok"}};
  }
  res.set_content(dump_json(body), "application/json");
}

void HttpServer::handle_metrics(httplib::Response& res) {
  const ServedModel* m = model_.load();
  std::string text;
  if (m != nullptr) {
    const engine::EngineStats st = m->engine->stats();
    std::optional<AdapterRegistry::PoolStats> pool;
    if (m->ctx.adapters != nullptr) pool = m->ctx.adapters->pool_stats();
    text = metrics_.render(&st, m->engine->in_flight(), pool ? &*pool : nullptr);
  } else {
    text = metrics_.render(nullptr, 0);
  }
  res.set_content(text, "text/plain; version=0.0.4; charset=utf-8");
}

}  // namespace tessera::server
