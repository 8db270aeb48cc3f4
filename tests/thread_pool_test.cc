// ThreadPool: every worker runs each job exactly once, parallel_for covers
// its range exactly once on grain boundaries, barrier() orders writes
// before reads, and repeated hand-offs neither lose nor duplicate work.
// Also measures the hand-off cost of an empty run() (recorded as a test
// property; docs/KERNELS.md quotes it).
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
