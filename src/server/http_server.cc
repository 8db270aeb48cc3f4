// The server's life (bind, start, stop), routing, and the handlers that
// answer at once. Generation is in http_generate.cc, connections in
// http_session.cc.
#include "server/http_server.h"

#include <boost/asio/post.hpp>

#include <future>
#include <random>

#include "core/error.h"
#include "core/log.h"
#include "adapters/registry.h"
#include "server/http_internal.h"
#include "server/http_session.h"
#include "server/openai_response.h"

namespace tessera::server {
namespace {

using nlohmann::json;

constexpr int kBacklog = 1024;

// Paths as metric labels: only the routes this server knows (an unknown
// path from a client must not grow the label set).
std::string route_label(const std::string& path) {
  if (path == "/v1/conversations" || path.starts_with("/v1/conversations/")) return "/v1/conversations";
  if (path == "/" || path.starts_with("/webui/")) return "/webui";
  for (const char* known : {"/v1/completions", "/v1/chat/completions", "/v1/models", "/v1/soft_prompts", "/health", "/metrics"}) {
    if (path == known) return known;
  }
  if (path.starts_with("/v1/models/")) return "/v1/models/{id}";
  return "other";
}

// Compares without an early exit on the first differing byte, so timing
// does not reveal how much of a guessed key was right.
int base64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

bool same_secret(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

Reply text_reply(std::string body, std::string content_type) {
  Reply r;
  r.body = std::move(body);
  r.content_type = std::move(content_type);
  return r;
}

}  // namespace

std::string api_key_of(const std::string& authorization) {
  if (authorization.starts_with("Bearer ")) return authorization.substr(7);
  if (!authorization.starts_with("Basic ")) return "";
  // base64("user:password"): the password is the key.
  std::string decoded;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : std::string_view(authorization).substr(6)) {
    if (c == '=') break;
    const int v = base64_value(c);
    if (v < 0) return "";
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      decoded += static_cast<char>((acc >> bits) & 0xff);
    }
  }
  const size_t colon = decoded.find(':');
  return colon == std::string::npos ? "" : decoded.substr(colon + 1);
}

Reply error_reply(const ApiError& e) {
  Reply r;
  r.status = e.status();
  if (e.status() == 429 || e.status() == 503) r.headers.emplace_back("Retry-After", "1");
  r.body = dump_json(e.to_json());
  return r;
}

HttpServer::Impl::Impl(ServerOptions options, Metrics& m)
    : opt(std::move(options)), metrics(m), workers(static_cast<size_t>(std::max(1, opt.workers))) {
  id_salt = std::random_device{}();
  id_salt = (id_salt << 32) ^ std::random_device{}();
  if (!opt.webui_dir.empty()) load_webui(*this, opt.webui_dir);
  if (!opt.conversations_db.empty()) {
    // An unusable database turns the conversation API off (503 with the
    // reason); the rest of the server runs.
    try {
      conversations = std::make_unique<ConversationStore>(opt.conversations_db);
    } catch (const ApiError& e) {
      conversations_error = e.what();
      TESSERA_LOG_ERROR("{}; /v1/conversations will answer 503", e.what());
    }
  }
}

std::string HttpServer::Impl::next_id(Endpoint endpoint) {
  const uint64_t n = id_counter.fetch_add(1);
  return fmt::format("{}-{:016x}{:08x}", endpoint == Endpoint::kChat ? "chatcmpl" : "cmpl",
                     id_salt ^ (n * 0x9e3779b97f4a7c15ull), static_cast<uint32_t>(n));
}

const ServedModel* HttpServer::Impl::ready_model(Reply& err) const {
  if (shutting_down) {
    err = error_reply(ApiError(503, "the server is shutting down", "", "shutting_down"));
    return nullptr;
  }
  const ServedModel* m = model.load();
  if (m == nullptr) err = error_reply(ApiError(503, "the model is loading; retry shortly", "", "model_loading"));
  return m;
}

std::optional<Reply> HttpServer::Impl::check_auth(const std::string& path, const std::string& auth) const {
  // The API and the chat page (whose files a browser fetches with the
  // Basic credentials it asked the user for: any name, the key as password).
  const bool page = path == "/" || path.starts_with("/webui/");
  if (opt.api_key.empty() || !(path.starts_with("/v1/") || page)) return std::nullopt;
  if (same_secret(api_key_of(auth), opt.api_key)) return std::nullopt;
  Reply r = error_reply(ApiError(401, auth.empty() ? "missing API key: send 'Authorization: Bearer KEY'"
                                                   : "incorrect API key provided",
                                 "", "invalid_api_key"));
  r.headers.emplace_back("WWW-Authenticate", page ? "Basic realm=\"tessera\", charset=\"UTF-8\"" : "Bearer");
  return r;
}

