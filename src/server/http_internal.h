// Shared by the HTTP server's translation units; not part of its interface.
//
// Threads: everything here that touches a connection runs on the event
// loop's one thread (HttpServer::Impl::ioc), so sessions need no locks. The
// worker pool only parses request bodies and loads adapters, and posts its
// results back to the loop; the engine thread only posts wake-ups.
#pragma once

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "server/conversation_store.h"
#include "server/http_server.h"

namespace tessera::server {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

class Session;

// The numbers of the one log line each HTTP request gets, printed when its
// response has been written (or its client has gone).
struct RequestLog {
  std::chrono::steady_clock::time_point start;
  std::string method = "-";
  std::string path = "-";
  std::string id;  // cmpl-... / chatcmpl-...
  int64_t prompt_tokens = 0;
  int64_t output_tokens = 0;
  std::string note;  // e.g. "client disconnected"
};

// One whole response.
struct Reply {
  int status = 200;
  std::string body;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;
  bool close = false;  // close the connection after it
};

// The API key an Authorization header carries: "Bearer KEY", or HTTP
// Basic's password (how a browser sends it for the chat page); "" if none.
std::string api_key_of(const std::string& authorization);

// An OpenAI error body (and Retry-After for 429/503).
Reply error_reply(const ApiError& e);

// The request a session has read, as the handlers see it.
struct HttpRequest {
  std::string method;
  std::string path;  // percent-decoded, without the query
  std::string query; // after '?', as sent
  std::string if_none_match;  // the If-None-Match header (static files' ETags)
  std::string body;
  std::string authorization;
};

class HttpServer::Impl {
 public:
  Impl(ServerOptions options, Metrics& metrics);

  // -- loop thread only --
  // A whole request has arrived on `s`: answer it (now or later).
  void handle(const std::shared_ptr<Session>& s, HttpRequest req);
  // The reply a request gets before its body is read (401), if any.
  std::optional<Reply> check_auth(const std::string& path, const std::string& authorization) const;
  void log_exchange(const RequestLog& log, int status);
  void accept();
  void close_all();
  std::unordered_set<Session*> sessions;
  bool stopping = false;
  std::chrono::steady_clock::time_point last_accept_warning;

  // -- any thread --
  // Null (and the 503 in `err`) until the model is ready or once shutting down.
  const ServedModel* ready_model(Reply& err) const;
  std::string next_id(Endpoint endpoint);

  const ServerOptions opt;
  Metrics& metrics;
  asio::io_context ioc;
  tcp::acceptor acceptor{ioc};
  asio::steady_timer accept_retry{ioc};
  asio::thread_pool workers;
  std::thread loop;
  int port = 0;
  std::atomic<const ServedModel*> model{nullptr};
  std::atomic<bool> shutting_down{false};
  std::atomic<int64_t> active{0};       // generation requests being handled
  std::atomic<int64_t> connections{0};  // open sessions
  std::atomic<uint64_t> id_counter{0};
  uint64_t id_salt = 0;
  // The chat page's conversations (null: off, or unusable: conversations_error says why).
  std::unique_ptr<ConversationStore> conversations;
  std::string conversations_error;
  // The chat page's files by name (http_webui.cc), read at start.
  struct Asset {
    std::string body, content_type, etag;
  };
  std::unordered_map<std::string, Asset> webui;

 private:
  void handle_models(Session& s, const std::string& id);
  void handle_soft_prompts(Session& s);
  void handle_lora(const std::shared_ptr<Session>& s, const std::string& body, bool load);
  void handle_health(Session& s);
  void handle_metrics(Session& s);
};

// GET / and /webui/NAME (http_webui.cc): the chat page, from memory.
void load_webui(HttpServer::Impl& srv, const std::string& dir);
bool handle_webui(HttpServer::Impl& srv, Session& s, const HttpRequest& req);

// /v1/conversations[/...] (http_conversations.cc): on the worker pool.
void handle_conversations(HttpServer::Impl& srv, const std::shared_ptr<Session>& s, HttpRequest req);

// POST /v1/completions and /v1/chat/completions (http_generate.cc).
void start_generation(HttpServer::Impl& srv, const std::shared_ptr<Session>& s, Endpoint endpoint, std::string body);

}  // namespace tessera::server
