#include "core/thread_pool.h"

#include <immintrin.h>

#include <mutex>

#include "core/error.h"

namespace tessera {
namespace {

// Waiting has three stages. Pause-spinning (1024 pauses: about 20 us on
// Zen, 50 us on recent Intel) covers the gap between two kernels of one
// forward pass at the cost of a cache-line poll. Then yielding: on an
// oversubscribed core (more runnable threads than cores: a shared machine,
// or a pool larger than the cores) a pure spinner would hold the core the
// thread with the work needs for a whole time slice (milliseconds per
// hand-off, measured); sched_yield hands it over and returns at once when
// nothing else is runnable. Last, a futex sleep (C++20 atomic wait), so an
// idle pool costs nothing.
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

}  // namespace

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) {
    n_threads = static_cast<int>(std::thread::hardware_concurrency());
    if (n_threads <= 0) n_threads = 1;
  }
  n_threads_ = n_threads;
  threads_.reserve(n_threads - 1);
  for (int t = 1; t < n_threads; ++t) threads_.emplace_back([this, t] { worker_loop(t); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::dispatch(Thunk fn, void* ctx) {
  if (n_threads_ == 1) {
    fn(ctx, 0, 1);
    return;
  }
  fn_ = fn;
  ctx_ = ctx;
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  fn(ctx, 0, n_threads_);
  for (;;) {
    int left = pending_.load(std::memory_order_acquire);
    if (left == 0) break;
    spin_wait_while_equal(pending_, left);
  }
}

void ThreadPool::worker_loop(int tid) {
  uint32_t seen = 0;
  for (;;) {
    spin_wait_while_equal(generation_, seen);
    seen = generation_.load(std::memory_order_acquire);
    if (stop_.load(std::memory_order_acquire)) return;
    fn_(ctx_, tid, n_threads_);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
  }
}

void ThreadPool::barrier() {
  if (n_threads_ == 1) return;
  const uint32_t phase = barrier_phase_.load(std::memory_order_acquire);
  if (barrier_count_.fetch_add(1, std::memory_order_acq_rel) == n_threads_ - 1) {
    barrier_count_.store(0, std::memory_order_relaxed);
    barrier_phase_.fetch_add(1, std::memory_order_release);
    barrier_phase_.notify_all();
    return;
  }
  spin_wait_while_equal(barrier_phase_, phase);
}

ThreadPool& ThreadPool::global(int n_threads) {
  static ThreadPool pool(n_threads);
  return pool;
}

}  // namespace tessera
