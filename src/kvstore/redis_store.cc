#include "kvstore/redis_store.h"

#include <hiredis/hiredis.h>

#include <sys/socket.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

namespace tessera::kvstore {
namespace {

std::string redis_key(const StoreKey& k) { return "tessera:kv:" + k.hex(); }

struct Reply {
  redisReply* r;
  explicit Reply(void* p) : r(static_cast<redisReply*>(p)) {}
  ~Reply() {
    if (r != nullptr) freeReplyObject(r);
  }
  Reply(const Reply&) = delete;
  Reply& operator=(const Reply&) = delete;
};

timeval to_timeval(double s) {
  timeval tv;
  tv.tv_sec = static_cast<time_t>(s);
  tv.tv_usec = static_cast<suseconds_t>((s - static_cast<double>(tv.tv_sec)) * 1e6);
  return tv;
}

}  // namespace

bool parse_redis_uri(const std::string& uri, std::string& host, int& port) {
  const std::string prefix = "redis://";
  if (uri.rfind(prefix, 0) != 0) return false;
  std::string rest = uri.substr(prefix.size());
  if (!rest.empty() && rest.back() == '/') rest.pop_back();
  const size_t colon = rest.rfind(':');
  host = colon == std::string::npos ? rest : rest.substr(0, colon);
  port = 6379;
  if (colon != std::string::npos) {
    try {
      size_t used = 0;
      port = std::stoi(rest.substr(colon + 1), &used);
      if (used != rest.size() - colon - 1) return false;
    } catch (const std::exception&) {
      return false;
    }
  }
  return !host.empty() && port > 0 && port < 65536;
}

RedisStore::RedisStore(std::string host, int port, double timeout_s, double retry_s)
    : host_(std::move(host)), port_(port), timeout_s_(timeout_s), retry_s_(retry_s) {}

RedisStore::~RedisStore() {
  if (ctx_ != nullptr) redisFree(ctx_);
}

std::string RedisStore::where() const { return fmt::format("redis://{}:{}", host_, port_); }

redisContext* RedisStore::connection() {
  if (ctx_ != nullptr) return ctx_;
  const auto now = std::chrono::steady_clock::now();
  if (now < next_try_) {
    if (error_.empty()) error_ = where() + ": not connected";
    return nullptr;
  }
  next_try_ = now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(retry_s_));
  redisContext* c = redisConnectWithTimeout(host_.c_str(), port_, to_timeval(timeout_s_));
  if (c == nullptr || c->err != 0) {
    error_ = fmt::format("{}: {}", where(), c != nullptr ? c->errstr : "cannot allocate a context");
    if (c != nullptr) redisFree(c);
    return nullptr;
  }
  redisSetTimeout(c, to_timeval(timeout_s_));
  // Keep the reader's buffer between replies (hiredis frees one past 16 KiB
  // when idle): blocks are hundreds of KiB, and fresh pages cost more than
  // the copy.
  c->reader->maxbuf = 0;
  ctx_ = c;
  return ctx_;
}

void RedisStore::disconnect(const char* what) {
  error_ = fmt::format("{}: {} failed: {}", where(), what, ctx_ != nullptr && ctx_->err ? ctx_->errstr : "bad reply");
  if (ctx_ != nullptr) redisFree(ctx_);
  ctx_ = nullptr;
}

bool RedisStore::get(const StoreKey& key, std::vector<uint8_t>& out) {
  error_.clear();
  checksummed_ = false;
  redisContext* c = connection();
  if (c == nullptr) return false;
  // hiredis sends the command; the reply, a bulk string of hundreds of KiB,
  // is read here straight into `out` (hiredis's reader would take it 16 KiB
  // at a time and copy it twice).
  const std::string k = redis_key(key);
  int done = 0;
  if (redisAppendCommand(c, "GET %b", k.data(), k.size()) != REDIS_OK) {
    disconnect("GET");
    return false;
  }
  while (!done) {
    if (redisBufferWrite(c, &done) != REDIS_OK) {
      disconnect("GET");
      return false;
    }
  }
  char head[64];
  size_t have = 0, eol = 0;
  for (;;) {
    const char* crlf = have >= 2 ? static_cast<const char*>(memmem(head, have, "\r\n", 2)) : nullptr;
    if (crlf != nullptr) {
      eol = static_cast<size_t>(crlf - head);
      break;
    }
    if (have == sizeof head) return protocol_error("a reply header past 64 bytes");
    const ssize_t n = ::recv(c->fd, head + have, sizeof head - have, 0);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      disconnect("GET");
      return false;
    }
    have += static_cast<size_t>(n);
  }
  if (head[0] == '-') {
    error_ = fmt::format("{}: GET: {}", where(), std::string(head + 1, eol - 1));
    return false;  // the error line was read whole: the connection stays usable
  }
  if (head[0] != '$') return protocol_error("GET answered another type");
  const long long len = std::strtoll(head + 1, nullptr, 10);
  if (len < 0) return false;  // nil: absent
  // The bytes after the header line: payload, then "\r\n".
  const size_t body = static_cast<size_t>(len) + 2;
  const size_t extra = have - (eol + 2);
  if (extra > body) return protocol_error("more than one reply");
  out.resize(body);
  std::memcpy(out.data(), head + eol + 2, extra);
  const size_t size = static_cast<size_t>(len);
  ChecksumStream sum;
  sum.feed(out.data(), std::min(extra, size));
  for (size_t got = extra; got < body;) {
    const ssize_t n = ::recv(c->fd, out.data() + got, body - got, 0);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      disconnect("GET");
      return false;
    }
    if (got < size) sum.feed(out.data() + got, std::min(static_cast<size_t>(n), size - got));
    got += static_cast<size_t>(n);
  }
  out.resize(size);
  // A mismatch is left to the caller's check, which says what is wrong.
  checksummed_ = sum.matches();
  return true;
}

bool RedisStore::protocol_error(const char* what) {
  error_ = fmt::format("{}: {}", where(), what);
  if (ctx_ != nullptr) redisFree(ctx_);
  ctx_ = nullptr;
  return false;
}

bool RedisStore::put(const StoreKey& key, std::span<const uint8_t> record) {
  error_.clear();
  redisContext* c = connection();
  if (c == nullptr) return false;
  const std::string k = redis_key(key);
  Reply reply(redisCommand(c, "SET %b %b", k.data(), k.size(), record.data(), record.size()));
  if (reply.r == nullptr) {
    disconnect("SET");
    return false;
  }
  if (reply.r->type == REDIS_REPLY_ERROR) {
    error_ = fmt::format("{}: SET: {}", where(), std::string(reply.r->str, reply.r->len));
    return false;
  }
  return true;
}

bool RedisStore::contains(const StoreKey& key) {
  error_.clear();
  redisContext* c = connection();
  if (c == nullptr) return false;
  const std::string k = redis_key(key);
  Reply reply(redisCommand(c, "EXISTS %b", k.data(), k.size()));
  if (reply.r == nullptr) {
    disconnect("EXISTS");
    return false;
  }
  return reply.r->type == REDIS_REPLY_INTEGER && reply.r->integer > 0;
}

void RedisStore::drop(const StoreKey& key) {
  redisContext* c = connection();
  if (c == nullptr) return;
  const std::string k = redis_key(key);
  Reply reply(redisCommand(c, "DEL %b", k.data(), k.size()));
  if (reply.r == nullptr) disconnect("DEL");
}

}  // namespace tessera::kvstore
