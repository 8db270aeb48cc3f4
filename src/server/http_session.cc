#include "server/http_session.h"

#include <boost/asio/write.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/field.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cctype>

namespace tessera::server {
namespace {

constexpr size_t kReadChunk = 16 << 10;
constexpr std::chrono::seconds kLingerTime{2};  // after a closing response, for the client to read it

std::string_view reason_phrase(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Payload Too Large";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 499: return "Client Closed Request";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return status < 400 ? "OK" : "Error";
  }
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The target's path without its query, %XX decoded (a malformed escape
// stays as it is).
std::string decoded_path(std::string_view target) {
  target = target.substr(0, target.find('?'));
  std::string out;
  out.reserve(target.size());
  for (size_t i = 0; i < target.size(); ++i) {
    if (target[i] == '%' && i + 2 < target.size()) {
      const int hi = hex_value(target[i + 1]), lo = hex_value(target[i + 2]);
      if (hi >= 0 && lo >= 0) {
        out += static_cast<char>(hi * 16 + lo);
        i += 2;
        continue;
      }
    }
    out += target[i];
  }
  return out;
}

bool equals_ignore_case(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  }
  return true;
}

std::string_view view(beast::string_view s) { return {s.data(), s.size()}; }

std::string chunk(std::string_view data) { return fmt::format("{:x}\r\n{}\r\n", data.size(), data); }

}  // namespace

Session::Session(tcp::socket socket, HttpServer::Impl& server)
    : socket_(std::move(socket)), server_(server), read_timer_(server.ioc), write_timer_(server.ioc) {}

Session::~Session() {
  if (counted_) --server_.active;
  if (!closed_) {  // only when the loop was stopped with this session open
    server_.sessions.erase(this);
    --server_.connections;
  }
}

void Session::count_as_active() {
  if (!counted_) ++server_.active;
  counted_ = true;
}

void Session::shutdown() {
  if (phase_ == Phase::kHandling) {
    close_after_ = true;
  } else {
    close();
  }
}

void Session::start() {
  server_.sessions.insert(this);
  ++server_.connections;
  beast::error_code ec;
  socket_.set_option(tcp::no_delay(true), ec);  // SSE events are small and latency-bound
  socket_.non_blocking(true, ec);               // read() reads what readiness promised, never more
  if (server_.opt.socket_send_buffer > 0) socket_.set_option(asio::socket_base::send_buffer_size(server_.opt.socket_send_buffer), ec);
  next_request();
}

void Session::next_request() {
  phase_ = Phase::kIdle;
  parser_.emplace();
  parser_->header_limit(static_cast<uint32_t>(server_.opt.max_header_bytes));
  parser_->body_limit(server_.opt.max_body_bytes);
  header_seen_ = gone_ = close_after_ = ending_ = false;
  log_ = RequestLog{};
  status_ = 0;
  on_gone_ = nullptr;
  if (in_.size() == 0) in_.shrink_to_fit();  // an idle connection keeps no buffer
  if (peer_eof_ || server_.stopping) {
    close();
    return;
  }
  if (in_.size() > 0) {  // pipelined
    phase_ = Phase::kHeader;
    request_start_ = log_.start = std::chrono::steady_clock::now();
    set_read_deadline(server_.opt.header_timeout);
    parse();
  } else {
    set_read_deadline(server_.opt.idle_timeout);
  }
  read();
}

// Waits for readability, then reads what is there without blocking: an idle
// connection holds no read buffer.
void Session::read() {
  if (reading_ || closed_ || peer_eof_) return;
  // Pipelined bytes beyond a header's worth wait for the current exchange.
  if (phase_ == Phase::kHandling && in_.size() >= server_.opt.max_header_bytes) return;
  reading_ = true;
  socket_.async_wait(tcp::socket::wait_read,
                     [self = shared_from_this()](const beast::error_code& ec) { self->on_read(ec, 0); });
}

void Session::on_read(const beast::error_code& wait_ec, size_t) {
  reading_ = false;
  if (closed_) return;
  beast::error_code ec = wait_ec;
  size_t n = 0;
  if (!ec) {
    // Room for what is there (a half-sent header holds only its bytes).
    const size_t ready = socket_.available(ec);
    n = socket_.read_some(in_.prepare(std::clamp<size_t>(ready, 512, kReadChunk)), ec);
  }
  if (ec == asio::error::would_block || ec == asio::error::try_again) {
    read();
    return;
  }
  if (ec) {
    const bool eof = ec == asio::error::eof;
    if (phase_ == Phase::kHandling) {
      if (eof) peer_eof_ = true;  // the response may still be written
      client_gone("client disconnected", !eof);
    } else {
      close();
    }
    return;
  }
  in_.commit(n);
  switch (phase_) {
    case Phase::kIdle:
      phase_ = Phase::kHeader;
      request_start_ = log_.start = std::chrono::steady_clock::now();
      set_read_deadline(server_.opt.header_timeout);
      parse();
      break;
    case Phase::kHeader:
    case Phase::kBody:
      parse();
      break;
    case Phase::kHandling:
      break;  // kept for the next request
    case Phase::kLinger:
      in_.consume(in_.size());
      break;
  }
  read();
}

