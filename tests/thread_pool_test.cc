// ThreadPool: every worker runs each job exactly once, parallel_for covers
// its range exactly once on grain boundaries, barrier() orders writes
// before reads, and repeated hand-offs neither lose nor duplicate work.
// run_dynamic() finishes without a worker that never starts; an adaptive
// pool narrows while a worker is held back (hold_worker_for_testing: a
// worker the OS does not run) and widens again once it keeps up; a fixed
// pool never changes width. Also measures the hand-off cost of an empty
// run() (recorded as a test property; docs/KERNELS.md quotes it).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "core/thread_pool.h"

namespace tessera {
namespace {

TEST(ThreadPool, RunCallsEveryWorkerOnce) {
  for (int n : {1, 2, 3, 5}) {
    ThreadPool pool(n);
    ASSERT_EQ(pool.size(), n);
    for (int iter = 0; iter < 300; ++iter) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      std::atomic<int> seen_nth{0};
      pool.run([&](int tid, int nth) {
        hits[static_cast<size_t>(tid)].fetch_add(1);
        if (nth == n) seen_nth.fetch_add(1);
      });
      for (int t = 0; t < n; ++t) ASSERT_EQ(hits[static_cast<size_t>(t)].load(), 1) << "pool " << n << " iter " << iter;
      ASSERT_EQ(seen_nth.load(), n);
    }
  }
}

TEST(ThreadPool, CallerIsWorkerZero) {
  ThreadPool pool(3);
  const auto self = std::this_thread::get_id();
  std::thread::id zero, other;
  pool.run([&](int tid, int) {
    if (tid == 0) zero = std::this_thread::get_id();
    if (tid == 1) other = std::this_thread::get_id();
  });
  EXPECT_EQ(zero, self);
  EXPECT_NE(other, self);
}

TEST(ThreadPool, ParallelForCoversRangeOnGrain) {
  ThreadPool pool(3);
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{8}, int64_t{100}, int64_t{1001}}) {
    for (int64_t grain : {int64_t{1}, int64_t{8}}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      pool.parallel_for(n, grain, [&](int64_t b, int64_t e) {
        EXPECT_EQ(b % grain, 0) << "range start off the grain";
        EXPECT_TRUE(e == n || e % grain == 0);
        for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "n " << n << " i " << i;
    }
  }
}

// Each phase, every worker writes its slot, passes the barrier, then checks
// every other slot holds this phase's value: a barrier that let a thread
// through early (or lost a write) fails.
TEST(ThreadPool, BarrierOrdersPhases) {
  for (int n : {2, 3}) {
    ThreadPool pool(n);
    std::vector<int> slot(static_cast<size_t>(n), -1);
    std::atomic<int> errors{0};
    for (int iter = 0; iter < 50; ++iter) {
      pool.run([&](int tid, int nth) {
        for (int phase = 0; phase < 10; ++phase) {
          slot[static_cast<size_t>(tid)] = iter * 100 + phase;
          pool.barrier();
          for (int t = 0; t < nth; ++t) {
            if (slot[static_cast<size_t>(t)] != iter * 100 + phase) errors.fetch_add(1);
          }
          pool.barrier();
        }
      });
    }
    EXPECT_EQ(errors.load(), 0) << "pool " << n;
  }
}

TEST(ThreadPool, DefaultIsAdaptiveOnAllCoresExplicitCountIsFixed) {
  ThreadPool def;
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  EXPECT_EQ(def.size(), cores > 0 ? cores : 1);
  EXPECT_EQ(def.mode(), ThreadPool::Mode::kAdaptive);
  EXPECT_EQ(def.width(), def.size());
  ThreadPool zero(0);
  EXPECT_EQ(zero.mode(), ThreadPool::Mode::kAdaptive);
  ThreadPool two(2);
  EXPECT_EQ(two.mode(), ThreadPool::Mode::kFixed);
  EXPECT_EQ(two.width(), 2);
}

// A dynamic job: `units` units claimed in guided chunks, each counted once,
// and which thread ran how many.
struct CountingJob {
  explicit CountingJob(int64_t n) : units(n), chunks(n, 1), hits(static_cast<size_t>(n)) {}
  void operator()(int tid, int nth) {
    int64_t u0 = 0, u1 = 0;
    while (chunks.claim(nth, &u0, &u1)) {
      for (int64_t u = u0; u < u1; ++u) hits[static_cast<size_t>(u)].fetch_add(1);
      by_thread[tid].fetch_add(u1 - u0);
    }
  }
  bool each_once() const {
    for (const auto& h : hits) {
      if (h.load() != 1) return false;
    }
    return true;
  }
  int64_t units;
  GuidedChunks chunks;
  std::vector<std::atomic<int>> hits;
  std::atomic<int64_t> by_thread[4] = {};
};

TEST(ThreadPool, RunDynamicSkipsAWorkerThatNeverStarts) {
  ThreadPool pool(2);
  std::atomic<bool> gate{false};
  pool.hold_worker_for_testing(1, &gate);
  for (int iter = 0; iter < 50; ++iter) {
    CountingJob job(1000);
    pool.run_dynamic(job);
    ASSERT_TRUE(job.each_once()) << "iter " << iter;
    ASSERT_EQ(job.by_thread[0].load(), 1000) << "the held worker ran a chunk";
  }
  EXPECT_EQ(pool.stats().dispatches, 50);
  EXPECT_EQ(pool.stats().late, 50);
  EXPECT_EQ(pool.stats().cancelled, 50);
  EXPECT_EQ(pool.width(), 2) << "a fixed pool keeps its width";
  EXPECT_EQ(pool.stats().narrowed, 0);
  gate = true;
  pool.hold_worker_for_testing(1, nullptr);
  // Released, the worker still runs plain jobs.
  std::atomic<int> ran{0};
  pool.run([&](int tid, int) { ran.fetch_add(tid); });
  EXPECT_EQ(ran.load(), 1);
}

// A dynamic job whose caller, on a call of more than one thread, keeps its
// hands off the work until another thread has taken a chunk (bounded: 20 s
// is a hung worker, not a slow one), so that a worker that is free to run
// is never late, however slowly the machine schedules it (sanitizers).
struct WaitForHelperJob {
  void operator()(int tid, int nth) {
    if (tid == 0 && nth > 1) {
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (!helped.load() && std::chrono::steady_clock::now() < until) std::this_thread::yield();
    }
    if (tid != 0) helped = true;
    job(tid, nth);
  }
  std::atomic<bool> helped{false};
  CountingJob job{64};
};

TEST(ThreadPool, AdaptiveNarrowsWhileAWorkerStallsAndWidensWhenItRecovers) {
  ThreadPool pool(2, ThreadPool::Mode::kAdaptive);
  ASSERT_EQ(pool.width(), 2);
  std::atomic<bool> gate{false};
  pool.hold_worker_for_testing(1, &gate);
  // Every call finds the worker not started: one window of late calls
  // drops it.
  for (int i = 0; i < ThreadPool::kWindow; ++i) {
    ASSERT_EQ(pool.width(), 2) << "narrowed after only " << i << " calls";
    CountingJob job(256);
    pool.run_dynamic(job);
    ASSERT_TRUE(job.each_once());
  }
  EXPECT_EQ(pool.width(), 1);
  EXPECT_EQ(pool.stats().narrowed, 1);
  EXPECT_EQ(pool.stats().late, ThreadPool::kWindow);
  // Still held: the caller works alone; probes try the worker, fail and
  // leave the width at one.
  const int64_t dispatched = pool.stats().dispatches;
  for (int i = 0; i < 3 * ThreadPool::kMinProbeInterval; ++i) {
    CountingJob job(256);
    pool.run_dynamic(job);
    ASSERT_TRUE(job.each_once());
    ASSERT_EQ(job.by_thread[0].load(), 256);
  }
  // Plain run() while narrowed: the caller alone, and barrier() passes.
  int calls = 0;
  pool.run([&](int tid, int nth) {
    EXPECT_EQ(nth, 1);
    pool.barrier();
    calls += tid + 1;
  });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(pool.width(), 1);
  EXPECT_GE(pool.stats().probes, 1);
  EXPECT_EQ(pool.stats().widened, 0);
  const int64_t posted = pool.stats().dispatches - dispatched;
  EXPECT_GT(posted, 0);
  EXPECT_LE(posted, pool.stats().probes * ThreadPool::kProbeLength) << "while narrowed, only probes post work";
  // Released: the next probe finds the worker keeping up, and the pool
  // returns to full width within the longest probe interval.
  gate = true;
  int n = 0;
  for (; n < ThreadPool::kMaxProbeInterval + ThreadPool::kProbeLength && pool.width() < 2; ++n) {
    WaitForHelperJob job;
    pool.run_dynamic(job);
    ASSERT_TRUE(job.job.each_once());
  }
  EXPECT_EQ(pool.width(), 2) << "not widened after " << n << " calls";
  EXPECT_EQ(pool.stats().widened, 1);
  // At full width it stays there while the worker keeps up.
  const int64_t late = pool.stats().late;
  for (int i = 0; i < 4 * ThreadPool::kWindow; ++i) {
    WaitForHelperJob job;
    pool.run_dynamic(job);
    ASSERT_TRUE(job.job.each_once());
    ASSERT_TRUE(job.helped.load()) << "call " << i << " ran without the worker";
  }
  EXPECT_EQ(pool.stats().late, late);
  EXPECT_EQ(pool.width(), 2);
  EXPECT_EQ(pool.stats().narrowed, 1);
  pool.hold_worker_for_testing(1, nullptr);
}

TEST(ThreadPool, HandOffCost) {
  ThreadPool pool(2);
  std::atomic<int64_t> sink{0};
  auto measure = [&](int calls) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) pool.run([&](int tid, int) { sink.fetch_add(tid, std::memory_order_relaxed); });
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / calls;
  };
  measure(1000);  // warm up (workers spinning)
  const double us = measure(5000);
  EXPECT_EQ(sink.load(), 6000);
  RecordProperty("handoff_us", std::to_string(us));
  std::printf("empty run() on 2 threads: %.2f us per call\n", us);
}

}  // namespace
}  // namespace tessera
