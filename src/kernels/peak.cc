#include "kernels/peak.h"

#include <algorithm>
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

// Sum over threads of each thread's rate for one loop, trips sized from a
// short calibration run so each thread runs about `seconds`.
double pooled_rate(ThreadPool& pool, PeakLoopFn fn, double seconds, int reps) {
  int64_t trips = 1 << 12;
  for (PeakLoopResult r = fn(trips, 3, 5); r.seconds < seconds / 8; r = fn(trips, 3, 5)) trips *= 4;
  const PeakLoopResult cal = fn(trips, 3, 5);
  trips = std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(trips) * seconds / std::max(cal.seconds, 1e-6)));
  double best = 0.0;
  for (int rep = 0; rep < reps; ++rep) {
    std::vector<double> rate(static_cast<size_t>(pool.size()), 0.0);
    pool.run([&](int tid, int) {
      const PeakLoopResult r = fn(trips, 3, 5);
      rate[static_cast<size_t>(tid)] = static_cast<double>(r.macs) / r.seconds;
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
  p.f32_fmas_per_s = pooled_rate(pool, loops->f32_fma, seconds, reps);
  return p;
}

}  // namespace tessera::kernels
