#include "router/router.h"

#include <httplib.h>

#include <atomic>
#include <condition_variable>
#include <thread>

#include "core/error.h"
#include "core/log.h"
#include "router/upstream.h"

namespace tessera::router {

using json = nlohmann::json;

namespace {

std::string content_text(const json& content) {
  if (content.is_string()) return content.get<std::string>();
  std::string out;
  if (content.is_array()) {
    for (const json& part : content) {
      if (part.is_object() && part.value("type", "") == "text" && part.contains("text") && part["text"].is_string()) {
        out += part["text"].get<std::string>();
      }
    }
  }
  return out;
}

std::string error_body(const std::string& message, const char* type) {
  return json{{"error", {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}}}}.dump();
}

// Statuses that say "not this replica, not now": the request is tried on another.
bool retryable(int status) { return status == 502 || status == 503 || status == 504; }

}  // namespace

std::string routing_text(const json& body) {
  if (!body.is_object()) return {};
  std::string text;
  if (auto m = body.find("messages"); m != body.end() && m->is_array()) {
    for (const json& msg : *m) {
      if (!msg.is_object()) continue;
      text += msg.value("role", "");
      text += '\n';
      if (msg.contains("content")) text += content_text(msg["content"]);
      text += '\n';
    }
  } else if (auto p = body.find("prompt"); p != body.end()) {
    if (p->is_string()) {
      text = p->get<std::string>();
    } else {
      text = p->dump();  // token ids or several prompts: their JSON shares a prefix when they do
    }
  }
  return text;
}

struct Router::Impl {
  RouterOptions opt;
  ReplicaSet replicas;
  httplib::Server server;
  int port = 0;
  std::thread listener, health;
  std::mutex mu;
  std::condition_variable cv;
  bool stopping = false;
  std::atomic<int64_t> retries{0}, lost{0}, unavailable{0};

  explicit Impl(RouterOptions o) : opt(std::move(o)), replicas(opt.replicas, opt.routing) {}

  UpstreamRequest upstream_request(int replica, const httplib::Request& req, bool whole_body) const {
    UpstreamRequest u;
    u.base_url = replicas.url(replica);
    u.method = req.method;
    u.path = req.path;
    for (const char* h : {"Authorization", "Content-Type", "Accept", "X-Request-Id"}) {
      if (req.has_header(h)) u.headers.emplace_back(h, req.get_header_value(h));
    }
    u.body = req.body;
    u.connect_timeout = opt.connect_timeout;
    u.read_timeout = opt.read_timeout;
    u.max_buffered_bytes = whole_body ? SIZE_MAX : opt.max_buffered_bytes;
    return u;
  }

  void forward(const httplib::Request& req, httplib::Response& res);
  void relay_stream(httplib::Response& res, std::shared_ptr<Upstream> up, int replica);
  void check_health();
};

void Router::Impl::forward(const httplib::Request& req, httplib::Response& res) {
  json body;
  bool stream = false;
  try {
    body = json::parse(req.body);
    if (body.is_object()) stream = body.value("stream", false);
  } catch (const std::exception&) {
    // Forwarded as it is: the replica answers 400 with its own message.
  }
  const std::string text = routing_text(body);
  std::vector<int> tried;
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    const Pick pick = replicas.pick(text, tried);
    if (pick.replica < 0) {
      unavailable += 1;
      res.status = 503;
      res.set_content(error_body(fmt::format("no replica could take the request ({} tried)", tried.size()),
                                 "service_unavailable"),
                      "application/json");
      return;
    }
    auto up = std::make_shared<Upstream>(upstream_request(pick.replica, req, !stream));
    const Upstream::Start start = up->wait_start(/*whole_body=*/!stream);
    if (start == Upstream::Start::kFailed || retryable(up->status())) {
      const std::string why = start == Upstream::Start::kFailed ? up->error() : fmt::format("HTTP {}", up->status());
      if (!up->connected()) replicas.set_healthy(pick.replica, false);  // unreachable: out until a check says otherwise
      replicas.finished(pick.replica, true);
      TESSERA_LOG_WARN("{} {}: replica {} failed before responding ({}); trying another", req.method, req.path,
                       replicas.url(pick.replica), why);
      tried.push_back(pick.replica);
      retries += 1;
      continue;
    }
    res.status = up->status();
    TESSERA_LOG_INFO("{} {} -> {} ({}, {} of {} chars cached) {} {:.3f}s", req.method, req.path,
                     replicas.url(pick.replica), reason_name(pick.reason), pick.matched_chars, text.size(),
                     res.status, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    if (start == Upstream::Start::kDone) {
      res.set_content(up->take_all(), up->content_type().empty() ? "application/json" : up->content_type());
      replicas.finished(pick.replica, false);
      return;
    }
    relay_stream(res, std::move(up), pick.replica);
    return;
  }
}

