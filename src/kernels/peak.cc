#include "kernels/peak.h"

#include <algorithm>
#include <chrono>
#include <vector>

namespace tessera::kernels {

const PeakLoops& peak_loops_avx2();
const PeakLoops& peak_loops_avx512();

const PeakLoops* peak_loops(Isa isa) {
  switch (isa) {
    case Isa::kAvx2: return &peak_loops_avx2();
    case Isa::kAvx512: return &peak_loops_avx512();
    default: return nullptr;
  }
}

namespace {

double timed(PeakLoopFn fn, int64_t trips, int64_t* macs) {
  const auto t0 = std::chrono::steady_clock::now();
  const PeakLoopResult r = fn(trips, 3, 5);
  *macs = r.macs;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Sum over threads of each thread's rate for one loop, trips sized from a
// short calibration run so each thread runs about `seconds`.
double pooled_rate(ThreadPool& pool, PeakLoopFn fn, double seconds, int reps) {
  int64_t trips = 1 << 12, macs = 0;
  double secs = timed(fn, trips, &macs);
  for (; secs < seconds / 8; secs = timed(fn, trips, &macs)) trips *= 4;
  trips = std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(trips) * seconds / std::max(secs, 1e-6)));
  double best = 0.0;
  for (int rep = 0; rep < reps; ++rep) {
    std::vector<double> rate(static_cast<size_t>(pool.size()), 0.0);
    pool.run([&](int tid, int) {
      int64_t m = 0;
      const double s = timed(fn, trips, &m);
      rate[static_cast<size_t>(tid)] = static_cast<double>(m) / s;
    });
    double sum = 0.0;
    for (double v : rate) sum += v;
    best = std::max(best, sum);
  }
  return best;
}

}  // namespace

ComputePeak measure_compute_peak(ThreadPool& pool, Isa isa, double seconds, int reps) {
  ComputePeak p;
  const PeakLoops* loops = peak_loops(isa);
  if (loops == nullptr) return p;
  p.int8_macs_per_s = pooled_rate(pool, loops->int8_dot, seconds, reps);
  p.int8_hw_macs_per_s = pooled_rate(pool, loops->int8_hw, seconds, reps);
  p.f32_fmas_per_s = pooled_rate(pool, loops->f32_fma, seconds, reps);
  return p;
}

}  // namespace tessera::kernels