void Session::set_read_deadline(std::chrono::milliseconds d) {
  const uint64_t epoch = ++read_epoch_;
  read_timer_.expires_after(d);
  read_timer_.async_wait([self = shared_from_this(), epoch](const beast::error_code& ec) {
    if (ec || self->closed_ || epoch != self->read_epoch_) return;
    if (self->phase_ == Phase::kHeader || self->phase_ == Phase::kBody) {
      self->phase_ = Phase::kHandling;
      Reply r = error_reply(ApiError(408, "the request was not received in time"));
      r.close = true;
      self->reply(r);
    } else if (self->phase_ != Phase::kHandling) {
      self->close();  // idle keep-alive, or lingering
    }
  });
}

void Session::parse() {
  for (;;) {
    if (closed_ || (phase_ != Phase::kHeader && phase_ != Phase::kBody)) return;
    if (!header_seen_ && parser_->is_header_done()) {
      on_header();
      continue;
    }
    if (parser_->is_done()) {
      on_request();
      return;
    }
    if (in_.size() == 0) return;
    beast::error_code ec;
    const size_t used = parser_->put(in_.data(), ec);
    in_.consume(used);
    if (ec == http::error::need_more) return;
    if (ec) {
      refuse(ec);
      return;
    }
    if (used == 0) return;
  }
}

void Session::on_header() {
  header_seen_ = true;
  const auto& req = parser_->get();
  log_.method = std::string(view(req.method_string()));
  log_.path = decoded_path(view(req.target()));
  if (std::optional<Reply> r = server_.check_auth(log_.path, std::string(view(req[http::field::authorization])))) {
    // Answered before the body is read: the connection cannot be reused.
    phase_ = Phase::kHandling;
    ++read_epoch_;
    read_timer_.cancel();
    r->close = true;
    reply(*r);
    return;
  }
  if (!parser_->is_done() && equals_ignore_case(view(req[http::field::expect]), "100-continue")) {
    send("HTTP/1.1 100 Continue\r\n\r\n");
  }
  phase_ = Phase::kBody;
  const auto spent = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - request_start_);
  set_read_deadline(std::max(std::chrono::milliseconds(1), server_.opt.request_timeout - spent));
}

void Session::on_request() {
  phase_ = Phase::kHandling;
  ++read_epoch_;
  read_timer_.cancel();
  auto& req = parser_->get();
  HttpRequest r;
  r.method = log_.method;
  r.path = log_.path;
  {
    const std::string_view target = view(req.target());
    const size_t q = target.find('?');
    if (q != std::string_view::npos) r.query = std::string(target.substr(q + 1));
  }
  r.body = std::move(req.body());
  r.authorization = std::string(view(req[http::field::authorization]));
  r.if_none_match = std::string(view(req[http::field::if_none_match]));
  close_after_ = close_after_ || !req.keep_alive();
  server_.handle(shared_from_this(), std::move(r));
}

void Session::refuse(const beast::error_code& ec) {
  if (!header_seen_) {  // what of the request line was read, for the log
    const auto& req = parser_->get();
    if (!req.method_string().empty()) log_.method = std::string(view(req.method_string()));
    if (!req.target().empty()) log_.path = decoded_path(view(req.target()));
  }
  phase_ = Phase::kHandling;
  ++read_epoch_;
  read_timer_.cancel();
  Reply r;
  if (ec == http::error::header_limit) {
    r = error_reply(ApiError(431, fmt::format("request header fields are too large (the limit is {} bytes)",
                                              server_.opt.max_header_bytes)));
  } else if (ec == http::error::body_limit) {
    r = error_reply(ApiError(413, fmt::format("the request body is too large (the limit is {} bytes)",
                                              server_.opt.max_body_bytes)));
  } else {
    r = error_reply(ApiError(400, fmt::format("the request is malformed ({})", ec.message())));
  }
  r.close = true;  // what follows on the connection cannot be trusted
  reply(r);
}

