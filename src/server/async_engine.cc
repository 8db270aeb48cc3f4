#include "server/async_engine.h"

#include "core/error.h"
#include "core/log.h"

namespace tessera::server {

void RequestChannel::wait(std::vector<ChannelItem>& out, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return !items_.empty() || unfinished_ == 0; });
  for (ChannelItem& it : items_) out.push_back(std::move(it));
  items_.clear();
}

void RequestChannel::take(std::vector<ChannelItem>& out) {
  std::lock_guard<std::mutex> lock(mu_);
  for (ChannelItem& it : items_) out.push_back(std::move(it));
  items_.clear();
}

void RequestChannel::set_listener(std::function<void()> fn) {
  bool ready = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    listener_ = std::move(fn);
    ready = listener_ && (!items_.empty() || unfinished_ == 0);
  }
  if (ready) notify();
}

void RequestChannel::notify() {
  cv_.notify_all();
  std::function<void()> fn;
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn = listener_;
  }
  if (fn) fn();
}

bool RequestChannel::finished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return unfinished_ == 0;
}

std::string RequestChannel::failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

bool RequestChannel::shutting_down() const {
  std::lock_guard<std::mutex> lock(mu_);
  return shutting_down_;
}

AsyncEngine::AsyncEngine(engine::Engine& engine, Metrics& metrics, int64_t max_in_flight)
    : engine_(engine), metrics_(metrics), max_in_flight_(max_in_flight) {
  thread_ = std::thread([this] { loop(); });
}

AsyncEngine::~AsyncEngine() {
  shutdown();
  if (thread_.joinable()) thread_.join();
}

bool AsyncEngine::accepting() const {
  std::lock_guard<std::mutex> lock(mu_);
  return accepting_ && broken_.empty();
}

int64_t AsyncEngine::in_flight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_flight_;
}

void AsyncEngine::wake() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    wake_ = true;
  }
  cv_.notify_one();
}

std::shared_ptr<RequestChannel> AsyncEngine::submit(std::vector<engine::PromptLayout> prompts,
                                                    const engine::SamplingParams& params,
                                                    engine::RequestAdapters adapters) {
  auto ch = std::make_shared<RequestChannel>();
  const int64_t samples = static_cast<int64_t>(prompts.size()) * params.n;
  ch->group_size_ = params.n;
  check_admission(samples);  // before the work below, which a refusal would waste
  // The work that grows with the prompt (validation, the decoder's state)
  // runs outside mu_: the engine thread takes mu_ to deliver every token.
  std::vector<engine::PreparedRequest> prepared;
  prepared.reserve(prompts.size());
  for (engine::PromptLayout& p : prompts) {
    prepared.push_back(p.preloaded ? engine_.prepare(std::move(p), params, adapters)
                                   : engine_.prepare(std::move(p.tokens), params, adapters));
  }
  {
    // Held across enqueue so that shutdown() sees every group id of a
    // channel it finds in live_. Outputs cannot arrive before mu_ is
    // released (on_output takes it first), so the counts below are settled
    // before any is given back.
    std::lock_guard<std::mutex> lock(mu_);
    check_admission_locked(samples);
    for (size_t i = 0; i < prepared.size(); ++i) {
      const int32_t idx = static_cast<int32_t>(i);
      auto cb = [this, ch, idx](const engine::RequestOutput& o) { on_output(ch, idx, o); };
      ch->groups_.push_back(engine_.enqueue(std::move(prepared[i]), std::move(cb)));
      ++ch->unfinished_;
      in_flight_ += params.n;
    }
    live_[ch.get()] = ch;
    wake_ = true;
  }
  cv_.notify_one();
  return ch;
}

void AsyncEngine::check_admission(int64_t samples) const {
  std::lock_guard<std::mutex> lock(mu_);
  check_admission_locked(samples);
}

void AsyncEngine::check_admission_locked(int64_t samples) const {
  TESSERA_CHECK(broken_.empty(), kInternal, "the engine failed: {}", broken_);
  TESSERA_CHECK(accepting_, kResourceExhausted, "the server is shutting down");
  TESSERA_CHECK(in_flight_ + samples <= max_in_flight_, kResourceExhausted,
                "the server is at capacity ({} requests in flight); retry later", in_flight_);
}

