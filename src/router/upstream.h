// One request forwarded to one replica, read on its own thread: the router's
// handler waits until the response has a first byte of body (or ended, or
// failed before that), then decides: pass it on, or try another replica.
// The body arrives in chunks through a bounded queue (a client that reads
// slowly holds the replica's connection back, not the router's memory).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace httplib {
class Client;
}

namespace tessera::router {

struct UpstreamRequest {
  std::string base_url;  // http://HOST:PORT
  std::string method = "POST";
  std::string path;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  std::chrono::milliseconds connect_timeout{2000};
  std::chrono::seconds read_timeout{600};
  size_t max_buffered_bytes = 1u << 20;
};

class Upstream {
 public:
  explicit Upstream(UpstreamRequest request);
  ~Upstream();  // cancels and joins
  Upstream(const Upstream&) = delete;
  Upstream& operator=(const Upstream&) = delete;

  enum class Start { kBody, kDone, kFailed };
  // Blocks until a first byte of body arrived (kBody), the response ended
  // with none or all of it (kDone: whole_body = true waits for the end
  // before answering kBody), or it failed before a byte (kFailed).
  Start wait_start(bool whole_body);
  int status() const;
  std::string content_type() const;
  std::string error() const;  // why it failed
  bool connected() const;     // a response began (false: the replica could not be reached)

  // The next chunk of body: false at the end (then failed() says whether
  // the replica broke off).
  bool next(std::string& chunk);
  bool failed() const;
  std::string take_all();  // after kDone: every queued chunk
  void cancel();           // stop reading (the client went away)

 private:
  void run();

  UpstreamRequest req_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int status_ = 0;
  std::string content_type_;
  std::deque<std::string> chunks_;
  size_t queued_ = 0;
  bool got_body_ = false, done_ = false, failed_ = false, cancelled_ = false, connected_ = false;
  std::string error_;
  httplib::Client* client_ = nullptr;  // while a request is in flight: cancel() shuts its socket
  std::thread thread_;
};

}  // namespace tessera::router
