// Memory read bandwidth of this machine, the denominator of the decode
// roofline (bytes of weights per token / bandwidth = best possible time per
// generated token).
#pragma once

#include <cstddef>

#include "core/thread_pool.h"

namespace tessera::kernels {

struct BandwidthResult {
  double gbps_median = 0.0;  // GB/s (10^9 bytes per second)
  double gbps_max = 0.0;
  size_t bytes = 0;          // buffer size read per repetition
  int reps = 0;
};

// Streams a buffer much larger than the caches, every thread of `pool`
// reading its own contiguous part with the widest loads of the active ISA
// (membw_kernels.h), `reps` times; median and best rate.
BandwidthResult measure_read_bandwidth(ThreadPool& pool, size_t bytes = size_t{1} << 30, int reps = 9);

}  // namespace tessera::kernels
