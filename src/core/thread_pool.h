// Persistent worker threads for the kernels.
//
// The calling thread is worker 0, so a pool of N threads starts N-1 OS threads
// and never oversubscribes the cores it was given. No task queue, no per-call
// allocation: a call runs one function on the caller and on the workers it
// posts the job to, and the function splits the work itself. Which thread
// computes an output never changes its arithmetic (the kernels split along
// outputs), so results are bit-identical whatever the width of a call.
//
// Each worker has its own job slot (one cache line): idle -> posted (by the
// caller) -> running (taken by the worker) -> idle. Waiting spins with
// `pause`, then yields, then sleeps on a futex (spin_wait_while_equal in the
// .cc), on both sides: workers waiting for a job, the caller waiting for a
// worker to finish.
//
// Two kinds of job:
//  - run(fn): every one of the call's threads must run fn(tid, nth) once
//    (static splits, barrier()). The caller waits for every posted worker.
//  - run_dynamic(fn): fn claims its work from shared state (a counter), so
//    the caller alone can finish it. When the caller's fn returns (no work
//    left to claim), a posted worker that has not taken the job yet is
//    cancelled instead of waited for: a worker the OS has descheduled costs
//    the call nothing beyond the chunk it may already hold.
//
// Width. A fixed pool (an explicit thread count: `-t N`) always posts to all
// its workers. An adaptive pool (the default: all cores, `-t` absent,
// EngineConfig::threads = 0) narrows itself when it does not own its cores:
// after each call it notes whether some posted worker had not even started
// when the caller finished its own share ("late"). When at least kLateLimit
// of the last kWindow calls were late, it drops one worker (down to the
// caller alone); while narrowed, every probe_interval calls it probes one
// more worker for kProbeLength dynamic calls and widens again when the
// worker kept up. A probe that fails, or a widening that does not last,
// doubles the interval (up to kMaxProbeInterval); a narrowing after a
// long stretch at full width starts it from kMinProbeInterval again.
// Workers left out are not woken at all: they sleep, and the caller gets
// its core to itself.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <type_traits>
#include <vector>

namespace tessera {

// Hands out [0, units) in chunks that shrink as the work runs out (guided
// self-scheduling): each claim takes (remaining / 2·nth) units, rounded up
// to a multiple of `step`, at least `step`. Big chunks first, so claims
// (one shared cache line) are rare; small ones at the end, so no thread
// waits long for another's last chunk, and a thread descheduled in the
// middle of the call holds little.
class GuidedChunks {
 public:
  GuidedChunks(int64_t units, int64_t step) : units_(units), step_(step) {}
  bool claim(int nth, int64_t* u0, int64_t* u1) {
    int64_t cur = next_.load(std::memory_order_relaxed);
    for (;;) {
      if (cur >= units_) return false;
      const int64_t want = (units_ - cur) / (2 * nth);
      const int64_t size = want > step_ ? (want + step_ - 1) / step_ * step_ : step_;
      if (next_.compare_exchange_weak(cur, cur + size, std::memory_order_relaxed)) {
        *u0 = cur;
        *u1 = cur + size < units_ ? cur + size : units_;
        return true;
      }
    }
  }

 private:
  std::atomic<int64_t> next_{0};
  int64_t units_, step_;
};

class ThreadPool {
 public:
  enum class Mode { kFixed, kAdaptive };

  // n_threads <= 0: one thread per available core, adaptive width.
  // n_threads > 0: exactly that many, fixed.
  explicit ThreadPool(int n_threads = 0);
  ThreadPool(int n_threads, Mode mode);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Threads the pool owns, the caller included (the most a call can use).
  int size() const { return n_threads_; }
  // Threads the next call uses (a probe may add one): size() when fixed.
  int width() const { return width_; }
  Mode mode() const { return mode_; }

  // Calls fn(thread_index, n_threads) once on each of the call's threads
  // (the caller is index 0; n_threads <= size()) and returns when all have
  // finished. Not reentrant; one calling thread at a time.
  template <class F>
  void run(F&& fn) {
    dispatch(&thunk<F>, &fn, /*dynamic=*/false);
  }

