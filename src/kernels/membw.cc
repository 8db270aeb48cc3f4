#include "kernels/membw.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#include "core/aligned_buffer.h"
#include "kernels/membw_kernels.h"

namespace tessera::kernels {

uint64_t read_sum_scalar(const uint64_t* p, size_t words) {
  // Eight independent sums: enough loads in flight to saturate DRAM.
  uint64_t s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  size_t i = 0;
  for (; i + 8 <= words; i += 8) {
    for (int j = 0; j < 8; ++j) s[j] += p[i + j];
  }
  for (; i < words; ++i) s[0] += p[i];
  uint64_t sum = 0;
  for (uint64_t v : s) sum += v;
  return sum;
}

ReadSumFn read_sum_fn(Isa isa) {
  switch (isa) {
    case Isa::kAvx2: return read_sum_avx2;
    case Isa::kAvx512: return read_sum_avx512;
    default: return read_sum_scalar;
  }
}

BandwidthResult measure_read_bandwidth(ThreadPool& pool, size_t bytes, int reps) {
  const size_t words = bytes / sizeof(uint64_t);
  AlignedBuffer<uint64_t> buf(words);
  // Touch every page first (on all threads) so the timing reads memory,
  // not page faults.
  pool.parallel_for(static_cast<int64_t>(words), 4096, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) buf[static_cast<size_t>(i)] = static_cast<uint64_t>(i);
  });
  const ReadSumFn read_sum = read_sum_fn(active_isa());
  std::vector<uint64_t> sink(static_cast<size_t>(pool.size()) * 8, 0);
  std::vector<double> rates;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    pool.run([&](int tid, int nth) {
      const size_t b = words * tid / nth / 8 * 8, e = words * (tid + 1) / nth / 8 * 8;
      sink[static_cast<size_t>(tid) * 8] += read_sum(buf.data() + b, e - b);
    });
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    rates.push_back(static_cast<double>(words * sizeof(uint64_t)) / secs / 1e9);
  }
  std::sort(rates.begin(), rates.end());
  BandwidthResult res;
  res.gbps_median = rates[rates.size() / 2];
  res.gbps_max = rates.back();
  res.bytes = words * sizeof(uint64_t);
  res.reps = reps;
  return res;
}

}  // namespace tessera::kernels