void HttpServer::Impl::log_exchange(const RequestLog& log, int status) {
  metrics.count_http(route_label(log.path), status);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - log.start).count();
  constexpr size_t kShown = 256;  // of a path, which may be as long as the header limit
  const std::string_view path = std::string_view(log.path).substr(0, kShown);
  TESSERA_LOG_INFO("{}{} {}{} {} {} prompt={} output={} latency={:.3f}s{}", log.method.substr(0, 32),
                   log.method.size() > 32 ? "..." : "", path, log.path.size() > kShown ? "..." : "", status,
                   log.id.empty() ? "-" : log.id, log.prompt_tokens, log.output_tokens, secs,
                   log.note.empty() ? "" : " " + log.note);
}

void HttpServer::Impl::handle(const std::shared_ptr<Session>& s, HttpRequest req) {
  const std::string& path = req.path;
  const std::string& method = req.method;
  auto not_allowed = [&] {
    s->reply(error_reply(ApiError(405, fmt::format("{} is not allowed on {}", method, path))));
  };
  if (path == "/v1/completions" || path == "/v1/chat/completions") {
    if (method != "POST") return not_allowed();
    const Endpoint ep = path == "/v1/completions" ? Endpoint::kCompletions : Endpoint::kChat;
    return start_generation(*this, s, ep, std::move(req.body));
  }
  if (path == "/v1/conversations" || path.starts_with("/v1/conversations/")) {
    return handle_conversations(*this, s, std::move(req));
  }
  if ((path == "/" || path.starts_with("/webui/")) && handle_webui(*this, *s, req)) return;
  if (path == "/v1/load_lora_adapter" || path == "/v1/unload_lora_adapter") {
    if (method != "POST") return not_allowed();
    return handle_lora(s, req.body, path == "/v1/load_lora_adapter");
  }
  if (path == "/v1/soft_prompts") {
    if (method != "GET") return not_allowed();
    return handle_soft_prompts(*s);
  }
  const bool models = path == "/v1/models" || (path.starts_with("/v1/models/") && path.size() > 11);
  if (models || path == "/health" || path == "/metrics") {
    if (method != "GET") return not_allowed();
    if (path == "/health") return handle_health(*s);
    if (path == "/metrics") return handle_metrics(*s);
    return handle_models(*s, path == "/v1/models" ? "" : path.substr(11));
  }
  s->reply(error_reply(ApiError(404, fmt::format("no route for {} {}", method, path), "", "not_found")));
}

// The soft prompts a request may name in "soft_prompt" (--soft-prompt
// NAME=FILE): a Tessera extension, for the chat page.
void HttpServer::Impl::handle_soft_prompts(Session& s) {
  Reply err;
  const ServedModel* m = ready_model(err);
  if (m == nullptr) return s.reply(err);
  json data = json::array();
  if (m->ctx.adapters != nullptr) {
    for (const AdapterRegistry::Entry& e : m->ctx.adapters->soft_prompts()) {
      data.push_back({{"id", e.name}, {"object", "soft_prompt"}});
    }
  }
  s.reply(text_reply(dump_json(json{{"object", "list"}, {"data", data}}), "application/json"));
}

void HttpServer::Impl::handle_models(Session& s, const std::string& id) {
  Reply err;
  const ServedModel* m = ready_model(err);
  if (m == nullptr) return s.reply(err);
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
  if (id.empty()) return s.reply(text_reply(dump_json(json{{"object", "list"}, {"data", cards}}), "application/json"));
  for (const json& card : cards) {
    if (card["id"] == id) return s.reply(text_reply(dump_json(card), "application/json"));
  }
  s.reply(error_reply(ApiError(404, fmt::format("The model `{}` does not exist.", id), "model", "model_not_found")));
}

// Loading reads a file: on the worker pool, never on the loop.
void HttpServer::Impl::handle_lora(const std::shared_ptr<Session>& s, const std::string& body_text, bool load) {
  Reply err;
  const ServedModel* m = ready_model(err);
  if (m == nullptr) return s->reply(err);
  asio::post(workers, [this, s, m, body_text, load] {
    Reply r;
    try {
      if (!opt.allow_runtime_lora || m->ctx.adapters == nullptr) {
        throw ApiError(403, "loading and unloading LoRA adapters at run time is off (start the server with "
                            "--allow-runtime-lora)");
      }
      const json body = parse_body(body_text, opt.max_json_depth);
      auto str = [&](const char* key) {
        if (!body.is_object() || !body.contains(key) || !body[key].is_string()) {
          throw ApiError(400, fmt::format("'{}' (a string) is required", key), key);
        }
        return body[key].get<std::string>();
      };
      const std::string name = str("lora_name");
      if (load) {
        m->ctx.adapters->load(name, str("lora_path"), m->ctx.served_model_name);
        r = text_reply(fmt::format("Success: LoRA adapter '{}' added successfully.", name), "text/plain");
      } else {
        // Running requests keep the adapter until they finish; new ones get 404.
        if (!m->ctx.adapters->unload(name)) {
          throw ApiError(404, fmt::format("The lora adapter '{}' cannot be found.", name), "lora_name",
                         "model_not_found");
        }
        r = text_reply(fmt::format("Success: LoRA adapter '{}' removed successfully.", name), "text/plain");
      }
    } catch (const ApiError& e) {
      r = error_reply(e);
    } catch (const std::exception& e) {
      TESSERA_LOG_ERROR("handler failed: {}", e.what());
      r = error_reply(ApiError(500, "internal server error"));
    }
    asio::post(ioc, [s, r = std::move(r)] { s->reply(r); });
  });
}

