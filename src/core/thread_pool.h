// Persistent worker threads for the kernels.
//
// The calling thread is worker 0, so a pool of N threads starts N-1 OS threads
// and never oversubscribes the cores it was given. Workers spin briefly on a
// generation counter before sleeping on it (C++20 atomic wait = futex), so
// back-to-back matmuls of one forward pass cost a few hundred nanoseconds of
// hand-off, not a thread wake-up each. No task queue, no per-call allocation:
// every call runs one function on every worker, which splits the work itself
// (static partitioning, so the arithmetic of each output does not depend on
// timing, only on the thread count, and not even on that where splits are
// along outputs).
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

namespace tessera {

class ThreadPool {
 public:
  // n_threads <= 0 means one per available core.
  explicit ThreadPool(int n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls fn(thread_index, n_threads) once on every worker (the caller is
  // index 0) and returns when all have finished. Not reentrant.
  template <class F>
  void run(F&& fn) {
    auto thunk = [](void* ctx, int tid, int nth) { (*static_cast<F*>(ctx))(tid, nth); };
    dispatch(thunk, &fn);
  }

  // Splits [0, n) into n_threads contiguous ranges and calls
  // fn(begin, end) for each non-empty one. `grain` rounds range boundaries
  // to multiples of itself (e.g. rows of a SIMD tile).
  template <class F>
  void parallel_for(int64_t n, int64_t grain, F&& fn) {
    if (n <= 0) return;
    const int64_t units = (n + grain - 1) / grain;
    if (n_threads_ == 1 || units == 1) {
      fn(int64_t{0}, n);
      return;
    }
    run([&](int tid, int nth) {
      const int64_t u0 = units * tid / nth;
      const int64_t u1 = units * (tid + 1) / nth;
      const int64_t b = u0 * grain;
      const int64_t e = u1 * grain < n ? u1 * grain : n;
      if (b < e) fn(b, e);
    });
  }

  // Waits until every worker of the current run() has reached it.
  // Only valid inside run().
  void barrier();

  // A process-wide pool, sized by the first call (later sizes are ignored
  // unless the first was never made). The CLI sizes it from -t.
  static ThreadPool& global(int n_threads = 0);

 private:
  using Thunk = void (*)(void*, int, int);
  void dispatch(Thunk fn, void* ctx);
  void worker_loop(int tid);

  int n_threads_;
  std::vector<std::thread> threads_;
  Thunk fn_ = nullptr;
  void* ctx_ = nullptr;
  alignas(64) std::atomic<uint32_t> generation_{0};
  alignas(64) std::atomic<int> pending_{0};
  alignas(64) std::atomic<int> barrier_count_{0};
  alignas(64) std::atomic<uint32_t> barrier_phase_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace tessera