// The stream has begun: what the replica sends goes on, chunk by chunk, on
// the client's connection. A replica that breaks off now costs the request
// (its client has seen part of an answer); the client gets an error event.
void Router::Impl::relay_stream(httplib::Response& res, std::shared_ptr<Upstream> up, int replica) {
  const std::string type = up->content_type().empty() ? "text/event-stream" : up->content_type();
  res.set_chunked_content_provider(
      type,
      [this, up, replica](size_t, httplib::DataSink& sink) {
        std::string chunk;
        if (up->next(chunk)) return sink.write(chunk.data(), chunk.size());  // false: the client went away

        if (up->failed()) {
          lost += 1;
          TESSERA_LOG_WARN("replica {} broke off a stream: {}", replicas.url(replica), up->error());
          const std::string event = "data: " + error_body("the replica serving this stream failed: " + up->error(),
                                                          "server_error") + "\n\n";
          sink.write(event.data(), event.size());
        }
        sink.done();
        return true;
      },
      [this, up, replica](bool) {
        up->cancel();
        replicas.finished(replica, up->failed());
      });
}

void Router::Impl::check_health() {
  for (;;) {
    for (int i = 0; i < static_cast<int>(replicas.size()); ++i) {
      httplib::Client cli(replicas.url(i));
      cli.set_connection_timeout(1, 0);
      cli.set_read_timeout(2, 0);
      const httplib::Result r = cli.Get("/health");
      const bool ok = r && r->status == 200;
      const bool was = replicas.stats()[i].healthy;
      if (ok != was) {
        TESSERA_LOG_INFO("replica {} is {}", replicas.url(i), ok ? "up" : "down");
      }
      replicas.set_healthy(i, ok);
    }
    std::unique_lock<std::mutex> lock(mu);
    if (cv.wait_for(lock, opt.health_interval, [&] { return stopping; })) return;
  }
}

Router::Router(RouterOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {
  TESSERA_CHECK(!impl_->opt.replicas.empty(), kInvalidArgument, "route: give at least one --replica URL");
  for (const std::string& u : impl_->opt.replicas) {
    TESSERA_CHECK(u.rfind("http://", 0) == 0, kInvalidArgument, "--replica {}: give http://HOST:PORT", u);
  }
  Impl& m = *impl_;
  httplib::Server& s = m.server;
  const int threads = m.opt.threads;
  s.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  s.set_payload_max_length(m.opt.max_body_bytes);
  s.set_read_timeout(30, 0);
  s.set_write_timeout(10, 0);
  s.set_keep_alive_timeout(5);
  auto gen = [&m](const httplib::Request& req, httplib::Response& res) { m.forward(req, res); };
  s.Post("/v1/completions", gen);
  s.Post("/v1/chat/completions", gen);
  s.Get("/v1/models", [&m](const httplib::Request& req, httplib::Response& res) { m.forward(req, res); });
  s.Get("/health", [&m](const httplib::Request&, httplib::Response& res) {
    json reps = json::array();
    for (const ReplicaStats& r : m.replicas.stats()) reps.push_back({{"url", r.url}, {"healthy", r.healthy}});
    const bool up = m.replicas.any_healthy();
    res.status = up ? 200 : 503;
    res.set_content(json{{"status", up ? "ok" : "no replica"}, {"replicas", reps}}.dump(), "application/json");
  });
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_text(), "text/plain; version=0.0.4");
  });
  s.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    const char* type = res.status == 404 ? "not_found" : "invalid_request_error";
    res.set_content(error_body(fmt::format("{} {}: HTTP {} (the router forwards /v1/completions, "
                                           "/v1/chat/completions and /v1/models)",
                                           req.method, req.path, res.status),
                               type),
                    "application/json");
  });
}

