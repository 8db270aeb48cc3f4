// One client connection, served by the server itself rather than by
// httplib's internal loop, for two things httplib 0.11 does not offer: a
// handler can ask whether its client is still there (peer_gone), and idle
// keep-alive connections end as soon as the server stops.
//
// The loop (HttpServer::Impl) reads requests from a SocketStream and hands
// each to httplib's request processing; the handler runs on the same
// thread, so the connection's descriptor is published thread-locally.
#pragma once

#include <httplib.h>

#include <chrono>
#include <functional>
#include <string>

namespace tessera::server {

class SocketStream final : public httplib::Stream {
 public:
  SocketStream(int fd, std::chrono::milliseconds read_timeout, std::chrono::milliseconds write_timeout);

  bool is_readable() const override;  // buffered bytes, or readable within the read timeout
  bool is_writable() const override;
  ssize_t read(char* ptr, size_t size) override;
  ssize_t write(const char* ptr, size_t size) override;
  void get_remote_ip_and_port(std::string& ip, int& port) const override;
  void get_local_ip_and_port(std::string& ip, int& port) const override;
  int socket() const override { return fd_; }

  // Waits for the next request's first byte: false on timeout, EOF or error,
  // or when `stop` says so (checked every few milliseconds).
  bool wait_request(std::chrono::milliseconds timeout, const std::function<bool()>& stop);

 private:
  int fd_;
  std::chrono::milliseconds read_timeout_, write_timeout_;
  // httplib reads request lines a byte at a time: serve them from here.
  char buf_[4096];
  size_t pos_ = 0, len_ = 0;
};

// The peer has closed its side (or the connection failed). Data waiting to
// be read (a pipelined request) does not count.
bool peer_gone(int fd);

// The descriptor of the connection this thread is serving (-1 outside one).
int current_connection_fd();
void set_current_connection_fd(int fd);

// Asks the connection loop to close the connection after this response
// (httplib's Connection: close header alone does not end its loop).
void close_connection_after_response();
bool take_close_request();  // and resets it

}  // namespace tessera::server
