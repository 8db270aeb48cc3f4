// The serving roofline model (eval/roofline_model.h): a hand-computed
// case, its two limits (compute-bound: batching cannot help; memory-bound:
// time is the number of steps), and the ordering continuous <= static <=
// one-at-a-time on random workloads and machines.
#include <gtest/gtest.h>

#include <random>

#include "core/error.h"
#include "eval/roofline_model.h"

namespace tessera::engine {
namespace {

TEST(RooflineModel, HandComputedCase) {
  // 100 multiply-adds per token, 1000 per logit row, 50 weight bytes; 100
  // MAC/s and 1 byte/s: every step costs at least 50 s of reading.
  const RooflineModelShape m{100, 1000, 50};
  const RooflineMachine hw{100.0, 1.0};
  const std::vector<WorkloadRequest> one{{10, 3}};
  const RooflineTimes t = roofline_times(one, m, hw, 16, 4);
  // Prompt in chunks 4, 4, 2 (3 steps), then 2 decode steps: 5 x 50 s.
  EXPECT_DOUBLE_EQ(t.one_at_a_time, 250.0);
  EXPECT_DOUBLE_EQ(t.static_batches, 250.0);
  // At least max(12 tokens / 4 per step, 3 outputs) = 3 steps of 50 s; the
  // arithmetic (10*100 + 1000 + 2*(100 + 1000)) / 100 = 42 s is less.
  EXPECT_DOUBLE_EQ(t.continuous, 150.0);

  // Two requests in one static batch: prompts 3 + 6 packed as 4, 4, 1 (the
  // first logit row in step 1, the second in step 3), then decode steps of 2
  // and 1 requests. Compute-bound machine (no weight bytes).
  const RooflineModelShape mc{100, 1000, 0};
  const std::vector<WorkloadRequest> two{{3, 3}, {6, 2}};
  const RooflineTimes u = roofline_times(two, mc, hw, 2, 4);
  const double prefill = (4 * 100 + 1000 + 4 * 100 + 1 * 100 + 1000) / 100.0;
  const double decode = (2 * 1100 + 1 * 1100) / 100.0;  // step 1: both; step 2: the first only
  EXPECT_DOUBLE_EQ(u.static_batches, prefill + decode);
}

TEST(RooflineModel, ComputeBoundMachineGainsNothingFromBatching) {
  std::mt19937 rng(7);
  std::vector<WorkloadRequest> w;
  for (int i = 0; i < 50; ++i) w.push_back({1 + static_cast<int64_t>(rng() % 500), 1 + static_cast<int64_t>(rng() % 200)});
  const RooflineModelShape m{85'000'000, 24'000'000, 0};  // no bytes: only arithmetic counts
  const RooflineTimes t = roofline_times(w, m, {1e11, 1e10}, 16, 1024);
  EXPECT_NEAR(t.one_at_a_time / t.continuous, 1.0, 1e-9);
  EXPECT_NEAR(t.static_batches / t.continuous, 1.0, 1e-9);
}

TEST(RooflineModel, MemoryBoundMachineCountsSteps) {
  const RooflineModelShape m{0, 0, 1000};  // no arithmetic: each step costs 1 s
  const std::vector<WorkloadRequest> w{{5, 10}, {1, 4}, {9, 2}};
  const RooflineTimes t = roofline_times(w, m, {1e9, 1000.0}, 2, 4);
  // (a): steps ceil(5/4)+9, ceil(1/4)+3, ceil(9/4)+1 = 11 + 4 + 4.
  EXPECT_DOUBLE_EQ(t.one_at_a_time, 19.0);
  // (b): batch {5,10},{1,4}: prompts 6 tokens -> 2 steps, then 9 decode
  // steps; batch {9,2}: 3 steps + 1 decode step.
  EXPECT_DOUBLE_EQ(t.static_batches, 2 + 9 + 3 + 1);
  // (c): max(ceil(28 tokens / 4), longest output 10) = 10 steps.
  EXPECT_DOUBLE_EQ(t.continuous, 10.0);
}

TEST(RooflineModel, ContinuousAtMostStaticAtMostOneAtATime) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<WorkloadRequest> w(1 + rng() % 40);
    for (auto& r : w) r = {1 + static_cast<int64_t>(rng() % 600), 1 + static_cast<int64_t>(rng() % 300)};
    const RooflineModelShape m{1 + static_cast<int64_t>(rng() % 100'000'000), static_cast<int64_t>(rng() % 30'000'000),
                               static_cast<size_t>(rng() % 500'000'000)};
    const RooflineMachine hw{1e9 * (1 + rng() % 300), 1e9 * (1 + rng() % 100)};
    const int batch = 1 + static_cast<int>(rng() % 32);
    const int64_t budget = 1 + static_cast<int64_t>(rng() % 2048);
    const RooflineTimes t = roofline_times(w, m, hw, batch, budget);
    EXPECT_LE(t.continuous, t.static_batches * (1 + 1e-12)) << trial;
    EXPECT_LE(t.static_batches, t.one_at_a_time * (1 + 1e-12)) << trial;
  }
}

TEST(RooflineModel, RejectsNonsense) {
  const RooflineModelShape m{1, 1, 1};
  EXPECT_THROW(roofline_times({{1, 1}}, m, {0.0, 1.0}, 1, 1), Error);
  EXPECT_THROW(roofline_times({{0, 1}}, m, {1.0, 1.0}, 1, 1), Error);
  EXPECT_THROW(roofline_times({{1, 1}}, m, {1.0, 1.0}, 0, 1), Error);
}

}  // namespace
}  // namespace tessera::engine
