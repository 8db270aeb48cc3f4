// The compute-peak loops (kernels/peak.h) do the work they time: their
// checksums equal the closed form for several operand pairs, on every ISA
// this CPU runs; measure_compute_peak() reports positive rates there and
// none for the scalar ISA.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

#include "core/cpu.h"
#include "core/thread_pool.h"
#include "kernels/peak.h"

namespace tessera::kernels {
namespace {

TEST(PeakLoops, ChecksumsMatchClosedForm) {
  int tested = 0;
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    if (!isa_supported(isa)) continue;
    ++tested;
    const PeakLoops* loops = peak_loops(isa);
    ASSERT_NE(loops, nullptr);
    for (auto [a, b] : {std::pair{3, 5}, std::pair{-128, 127}, std::pair{127, -127}, std::pair{-7, -9}}) {
      SCOPED_TRACE(std::string(isa_name(isa)) + " a=" + std::to_string(a) + " b=" + std::to_string(b));
      const int64_t trips = 1000;
      const PeakLoopResult r = loops->int8_dot(trips, static_cast<int8_t>(a), static_cast<int8_t>(b));
      EXPECT_EQ(r.macs, trips * 8 * 32);
      // Each of the 8 int32 lanes sums trips * 8 chains * 4 products
      // (a + offset) * b (no wrap at these sizes).
      const int64_t lane = trips * 8 * 4 * static_cast<int64_t>(a + loops->q8_offset) * b;
      EXPECT_EQ(r.checksum, lane * 8);
      const PeakLoopResult f = loops->f32_fma(trips, static_cast<int8_t>(a), static_cast<int8_t>(b));
      const int lanes = static_cast<int>(f.macs / (trips * 12));
      EXPECT_TRUE(lanes == 8 || lanes == 16) << lanes;
      // 12 chains x lanes, each trips * a * b / 64 (exact in f32 here: every
      // partial sum is a multiple of 1/64 below 2^24 / 64).
      EXPECT_EQ(f.checksum, static_cast<int64_t>(12) * lanes * trips * a * b / 64);
    }
  }
  if (tested == 0) GTEST_SKIP() << "no vector ISA on this CPU";
}

TEST(PeakLoops, MeasuredPeakIsPositiveOnVectorIsas) {
  ThreadPool pool(2);
  EXPECT_EQ(peak_loops(Isa::kScalar), nullptr);
  const ComputePeak none = measure_compute_peak(pool, Isa::kScalar, 0.01, 1);
  EXPECT_EQ(none.int8_macs_per_s, 0.0);
  if (!isa_supported(Isa::kAvx2)) GTEST_SKIP() << "no AVX2";
  const ComputePeak p = measure_compute_peak(pool, Isa::kAvx2, 0.01, 1);
  // A rate, not a speed check (sanitizer builds and loaded machines run
  // these loops far slower): positive and finite, and below what two cores
  // could ever issue, which an emptied or hoisted loop would exceed.
  for (double rate : {p.int8_macs_per_s, p.f32_fmas_per_s}) {
    EXPECT_GT(rate, 0.0);
    EXPECT_TRUE(std::isfinite(rate));
    EXPECT_LT(rate, 1e14);
  }
}

}  // namespace
}  // namespace tessera::kernels
