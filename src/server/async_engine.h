// The engine behind the HTTP handlers: one loop thread runs Engine::step()
// while there is work and sleeps on a condition variable when idle; each
// HTTP request submits its prompts and reads their outputs from its own
// RequestChannel, which the engine's callbacks fill (on the engine thread,
// so they only push and notify).
//
// Admission control: at most `max_in_flight` engine sequences (prompts x n)
// are admitted at once; beyond that submit() throws
// Error(kResourceExhausted), which the server answers with 429.
//
// Accounting has one owner, the group (one prompt's n samples): a group
// holds n of the in-flight count from submission until the engine reports
// its group_finished output, whichever way it ends (finished, rejected,
// aborted before or after its samples were forked, shutdown). Counting
// samples instead drifts: a group that ends before its fork reports one
// finished sample, not n.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/engine.h"
#include "engine/prompt_cache.h"
#include "server/metrics.h"

namespace tessera::server {

// One output of one sample of one prompt of an HTTP request.
struct ChannelItem {
  int32_t prompt = 0;  // which prompt of the request (completions accept several)
  engine::RequestOutput out;
};

class RequestChannel {
 public:
  // Moves pending outputs into `out` (appending). Blocks until there is at
  // least one, every sample has finished, or `timeout` passes.
  void wait(std::vector<ChannelItem>& out, std::chrono::milliseconds timeout);
  // Every group has reported its final output (some may still be pending).
  bool finished() const;
  // Non-empty when the request failed (a fault in its own work, or the
  // engine's) and cannot complete: why.
  std::string failure() const;
  // The request was aborted because the server is shutting down.
  bool shutting_down() const;
  // Moves pending outputs into `out` (appending) without waiting.
  void take(std::vector<ChannelItem>& out);
  // `fn` is called whenever outputs arrive or the channel finishes (on the
  // engine thread, or the thread that fails or shuts the engine down), and
  // once at once if there is something to take already: an event loop's
  // wake-up (it must not block and must not call back into the channel
  // under its own locks). Replaces any earlier listener; empty: none.
  void set_listener(std::function<void()> fn);

 private:
  void notify();  // wakes waiters and calls the listener (no lock held)
  friend class AsyncEngine;
  struct SampleTiming {
    double last_elapsed = 0.0;
    bool seen_token = false;
  };
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<ChannelItem> items_;
  int64_t unfinished_ = 0;  // groups (prompts) still running
  int64_t group_size_ = 1;  // n: in-flight count each group holds
  std::string failure_;
  bool shutting_down_ = false;
  std::function<void()> listener_;
  std::vector<engine::RequestId> groups_;  // one per prompt; guarded by AsyncEngine::mu_
  std::unordered_map<engine::RequestId, SampleTiming> timing_;  // engine thread only
};

class AsyncEngine {
 public:
  AsyncEngine(engine::Engine& engine, Metrics& metrics, int64_t max_in_flight);
  ~AsyncEngine();  // shutdown() and join
  AsyncEngine(const AsyncEngine&) = delete;
  AsyncEngine& operator=(const AsyncEngine&) = delete;

  // Queues every prompt with the same parameters (params.n samples each).
  // Throws Error(kResourceExhausted) when over the in-flight limit or
  // shutting down, and the engine's Error(kInvalidArgument / kOutOfRange)
  // for an invalid request (after aborting the prompts already queued).
  // A prompt with `preloaded` K/V is a Prompt Cache layout; otherwise only
  // its tokens are used.
  // `adapters`: the LoRA adapter and soft prompt every prompt runs with.
  std::shared_ptr<RequestChannel> submit(std::vector<engine::PromptLayout> prompts, const engine::SamplingParams& params,
                                         engine::RequestAdapters adapters = {});
  // Aborts every sample of the channel; the engine frees their blocks at its
  // next step. Idempotent; harmless once finished.
  void abort(RequestChannel& ch);

  // Stops admitting, aborts every request in flight (each channel gets its
  // final outputs, flagged shutting_down), and stops the loop once the engine
  // is empty. Idempotent.
  void shutdown();
  bool accepting() const;

  int64_t in_flight() const;  // sequences admitted and not yet given back
  engine::EngineStats stats() const { return engine_.stats(); }
  const engine::Engine& engine() const { return engine_; }

 private:
  void loop();
  // Throws what submit() throws for a refusal (shutting down, at capacity).
  void check_admission(int64_t samples) const;
  void check_admission_locked(int64_t samples) const;
  void on_output(const std::shared_ptr<RequestChannel>& ch, int32_t prompt, const engine::RequestOutput& o);
  void fail_all(const std::string& message);
  void wake();

  engine::Engine& engine_;
  Metrics& metrics_;
  const int64_t max_in_flight_;

  mutable std::mutex mu_;  // guards everything below
  std::condition_variable cv_;
  bool wake_ = false;
  bool stop_ = false;
  bool accepting_ = true;
  std::string broken_;  // the engine threw: why
  int64_t in_flight_ = 0;
  // Channels with samples still running, for shutdown and failure.
  std::unordered_map<RequestChannel*, std::weak_ptr<RequestChannel>> live_;
  std::thread thread_;
};

}  // namespace tessera::server
