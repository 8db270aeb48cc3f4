#include "core/thread_pool.h"

#include <immintrin.h>

#include <algorithm>

#include "core/log.h"

namespace tessera {
namespace {

// A worker's job slot.
enum : uint32_t { kIdle = 0, kPosted = 1, kRunning = 2, kStop = 3 };

// Waiting has three stages. Pause-spinning (1024 pauses: about 20 us on
// Zen, 50 us on recent Intel) covers the gap between two kernels of one
// forward pass at the cost of a cache-line poll. Then yielding: on an
// oversubscribed core (more runnable threads than cores: a shared machine,
// or a pool larger than the cores) a pure spinner would hold the core the
// thread with the work needs for a whole time slice (milliseconds per
// hand-off, measured); sched_yield hands it over and returns at once when
// nothing else is runnable. Last, a futex sleep (C++20 atomic wait), so an
// idle pool, and the workers an adaptive pool has left out, cost nothing.
constexpr int kPauseSpins = 1 << 10;
constexpr int kYieldSpins = 1 << 8;

template <class T>
void spin_wait_while_equal(const std::atomic<T>& a, T old) {
  for (int i = 0; i < kPauseSpins; ++i) {
    if (a.load(std::memory_order_acquire) != old) return;
    _mm_pause();
  }
  for (int i = 0; i < kYieldSpins; ++i) {
    if (a.load(std::memory_order_acquire) != old) return;
    std::this_thread::yield();
  }
  while (a.load(std::memory_order_acquire) == old) a.wait(old, std::memory_order_acquire);
}

int resolve_threads(int n) {
  if (n > 0) return n;
  n = static_cast<int>(std::thread::hardware_concurrency());
  return n > 0 ? n : 1;
}

}  // namespace

ThreadPool::ThreadPool(int n_threads) : ThreadPool(n_threads, n_threads <= 0 ? Mode::kAdaptive : Mode::kFixed) {}

ThreadPool::ThreadPool(int n_threads, Mode mode)
    : n_threads_(resolve_threads(n_threads)),
      mode_(mode),
      width_(n_threads_),
      slots_(std::make_unique<Slot[]>(static_cast<size_t>(n_threads_))) {
  threads_.reserve(static_cast<size_t>(n_threads_ - 1));
  for (int t = 1; t < n_threads_; ++t) threads_.emplace_back([this, t] { worker_loop(t); });
}

ThreadPool::~ThreadPool() {
  if (stats_.dispatches > 0) {
    TESSERA_LOG_DEBUG("thread pool of {} ({}): {} dispatches, {} late, {} cancelled; narrowed {}, widened {}, "
                      "{} probes, width {} at the end",
                      n_threads_, mode_ == Mode::kAdaptive ? "adaptive" : "fixed", stats_.dispatches, stats_.late,
                      stats_.cancelled, stats_.narrowed, stats_.widened, stats_.probes, width_);
  }
  for (int t = 1; t < n_threads_; ++t) {
    slots_[t].state.store(kStop, std::memory_order_release);
    slots_[t].state.notify_one();
  }
  for (auto& t : threads_) t.join();
}

void ThreadPool::dispatch(Thunk fn, void* ctx, bool dynamic) {
  int nth = width_;
  bool probing = false;
  if (mode_ == Mode::kAdaptive && dynamic && width_ < n_threads_ && (probe_left_ > 0 || --calls_to_probe_ <= 0)) {
    if (probe_left_ == 0) {
      probe_left_ = kProbeLength;
      probe_late_ = 0;
      ++stats_.probes;
    }
    probing = true;
    nth = width_ + 1;
  }
  job_width_ = nth;  // barrier() reads it, also on the caller alone
  if (nth == 1) {
    fn(ctx, 0, 1);
    return;
  }
  fn_ = fn;
  ctx_ = ctx;
  for (int t = 1; t < nth; ++t) {
    slots_[t].state.store(kPosted, std::memory_order_release);
    slots_[t].state.notify_one();
  }
  fn(ctx, 0, nth);
  // The caller's share is done. A worker still at kPosted has not started:
  // late. In a dynamic job there is nothing left for it, so it is cancelled
  // (unless it takes the job this instant, then it is waited for).
  bool late = false;
  for (int t = 1; t < nth; ++t) {
    std::atomic<uint32_t>& s = slots_[t].state;
    uint32_t v = s.load(std::memory_order_acquire);
    if (v == kPosted) {
      late = true;
      if (dynamic && s.compare_exchange_strong(v, kIdle, std::memory_order_acq_rel)) {
        ++stats_.cancelled;
        continue;
      }
    }
    for (v = s.load(std::memory_order_acquire); v != kIdle; v = s.load(std::memory_order_acquire)) {
      spin_wait_while_equal(s, v);
    }
  }
  ++stats_.dispatches;
  if (late) ++stats_.late;
  if (mode_ == Mode::kAdaptive) adapt(late, probing);
}

void ThreadPool::adapt(bool late, bool probing) {
  if (probing) {
    probe_late_ += late ? 1 : 0;
    if (--probe_left_ > 0) return;
    // The first call of a probe usually wakes a sleeping worker (tens of
    // microseconds): one late call in the probe is allowed.
    if (probe_late_ <= 1) {
      ++width_;
      ++stats_.widened;
      calls_since_widen_ = 0;
      window_calls_ = window_late_ = 0;
    } else {
      probe_interval_ = std::min(2 * probe_interval_, kMaxProbeInterval);
    }
    calls_to_probe_ = probe_interval_;
    return;
  }
  ++calls_since_widen_;
  ++window_calls_;
  window_late_ += late ? 1 : 0;
  if (window_calls_ < kWindow) return;
  if (window_late_ >= kLateLimit) {
    --width_;
    ++stats_.narrowed;
    const bool short_lived = stats_.widened > 0 && calls_since_widen_ <= kStickyCalls;
    probe_interval_ = short_lived ? std::min(2 * probe_interval_, kMaxProbeInterval) : kMinProbeInterval;
    calls_to_probe_ = probe_interval_;
  }
  window_calls_ = window_late_ = 0;
}

void ThreadPool::worker_loop(int tid) {
  Slot& slot = slots_[tid];
  for (;;) {
    spin_wait_while_equal(slot.state, uint32_t{kIdle});
    uint32_t v = slot.state.load(std::memory_order_acquire);
    if (v == kStop) return;
    if (v != kPosted) continue;
    if (const std::atomic<bool>* gate = slot.hold.load(std::memory_order_acquire)) {
      while (!gate->load(std::memory_order_acquire) && slot.state.load(std::memory_order_acquire) == kPosted) {
        std::this_thread::yield();
      }
      if (!gate->load(std::memory_order_acquire)) continue;  // still held: never take a job (cancelled)
    }
    if (!slot.state.compare_exchange_strong(v, kRunning, std::memory_order_acq_rel)) continue;  // cancelled
    fn_(ctx_, tid, job_width_);
    slot.state.store(kIdle, std::memory_order_release);
    slot.state.notify_one();
  }
}

void ThreadPool::barrier() {
  const int nth = job_width_;
  if (nth == 1) return;
  const uint32_t phase = barrier_phase_.load(std::memory_order_acquire);
  if (barrier_count_.fetch_add(1, std::memory_order_acq_rel) == nth - 1) {
    barrier_count_.store(0, std::memory_order_relaxed);
    barrier_phase_.fetch_add(1, std::memory_order_release);
    barrier_phase_.notify_all();
    return;
  }
  spin_wait_while_equal(barrier_phase_, phase);
}

void ThreadPool::hold_worker_for_testing(int tid, const std::atomic<bool>* gate) {
  if (tid > 0 && tid < n_threads_) slots_[tid].hold.store(gate, std::memory_order_release);
}

ThreadPool& ThreadPool::global(int n_threads) {
  static ThreadPool pool(n_threads);
  return pool;
}

}  // namespace tessera
