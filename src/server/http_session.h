// One client connection on the event loop: reads and parses requests with
// Beast's parser under size and time limits, hands each whole request to
// the server, writes its response (whole, or as an SSE stream), then waits
// for the next request (keep-alive) or closes.
//
// One read is always pending, also while a request is handled: that is how
// a client that leaves is noticed at once (EOF or reset), and it aborts its
// request. Bytes a client pipelines meanwhile are kept for the next request
// (up to the header limit; then reading pauses).
//
// Every member runs on the loop thread.
#pragma once

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include <functional>
#include <string_view>

#include "server/http_internal.h"

namespace tessera::server {

namespace beast = boost::beast;
namespace http = beast::http;

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, HttpServer::Impl& server);
  ~Session();

  void start();
  // Closes now; a request being handled sees its client gone.
  void close();
  // Closes now unless a request is being handled; then after its response.
  void shutdown();

  // -- for the handler of the current request --
  RequestLog& log() { return log_; }
  // Ends the exchange with one whole response (only logged if the client
  // has gone).
  void reply(const Reply& r);
  // An SSE response: its head, then events, then the end (which ends the
  // exchange). send() is false once the client is gone or too far behind
  // (more than max_stream_buffer_bytes unread): the session has then
  // dropped it.
  void stream_open();
  bool stream_send(std::string_view data);
  void stream_close(std::string_view data);
  // Called once, if the client goes away before the exchange ends.
  void on_gone(std::function<void()> fn) { on_gone_ = std::move(fn); }
  bool gone() const { return gone_; }
  // The exchange counts in HttpServer::active_requests() until it ends
  // (its last byte written, or its client gone).
  void count_as_active();

 private:
  enum class Phase {
    kIdle,      // waiting for a request's first byte (keep-alive timeout)
    kHeader,    // reading its request line and headers (header timeout)
    kBody,      // reading its body (request timeout)
    kHandling,  // the server handles it; the response is written
    kLinger,    // after a response that closes: its own side shut, discarding input
  };
  void read();
  void on_read(const beast::error_code& ec, size_t n);
  void parse();
  void on_header();
  void on_request();
  void refuse(const beast::error_code& ec);  // a request Beast could not parse
  void set_read_deadline(std::chrono::milliseconds d);
  void send(std::string bytes);
  void flush();
  void on_written(const beast::error_code& ec);
  void end_exchange();
  void next_request();
  void linger();
  void client_gone(const char* note, bool hard);
  size_t buffered() const { return out_.size() + writing_.size(); }

  tcp::socket socket_;
  HttpServer::Impl& server_;
  beast::flat_buffer in_;
  std::optional<http::request_parser<http::string_body>> parser_;
  Phase phase_ = Phase::kIdle;
  bool reading_ = false;     // a read is pending
  bool peer_eof_ = false;    // the client shut its side: no more requests
  bool closed_ = false;
  bool gone_ = false;        // the client went away during the exchange
  bool close_after_ = false; // the response says Connection: close
  bool ending_ = false;      // the exchange ends once the output is written
  bool header_seen_ = false;
  bool counted_ = false;     // in the server's active count
  std::string out_;       // written next
  std::string writing_;   // being written
  bool write_pending_ = false;
  asio::steady_timer read_timer_;
  asio::steady_timer write_timer_;
  uint64_t read_epoch_ = 0;  // tells a stale deadline from the current one
  uint64_t write_epoch_ = 0;
  std::chrono::steady_clock::time_point request_start_;
  RequestLog log_;
  int status_ = 0;
  std::function<void()> on_gone_;
};

}  // namespace tessera::server
