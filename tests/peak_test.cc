// The machine-limit probes do the work they time. The compute-peak loops
// (kernels/peak.h): their checksums equal the closed form for several
// operand pairs, on every ISA this CPU runs; measure_compute_peak() reports
// positive rates there and none for the scalar ISA. The bandwidth probe's
// read loops (kernels/membw_kernels.h) sum exactly what the scalar loop sums.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/cpu.h"
#include "core/thread_pool.h"
#include "kernels/membw.h"
#include "kernels/membw_kernels.h"
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

// The hardware loops: 12 chains of the widest multiply-add, every product
// (uint8_t)a * b counted once (trips small enough that no int16 lane of the
// AVX2 loop saturates or wraps).
TEST(PeakLoops, HardwareLoopChecksumsMatchClosedForm) {
  int tested = 0;
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    if (!isa_supported(isa)) continue;
    ++tested;
    const PeakLoops* loops = peak_loops(isa);
    ASSERT_NE(loops, nullptr);
    ASSERT_NE(loops->int8_hw, nullptr);
    for (auto [a, b] : {std::pair{3, 5}, std::pair{2, -7}, std::pair{1, 1}, std::pair{-1, 1}}) {
      SCOPED_TRACE(std::string(isa_name(isa)) + " a=" + std::to_string(a) + " b=" + std::to_string(b));
      const int64_t trips = 40;
      const PeakLoopResult r = loops->int8_hw(trips, static_cast<int8_t>(a), static_cast<int8_t>(b));
      EXPECT_EQ(r.macs, trips * 12 * (isa == Isa::kAvx512 ? 64 : 32));
      EXPECT_EQ(r.checksum, r.macs * static_cast<uint8_t>(static_cast<int8_t>(a)) * b);
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
  for (double rate : {p.int8_macs_per_s, p.int8_hw_macs_per_s, p.f32_fmas_per_s}) {
    EXPECT_GT(rate, 0.0);
    EXPECT_TRUE(std::isfinite(rate));
    EXPECT_LT(rate, 1e14);
  }
}

TEST(ReadSum, EveryIsaSumsWhatTheScalarLoopSums) {
  std::mt19937_64 rng(7);
  std::vector<uint64_t> buf(4096 + 64);
  for (uint64_t& v : buf) v = rng();
  int tested = 0;
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    if (!isa_supported(isa)) continue;
    ++tested;
    const ReadSumFn fn = read_sum_fn(isa);
    ASSERT_NE(fn, read_sum_scalar);
    // Every tail length and start alignment the vector trips leave.
    for (size_t off : {0, 1, 3, 8}) {
      for (size_t words : {0, 1, 7, 15, 16, 31, 32, 33, 100, 4095, 4096}) {
        EXPECT_EQ(fn(buf.data() + off, words), read_sum_scalar(buf.data() + off, words))
            << isa_name(isa) << " off " << off << " words " << words;
      }
    }
  }
  EXPECT_EQ(read_sum_fn(Isa::kScalar), read_sum_scalar);
  if (tested == 0) GTEST_SKIP() << "no vector ISA on this CPU";
}

TEST(ReadSum, BandwidthIsAPositiveRate) {
  ThreadPool pool(2);
  const BandwidthResult b = measure_read_bandwidth(pool, size_t{16} << 20, 3);
  EXPECT_GT(b.gbps_median, 0.0);
  EXPECT_GE(b.gbps_max, b.gbps_median);
  EXPECT_EQ(b.reps, 3);
  EXPECT_LT(b.gbps_max, 1e5);  // 100 TB/s: an emptied loop, not a memory system
}

}  // namespace
}  // namespace tessera::kernels