  // Like run(), but fn must claim all of its work from shared state, so
  // that any subset of the threads that contains the caller completes it:
  // workers that have not started when the caller's fn returns are skipped.
  // No barrier() inside.
  template <class F>
  void run_dynamic(F&& fn) {
    dispatch(&thunk<F>, &fn, /*dynamic=*/true);
  }

  // Calls fn(begin, end) on chunks that cover [0, n) exactly once, chunk
  // boundaries on multiples of `grain` (e.g. rows of a SIMD tile), handed
  // out by guided self-scheduling (run_dynamic). Ranges are visited on
  // whichever thread claims them: fn must not depend on the split.
  template <class F>
  void parallel_for(int64_t n, int64_t grain, F&& fn) {
    if (n <= 0) return;
    const int64_t units = (n + grain - 1) / grain;
    if (n_threads_ == 1 || units == 1) {
      fn(int64_t{0}, n);
      return;
    }
    GuidedChunks chunks(units, 1);
    run_dynamic([&](int, int nth) {
      int64_t u0 = 0, u1 = 0;
      while (chunks.claim(nth, &u0, &u1)) fn(u0 * grain, u1 * grain < n ? u1 * grain : n);
    });
  }

  // Waits until every thread of the current run() has reached it.
  // Only valid inside run().
  void barrier();

  // Counters since construction (read them from the calling thread).
  struct Stats {
    int64_t dispatches = 0;  // calls that posted work to at least one worker
    int64_t late = 0;        // of those, calls with a worker not started when the caller finished
    int64_t cancelled = 0;   // worker jobs skipped by run_dynamic()
    int64_t narrowed = 0;    // adaptive width steps down
    int64_t widened = 0;     // adaptive width steps up (successful probes)
    int64_t probes = 0;      // probes started
  };
  const Stats& stats() const { return stats_; }

  // Test hook: while *gate is false, worker `tid` does not take posted jobs,
  // as if the OS had descheduled it (a cancelled job releases it). Null
  // removes the hold.
  void hold_worker_for_testing(int tid, const std::atomic<bool>* gate);

  // A process-wide pool, sized by the first call (later sizes are ignored
  // unless the first was never made); 0: adaptive, all cores.
  static ThreadPool& global(int n_threads = 0);

  // Adaptive policy constants (see the comment at the top).
  static constexpr int kWindow = 64;     // about one token of a 110m decode
  static constexpr int kLateLimit = 32;  // half the window
  static constexpr int kProbeLength = 4;
  static constexpr int kMinProbeInterval = 64;
  static constexpr int kMaxProbeInterval = 4096;
  static constexpr int kStickyCalls = 4 * kWindow;  // a widening lasting fewer calls did not last

 private:
  using Thunk = void (*)(void*, int, int);
  template <class F>
  static void thunk(void* ctx, int tid, int nth) {
    (*static_cast<std::remove_reference_t<F>*>(ctx))(tid, nth);
  }

  // One worker's job slot and test hold, on its own cache line.
  struct alignas(64) Slot {
    std::atomic<uint32_t> state{0};
    std::atomic<const std::atomic<bool>*> hold{nullptr};
  };

  void dispatch(Thunk fn, void* ctx, bool dynamic);
  void adapt(bool late, bool probing);
  void worker_loop(int tid);

  int n_threads_;
  Mode mode_;
  int width_;
  std::unique_ptr<Slot[]> slots_;  // [n_threads_], slot 0 unused (the caller)
  std::vector<std::thread> threads_;
  // The posted job: written by the caller before it posts, read by a worker
  // after it has taken the job.
  Thunk fn_ = nullptr;
  void* ctx_ = nullptr;
  int job_width_ = 1;
  alignas(64) std::atomic<int> barrier_count_{0};
  alignas(64) std::atomic<uint32_t> barrier_phase_{0};
  // Adaptive state, touched by the calling thread only.
  int window_calls_ = 0, window_late_ = 0;
  int probe_interval_ = kMinProbeInterval;
  int calls_to_probe_ = kMinProbeInterval;
  int probe_left_ = 0, probe_late_ = 0;
  int64_t calls_since_widen_ = 0;
  Stats stats_;
};

}  // namespace tessera