void Session::reply(const Reply& r) {
  status_ = r.status;
  ending_ = true;
  if (closed_) {
    end_exchange();
    return;
  }
  close_after_ = close_after_ || r.close || server_.stopping || peer_eof_;
  std::string head = fmt::format("HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n", r.status,
                                 reason_phrase(r.status), r.content_type, r.body.size());
  for (const auto& [name, value] : r.headers) head += fmt::format("{}: {}\r\n", name, value);
  if (close_after_) head += "Connection: close\r\n";
  head += "\r\n";
  head += r.body;
  send(std::move(head));
}

void Session::stream_open() {
  status_ = 200;
  if (closed_) return;
  std::string head =
      "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nX-Accel-Buffering: no\r\n"
      "Transfer-Encoding: chunked\r\n";
  if (close_after_ || server_.stopping) head += "Connection: close\r\n";
  head += "\r\n";
  send(std::move(head));
}

bool Session::stream_send(std::string_view data) {
  if (closed_) return false;
  if (data.empty()) return true;
  out_ += chunk(data);
  if (buffered() > server_.opt.max_stream_buffer_bytes) {
    client_gone("client too slow", true);
    return false;
  }
  flush();
  return true;
}

void Session::stream_close(std::string_view data) {
  ending_ = true;
  if (closed_) {
    end_exchange();
    return;
  }
  close_after_ = close_after_ || server_.stopping || peer_eof_;
  if (!data.empty()) out_ += chunk(data);
  out_ += "0\r\n\r\n";
  flush();
}

void Session::send(std::string bytes) {
  out_ += bytes;
  flush();
}

void Session::flush() {
  if (write_pending_ || closed_ || out_.empty()) return;
  writing_.swap(out_);
  out_.clear();
  write_pending_ = true;
  const uint64_t epoch = ++write_epoch_;
  write_timer_.expires_after(server_.opt.write_timeout);
  write_timer_.async_wait([self = shared_from_this(), epoch](const beast::error_code& ec) {
    if (ec || self->closed_ || epoch != self->write_epoch_ || !self->write_pending_) return;
    self->client_gone("client too slow (write timed out)", true);
  });
  asio::async_write(socket_, asio::buffer(writing_),
                    [self = shared_from_this()](const beast::error_code& ec, size_t) { self->on_written(ec); });
}

void Session::on_written(const beast::error_code& ec) {
  write_pending_ = false;
  ++write_epoch_;
  write_timer_.cancel();
  writing_.clear();
  if (ec) {
    client_gone("client disconnected", true);
  } else if (!out_.empty()) {
    flush();
    return;
  }
  if (ending_ && phase_ == Phase::kHandling) end_exchange();
}

void Session::end_exchange() {
  if (phase_ != Phase::kHandling) return;
  server_.log_exchange(log_, status_);
  on_gone_ = nullptr;
  if (counted_) --server_.active;
  counted_ = false;
  if (writing_.capacity() > (64u << 10)) std::string().swap(writing_);
  if (out_.capacity() > (64u << 10)) std::string().swap(out_);
  if (closed_) {
    phase_ = Phase::kIdle;
    return;
  }
  if (close_after_) {
    linger();
    return;
  }
  next_request();
}

// Shuts our side and discards what the client still sends (an unread body)
// until it closes too: closing at once with unread input would send a
// reset, which can destroy the response before the client reads it.
void Session::linger() {
  phase_ = Phase::kLinger;
  in_.consume(in_.size());
  beast::error_code ec;
  socket_.shutdown(tcp::socket::shutdown_send, ec);
  if (peer_eof_) {
    close();
    return;
  }
  set_read_deadline(kLingerTime);
  read();
}

void Session::client_gone(const char* note, bool hard) {
  if (phase_ == Phase::kHandling && !ending_ && !gone_) {
    gone_ = true;
    log_.note = note;
    std::function<void()> fn = std::move(on_gone_);
    on_gone_ = nullptr;
    if (fn) fn();
  }
  if (hard) close();
}

void Session::close() {
  if (closed_) return;
  closed_ = true;
  ++read_epoch_;
  ++write_epoch_;
  read_timer_.cancel();
  write_timer_.cancel();
  beast::error_code ec;
  socket_.shutdown(tcp::socket::shutdown_both, ec);
  socket_.close(ec);
  server_.sessions.erase(this);
  --server_.connections;
  client_gone("client disconnected", false);
  if (phase_ != Phase::kHandling) phase_ = Phase::kIdle;
}

}  // namespace tessera::server
