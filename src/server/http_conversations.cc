// /v1/conversations: the chat page's conversations, kept in SQLite
// (server/conversation_store.h). Behind --api-key like the rest of /v1/,
// and each key sees only its own. SQLite blocks: every call runs on the
// worker pool, never on the event loop.
//
//   GET    /v1/conversations[?q=TEXT]       list (newest first), optionally searched
//   POST   /v1/conversations                create {title?, messages?, settings?}
//   GET    /v1/conversations/export         every conversation, as JSON
//   POST   /v1/conversations/import         {conversations: [...]}
//   GET    /v1/conversations/ID             one, with its messages
//   PATCH  /v1/conversations/ID             rename / settings {title?, settings?}
//   PUT    /v1/conversations/ID             replace the messages {messages, version} (409: changed since)
//   POST   /v1/conversations/ID/messages    append {message} or {messages}
//   DELETE /v1/conversations/ID
#include <boost/asio/post.hpp>

#include "core/api_error.h"
#include "core/log.h"
#include "server/http_internal.h"
#include "server/http_session.h"
#include "server/openai_request.h"
#include "server/openai_response.h"

namespace tessera::server {
namespace {

using json = nlohmann::json;

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The value of `key` in a query string (form-encoded: '+' is a space), or "".
std::string query_param(const std::string& query, const std::string& key) {
  size_t at = 0;
  while (at <= query.size()) {
    const size_t end = std::min(query.find('&', at), query.size());
    const std::string_view pair = std::string_view(query).substr(at, end - at);
    const size_t eq = pair.find('=');
    if (pair.substr(0, eq) == key && eq != std::string_view::npos) {
      std::string out;
      for (size_t i = eq + 1; i < pair.size(); ++i) {
        if (pair[i] == '+') {
          out += ' ';
        } else if (pair[i] == '%' && i + 2 < pair.size() && hex_digit(pair[i + 1]) >= 0 && hex_digit(pair[i + 2]) >= 0) {
          out += static_cast<char>(hex_digit(pair[i + 1]) * 16 + hex_digit(pair[i + 2]));
          i += 2;
        } else {
          out += pair[i];
        }
      }
      return out;
    }
    at = end + 1;
  }
  return "";
}

json route(HttpServer::Impl& srv, const HttpRequest& req) {
  if (!srv.conversations) {
    throw ApiError(503,
                   srv.conversations_error.empty()
                       ? "conversation storage is off (start the server with --conversations-db FILE)"
                       : srv.conversations_error,
                   "", "storage_unavailable");
  }
  ConversationStore& store = *srv.conversations;
  // Without --api-key everyone is one user.
  const std::string owner = conversation_owner(srv.opt.api_key.empty() ? "" : api_key_of(req.authorization));
  const std::string rest = req.path.substr(std::string_view("/v1/conversations").size());
  const std::string& m = req.method;
  auto body = [&] { return parse_body(req.body, srv.opt.max_json_depth); };
  auto wrong = [&]() -> json { throw ApiError(405, fmt::format("{} is not allowed on {}", m, req.path)); };
  if (rest.empty() || rest == "/") {
    if (m == "GET") return {{"object", "list"}, {"data", store.list(owner, query_param(req.query, "q"))}};
    if (m == "POST") return store.create(owner, body());
    return wrong();
  }
  if (rest == "/export") return m == "GET" ? store.export_all(owner) : wrong();
  if (rest == "/import") return m == "POST" ? json{{"imported", store.import_all(owner, body())}} : wrong();
  std::string id = rest.substr(1);
  if (id.ends_with("/messages")) {
    id.resize(id.size() - 9);
    return m == "POST" ? store.append(owner, id, body()) : wrong();
  }
  if (id.find('/') != std::string::npos) throw ApiError(404, fmt::format("no route for {} {}", m, req.path), "", "not_found");
  if (m == "GET") return store.get(owner, id);
  if (m == "PATCH") return store.update(owner, id, body());
  if (m == "PUT") return store.replace(owner, id, body());
  if (m == "DELETE") {
    store.remove(owner, id);
    return {{"id", id}, {"deleted", true}};
  }
  return wrong();
}

}  // namespace

void handle_conversations(HttpServer::Impl& srv, const std::shared_ptr<Session>& s, HttpRequest req) {
  asio::post(srv.workers, [&srv, s, req = std::move(req)] {
    Reply r;
    try {
      r.body = dump_json(route(srv, req));
    } catch (const ApiError& e) {
      r = error_reply(e);
    } catch (const std::exception& e) {
      TESSERA_LOG_ERROR("conversations: {}", e.what());
      r = error_reply(ApiError(500, "internal server error"));
    }
    asio::post(srv.ioc, [s, r = std::move(r)] { s->reply(r); });
  });
}

}  // namespace tessera::server
