#include "server/http_connection.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace tessera::server {
namespace {

thread_local int tl_connection_fd = -1;
thread_local bool tl_close_after = false;

// poll() with EINTR retried; returns revents, 0 on timeout, -1 on error.
int poll_for(int fd, short events, std::chrono::milliseconds timeout) {
  pollfd p{fd, events, 0};
  for (;;) {
    const int r = ::poll(&p, 1, static_cast<int>(timeout.count()));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    return r == 0 ? 0 : p.revents;
  }
}

void address_of(const sockaddr_storage& a, std::string& ip, int& port) {
  char text[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET) {
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(a);
    ::inet_ntop(AF_INET, &v4.sin_addr, text, sizeof text);
    port = ntohs(v4.sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto& v6 = reinterpret_cast<const sockaddr_in6&>(a);
    ::inet_ntop(AF_INET6, &v6.sin6_addr, text, sizeof text);
    port = ntohs(v6.sin6_port);
  }
  ip = text;
}

}  // namespace

int current_connection_fd() { return tl_connection_fd; }
void set_current_connection_fd(int fd) { tl_connection_fd = fd; }
void close_connection_after_response() { tl_close_after = true; }
bool take_close_request() { return std::exchange(tl_close_after, false); }

bool peer_gone(int fd) {
  if (fd < 0) return false;
  const int ev = poll_for(fd, POLLIN | POLLRDHUP, std::chrono::milliseconds(0));
  if (ev < 0) return true;
  return (ev & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

SocketStream::SocketStream(int fd, std::chrono::milliseconds read_timeout, std::chrono::milliseconds write_timeout)
    : fd_(fd), read_timeout_(read_timeout), write_timeout_(write_timeout) {}

bool SocketStream::is_readable() const {
  if (pos_ < len_) return true;
  const int ev = poll_for(fd_, POLLIN, read_timeout_);
  return ev > 0 && (ev & POLLIN) != 0;
}

bool SocketStream::is_writable() const {
  const int ev = poll_for(fd_, POLLOUT, write_timeout_);
  return ev > 0 && (ev & POLLOUT) != 0 && (ev & (POLLERR | POLLHUP)) == 0;
}

ssize_t SocketStream::read(char* ptr, size_t size) {
  if (pos_ == len_) {
    if (!is_readable()) return -1;
    ssize_t n;
    do {
      n = ::recv(fd_, buf_, sizeof buf_, 0);
    } while (n < 0 && errno == EINTR);
    if (n <= 0) return n;
    pos_ = 0;
    len_ = static_cast<size_t>(n);
  }
  const size_t n = std::min(size, len_ - pos_);
  std::memcpy(ptr, buf_ + pos_, n);
  pos_ += n;
  return static_cast<ssize_t>(n);
}

ssize_t SocketStream::write(const char* ptr, size_t size) {
  size_t done = 0;
  while (done < size) {
    if (!is_writable()) return done > 0 ? static_cast<ssize_t>(done) : -1;
    // MSG_NOSIGNAL: a vanished client is a failed write, not SIGPIPE.
    const ssize_t n = ::send(fd_, ptr + done, size - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return done > 0 ? static_cast<ssize_t>(done) : -1;
    done += static_cast<size_t>(n);
  }
  return static_cast<ssize_t>(done);
}

void SocketStream::get_remote_ip_and_port(std::string& ip, int& port) const {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  if (::getpeername(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0) address_of(a, ip, port);
}

void SocketStream::get_local_ip_and_port(std::string& ip, int& port) const {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0) address_of(a, ip, port);
}

bool SocketStream::wait_request(std::chrono::milliseconds timeout, const std::function<bool()>& stop) {
  if (pos_ < len_) return true;
  constexpr std::chrono::milliseconds kSlice(20);
  for (auto left = timeout; left.count() > 0; left -= kSlice) {
    if (stop()) return false;
    const int ev = poll_for(fd_, POLLIN, std::min(left, kSlice));
    if (ev < 0) return false;
    if (ev > 0) return (ev & POLLIN) != 0;  // EOF shows as readable: the read then ends the loop
  }
  return false;
}

}  // namespace tessera::server