void AsyncEngine::abort(RequestChannel& ch) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (live_.find(&ch) == live_.end()) return;  // finished, nothing to free
    for (engine::RequestId id : ch.groups_) engine_.abort(id);
    wake_ = true;
  }
  cv_.notify_one();
}

void AsyncEngine::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return;
    accepting_ = false;
    for (auto& [raw, weak] : live_) {
      if (auto ch = weak.lock()) {
        {
          std::lock_guard<std::mutex> cl(ch->mu_);
          ch->shutting_down_ = true;
        }
        for (engine::RequestId id : ch->groups_) engine_.abort(id);
      }
    }
    stop_ = true;
    wake_ = true;
  }
  cv_.notify_one();
}

void AsyncEngine::on_output(const std::shared_ptr<RequestChannel>& ch, int32_t prompt, const engine::RequestOutput& o) {
  // Latency metrics, per sample: time to first token, then the gaps between
  // the outputs that carry tokens (one per step, usually one token).
  RequestChannel::SampleTiming& t = ch->timing_[o.id];
  if (!o.new_tokens.empty()) {
    if (!t.seen_token) {
      metrics_.observe_ttft(o.time_to_first_token);
      t.seen_token = true;
    } else {
      const double gap = (o.elapsed - t.last_elapsed) / static_cast<double>(o.new_tokens.size());
      for (size_t i = 0; i < o.new_tokens.size(); ++i) metrics_.observe_inter_token(gap);
    }
    t.last_elapsed = o.elapsed;
  }
  if (o.finished) {
    metrics_.count_finished(engine::finish_reason_name(o.finish_reason));
    if (o.finish_reason != engine::FinishReason::kAbort) metrics_.observe_e2e(o.elapsed);
    ch->timing_.erase(o.id);
  }
  // Capacity is given back before the reader is woken: a client that has
  // its whole response sees it returned.
  std::lock_guard<std::mutex> lock(mu_);
  bool all_done = false;
  {
    std::lock_guard<std::mutex> cl(ch->mu_);
    // A fault in this request's own work: the request fails, nothing else.
    if (o.finish_reason == engine::FinishReason::kError && ch->failure_.empty()) ch->failure_ = o.error;
    ch->items_.push_back({prompt, o});
    if (o.group_finished && ch->unfinished_ > 0) {
      in_flight_ -= ch->group_size_;
      all_done = --ch->unfinished_ == 0;
    }
  }
  if (all_done) live_.erase(ch.get());
  ch->notify();
}

void AsyncEngine::fail_all(const std::string& message) {
  std::lock_guard<std::mutex> lock(mu_);
  broken_ = message;
  for (auto& [raw, weak] : live_) {
    if (auto ch = weak.lock()) {
      {
        std::lock_guard<std::mutex> cl(ch->mu_);
        ch->failure_ = message;
        in_flight_ -= ch->unfinished_ * ch->group_size_;
        ch->unfinished_ = 0;
      }
      ch->notify();
    }
  }
  live_.clear();
}

void AsyncEngine::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return wake_ || stop_; });
    wake_ = false;
    if (!broken_.empty()) {
      if (stop_) break;
      continue;
    }
    lock.unlock();
    try {
      // Aborts queued while the engine is idle still need one step to be
      // drained (they are no-ops then, but keep the queue empty).
      do {
        engine_.step();
      } while (engine_.has_unfinished());
    } catch (const std::exception& e) {
      // Faults in one request's work and in the forward pass are handled in
      // the step; one that escapes it fails every request in the engine,
      // which then starts afresh and serves the next ones. Only if that
      // fails too is the engine given up (unhealthy, refusing work).
      try {
        engine_.fail_all(e.what());
      } catch (const std::exception& e2) {
        TESSERA_LOG_ERROR("the engine could not restart: {}", e2.what());
        fail_all(e.what());
      }
    }
    lock.lock();
    if (stop_ && !engine_.has_unfinished() && !wake_) break;
  }
}

}  // namespace tessera::server