void HttpServer::Impl::handle_health(Session& s) {
  const ServedModel* m = model.load();
  Reply r;
  json body;
  if (shutting_down) {
    r.status = 503;
    body = {{"status", "shutting_down"}};
  } else if (m == nullptr) {
    r.status = 503;
    body = {{"status", "loading"}};
  } else if (!m->engine->accepting()) {
    r.status = 503;
    body = {{"status", "error"}};
  } else {
    body = {{"status", "ok"}};
  }
  r.body = dump_json(body);
  s.reply(r);
}

void HttpServer::Impl::handle_metrics(Session& s) {
  const ServedModel* m = model.load();
  std::string text;
  if (m != nullptr) {
    const engine::EngineStats st = m->engine->stats();
    std::optional<AdapterRegistry::PoolStats> pool;
    if (m->ctx.adapters != nullptr) pool = m->ctx.adapters->pool_stats();
    text = metrics.render(&st, m->engine->in_flight(), pool ? &*pool : nullptr);
  } else {
    text = metrics.render(nullptr, 0);
  }
  s.reply(text_reply(std::move(text), "text/plain; version=0.0.4; charset=utf-8"));
}

void HttpServer::Impl::accept() {
  acceptor.async_accept([this](const boost::system::error_code& ec, tcp::socket socket) {
    if (stopping || !acceptor.is_open()) return;
    if (ec) {
      // Out of descriptors (EMFILE) or a transient failure: try again
      // shortly rather than spin, and say so once a second at most.
      const auto now = std::chrono::steady_clock::now();
      if (now - last_accept_warning > std::chrono::seconds(1)) {
        TESSERA_LOG_WARN("accept failed: {} ({} connections open)", ec.message(), connections.load());
        last_accept_warning = now;
      }
      accept_retry.expires_after(std::chrono::milliseconds(50));
      accept_retry.async_wait([this](const boost::system::error_code& e) {
        if (!e) accept();
      });
      return;
    }
    std::make_shared<Session>(std::move(socket), *this)->start();
    accept();
  });
}

void HttpServer::Impl::close_all() {
  stopping = true;
  boost::system::error_code ec;
  acceptor.close(ec);
  accept_retry.cancel();
  const std::vector<Session*> open(sessions.begin(), sessions.end());
  for (Session* s : open) s->shutdown();
}

HttpServer::HttpServer(ServerOptions options, Metrics& metrics)
    : impl_(std::make_unique<Impl>(std::move(options), metrics)) {}

HttpServer::~HttpServer() { stop(); }

void HttpServer::bind() {
  Impl& s = *impl_;
  try {
    tcp::resolver resolver(s.ioc);
    const auto endpoints = resolver.resolve(s.opt.host, std::to_string(s.opt.port),
                                            tcp::resolver::passive | tcp::resolver::numeric_service);
    const tcp::endpoint ep = endpoints.begin()->endpoint();
    s.acceptor.open(ep.protocol());
    s.acceptor.set_option(tcp::acceptor::reuse_address(true));
    s.acceptor.bind(ep);
    s.acceptor.listen(kBacklog);
    s.port = s.acceptor.local_endpoint().port();
  } catch (const boost::system::system_error& e) {
    boost::system::error_code ignored;
    s.acceptor.close(ignored);
    fail(ErrorCode::kIo, "cannot bind to {}:{} ({})", s.opt.host, s.opt.port, e.what());
  }
}

int HttpServer::bound_port() const { return impl_->port; }

void HttpServer::start() {
  Impl& s = *impl_;
  s.accept();
  s.loop = std::thread([&s] {
    // A handler that throws must not take the loop (and every connection)
    // with it: log it and keep running. The connection whose handler threw
    // ends by its own timers.
    for (;;) {
      try {
        s.ioc.run();
        return;
      } catch (const std::exception& e) {
        TESSERA_LOG_ERROR("HTTP loop: a handler threw ({}); the loop goes on", e.what());
      }
    }
  });
}

void HttpServer::attach(const ServedModel* model) { impl_->model.store(model); }

void HttpServer::begin_shutdown() { impl_->shutting_down = true; }

int64_t HttpServer::active_requests() const { return impl_->active.load(); }

int64_t HttpServer::open_connections() const { return impl_->connections.load(); }

bool HttpServer::wait_idle(std::chrono::milliseconds timeout) const {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (impl_->active.load() > 0) {
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

void HttpServer::stop() {
  Impl& s = *impl_;
  if (!s.loop.joinable()) return;
  // The loop ends by itself once every connection is closed and every
  // generation has had its engine's last word; give it a few seconds.
  auto closed = std::make_shared<std::promise<void>>();
  asio::post(s.ioc, [&s, closed] {
    s.close_all();
    closed->set_value();
  });
  closed->get_future().wait_for(std::chrono::seconds(5));
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!s.ioc.stopped() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  s.ioc.stop();
  s.loop.join();
  s.workers.join();
}

}  // namespace tessera::server