Router::~Router() { stop(); }

void Router::bind() {
  Impl& m = *impl_;
  m.port = m.opt.port == 0 ? m.server.bind_to_any_port(m.opt.host) : m.opt.port;
  if (m.opt.port != 0 && !m.server.bind_to_port(m.opt.host, m.opt.port)) m.port = -1;
  TESSERA_CHECK(m.port > 0, kIo, "route: cannot listen on {}:{}", m.opt.host, m.opt.port);
}

int Router::bound_port() const { return impl_->port; }

void Router::start() {
  Impl& m = *impl_;
  m.health = std::thread([&m] { m.check_health(); });
  m.listener = std::thread([&m] { m.server.listen_after_bind(); });
}

void Router::stop() {
  Impl& m = *impl_;
  {
    std::lock_guard<std::mutex> lock(m.mu);
    m.stopping = true;
  }
  m.cv.notify_all();
  m.server.stop();
  if (m.listener.joinable()) m.listener.join();
  if (m.health.joinable()) m.health.join();
}

std::string Router::metrics_text() const {
  const std::vector<ReplicaStats> st = impl_->replicas.stats();
  std::string out;
  auto family = [&](const char* name, const char* type, const char* help, auto value) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
    for (const ReplicaStats& r : st) out += fmt::format("{}{{replica=\"{}\"}} {}\n", name, r.url, value(r));
  };
  family("tessera_router_replica_up", "gauge", "1 while the replica passes health checks.",
         [](const ReplicaStats& r) { return r.healthy ? 1 : 0; });
  family("tessera_router_in_flight", "gauge", "Requests the replica is serving for the router.",
         [](const ReplicaStats& r) { return r.in_flight; });
  family("tessera_router_requests_total", "counter", "Requests sent to the replica (retries included).",
         [](const ReplicaStats& r) { return r.requests; });
  family("tessera_router_failures_total", "counter", "Requests the replica failed (unreachable, 5xx before a byte, "
         "or broken off mid-stream).", [](const ReplicaStats& r) { return r.failures; });
  family("tessera_router_matched_chars_total", "counter",
         "Prompt characters found in the replica's approximate prefix tree when routed.",
         [](const ReplicaStats& r) { return r.matched_chars; });
  family("tessera_router_routed_chars_total", "counter", "Prompt characters routed to the replica.",
         [](const ReplicaStats& r) { return r.routed_chars; });
  family("tessera_router_tree_chars", "gauge", "Characters held by the replica's approximate prefix tree.",
         [](const ReplicaStats& r) { return r.tree_chars; });
  out += "# HELP tessera_router_picks_total Routing decisions by reason.\n# TYPE tessera_router_picks_total counter\n";
  for (const ReplicaStats& r : st) {
    for (int k = 0; k < 4; ++k) {
      out += fmt::format("tessera_router_picks_total{{replica=\"{}\",reason=\"{}\"}} {}\n", r.url,
                         reason_name(static_cast<Reason>(k)), r.by_reason[k]);
    }
  }
  auto scalar = [&](const char* name, const char* help, int64_t v) {
    out += fmt::format("# HELP {} {}\n# TYPE {} counter\n{} {}\n", name, help, name, name, v);
  };
  scalar("tessera_router_retries_total", "Requests tried again on another replica.", impl_->retries.load());
  scalar("tessera_router_lost_streams_total", "Streams broken off by a replica after they had begun.",
         impl_->lost.load());
  scalar("tessera_router_unavailable_total", "Requests answered 503: no replica could take them.",
         impl_->unavailable.load());
  return out;
}

}  // namespace tessera::router
