#include "router/upstream.h"

#include <httplib.h>

namespace tessera::router {

Upstream::Upstream(UpstreamRequest request) : req_(std::move(request)) {
  thread_ = std::thread([this] { run(); });
}

Upstream::~Upstream() {
  cancel();
  thread_.join();
}

void Upstream::run() {
  httplib::Client cli(req_.base_url);
  const auto ct = req_.connect_timeout;
  cli.set_connection_timeout(ct.count() / 1000, (ct.count() % 1000) * 1000);
  cli.set_read_timeout(req_.read_timeout.count(), 0);
  cli.set_write_timeout(10, 0);
  httplib::Request r;
  r.method = req_.method;
  r.path = req_.path;
  for (const auto& [k, v] : req_.headers) r.headers.emplace(k, v);
  r.body = req_.body;
  r.response_handler = [this](const httplib::Response& res) {
    std::lock_guard<std::mutex> lock(mu_);
    status_ = res.status;
    content_type_ = res.get_header_value("Content-Type");
    connected_ = true;
    return !cancelled_;
  };
  r.content_receiver = [this](const char* data, size_t n, uint64_t, uint64_t) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return cancelled_ || queued_ < req_.max_buffered_bytes; });
    if (cancelled_) return false;
    chunks_.emplace_back(data, n);
    queued_ += n;
    got_body_ = true;
    cv_.notify_all();
    return true;
  };
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (cancelled_) {
      done_ = true;
      cv_.notify_all();
      return;
    }
    client_ = &cli;
  }
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  const bool ok = cli.send(r, res, err);
  std::lock_guard<std::mutex> lock(mu_);
  client_ = nullptr;
  if (!ok && !cancelled_) {
    failed_ = true;
    error_ = httplib::to_string(err);
  }
  done_ = true;
  cv_.notify_all();
}

Upstream::Start Upstream::wait_start(bool whole_body) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return done_ || (got_body_ && !whole_body); });
  if (!got_body_) return failed_ ? Start::kFailed : Start::kDone;
  if (whole_body) return failed_ ? Start::kFailed : Start::kDone;
  return Start::kBody;
}

int Upstream::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return status_;
}

std::string Upstream::content_type() const {
  std::lock_guard<std::mutex> lock(mu_);
  return content_type_;
}

std::string Upstream::error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

bool Upstream::connected() const {
  std::lock_guard<std::mutex> lock(mu_);
  return connected_;
}

bool Upstream::next(std::string& chunk) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return done_ || !chunks_.empty(); });
  if (chunks_.empty()) return false;
  chunk = std::move(chunks_.front());
  chunks_.pop_front();
  queued_ -= chunk.size();
  cv_.notify_all();
  return true;
}

bool Upstream::failed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failed_;
}

std::string Upstream::take_all() {
  std::lock_guard<std::mutex> lock(mu_);
  std::string all;
  for (const std::string& c : chunks_) all += c;
  chunks_.clear();
  queued_ = 0;
  cv_.notify_all();
  return all;
}

void Upstream::cancel() {
  std::lock_guard<std::mutex> lock(mu_);
  cancelled_ = true;
  if (client_ != nullptr) client_->stop();  // a replica silent mid-response wakes the reader now
  cv_.notify_all();
}

}  // namespace tessera::router
