// The chat page (webui/ in the repository, share/tessera/webui once
// installed): read into memory when the server starts and served from
// there, so a request can name only a file that was there at start (no
// path reaches the filesystem). Every file gets its content type, an ETag
// (If-None-Match answers 304) and `Cache-Control: no-cache` (revalidate:
// a new binary's page is never stale), with nosniff and a CSP that allows
// only the page's own scripts, styles and API.
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "core/log.h"
#include "kvstore/block_record.h"
#include "server/http_internal.h"
#include "server/http_session.h"

namespace tessera::server {
namespace {

const char* content_type_of(const std::filesystem::path& p) {
  const std::string ext = p.extension().string();
  if (ext == ".html") return "text/html; charset=utf-8";
  if (ext == ".js" || ext == ".mjs") return "text/javascript; charset=utf-8";
  if (ext == ".css") return "text/css; charset=utf-8";
  if (ext == ".svg") return "image/svg+xml";
  if (ext == ".png") return "image/png";
  if (ext == ".json") return "application/json";
  if (ext == ".txt") return "text/plain; charset=utf-8";
  return nullptr;  // not served
}

}  // namespace

void load_webui(HttpServer::Impl& srv, const std::string& dir) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const char* type = content_type_of(e.path());
    if (!e.is_regular_file() || type == nullptr) continue;
    std::ifstream in(e.path(), std::ios::binary);
    std::ostringstream body;
    body << in.rdbuf();
    HttpServer::Impl::Asset a;
    a.body = body.str();
    a.content_type = type;
    const auto* p = reinterpret_cast<const uint8_t*>(a.body.data());
    a.etag = fmt::format("\"{}\"", kvstore::hash128(std::span<const uint8_t>(p, a.body.size())).hex());
    srv.webui[e.path().filename().string()] = std::move(a);
  }
  if (ec || srv.webui.count("index.html") == 0) {
    TESSERA_LOG_WARN("no chat page in {} ({}): / answers 404", dir, ec ? ec.message() : "no index.html");
    srv.webui.clear();
  }
}

bool handle_webui(HttpServer::Impl& srv, Session& s, const HttpRequest& req) {
  if (srv.webui.empty()) return false;
  const std::string name = req.path == "/" ? "index.html" : req.path.substr(7);
  auto it = srv.webui.find(name);
  if (it == srv.webui.end()) return false;
  if (req.method != "GET") {
    s.reply(error_reply(ApiError(405, fmt::format("{} is not allowed on {}", req.method, req.path))));
    return true;
  }
  const HttpServer::Impl::Asset& a = it->second;
  Reply r;
  r.content_type = a.content_type;
  r.headers = {{"Cache-Control", "no-cache"},
               {"ETag", a.etag},
               {"X-Content-Type-Options", "nosniff"},
               {"Content-Security-Policy",
                "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                "connect-src 'self'; base-uri 'none'; frame-ancestors 'none'"}};
  if (req.if_none_match == a.etag) {
    r.status = 304;
  } else {
    r.body = a.body;
  }
  s.reply(r);
  return true;
}

}  // namespace tessera::server
