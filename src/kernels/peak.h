// The arithmetic ceiling of this machine, the denominator of a
// prompt-processing roofline (as membw.h is for decode): how many int8
// multiply-adds and f32 FMAs per second the cores can issue when nothing
// else limits them. Measured, not taken from a datasheet, by register-only
// loops with enough independent chains to cover latency, two ways:
//  - the kernels' peak: the instruction sequence the matmul kernels use for
//    one exact 32-byte int8 dot (AVX2: sign, vpmaddubsw, vpmaddwd, vpaddd;
//    AVX-512: ymm vpdpbusd); what Tessera's own tiles could reach;
//  - the hardware's peak: the widest int8 multiply-add the ISA has, alone
//    (AVX2: vpmaddubsw, 32 MACs into int16 lanes, as kernels that accept
//    16-bit sums use it; AVX-512: zmm vpdpbusd, 64 MACs into int32); what
//    any program could reach, so a peer above the kernels' peak is measured
//    against this one.
#pragma once

#include <cstdint>

#include "core/cpu.h"
#include "core/thread_pool.h"

namespace tessera::kernels {

struct ComputePeak {
  double int8_macs_per_s = 0.0;     // the kernels' sequence; all threads together; 0: no vector int8 path
  double int8_hw_macs_per_s = 0.0;  // the ISA's widest int8 multiply-add alone
  double f32_fmas_per_s = 0.0;
};

// One run of `iters` loop trips on one thread (the caller times it); the
// checksum proves the work was done (tests compare it with the closed form).
struct PeakLoopResult {
  int64_t macs = 0;      // multiply-adds issued
  int64_t checksum = 0;  // int8: sum of all int32 lanes; f32: sum of lanes rounded
};
using PeakLoopFn = PeakLoopResult (*)(int64_t iters, int8_t a, int8_t b);

struct PeakLoops {
  // Per trip: 8 independent 32-byte dots of bytes a (weights) and b; int32
  // lane sums, so checksum = trips * 8 * 32 * (a + q8_offset) * b, wrapped
  // per lane to int32 (keep trips small when checking it).
  PeakLoopFn int8_dot;
  int q8_offset;  // the strategy's unsigned offset of the weights (0 or 128)
  // Per trip: 12 independent vector FMAs acc += a * (b / 64) over lanes.
  PeakLoopFn f32_fma;
  // Per trip: 12 independent instructions of the ISA's widest int8
  // multiply-add of unsigned bytes (uint8_t)a by signed bytes b, summed per
  // lane (int16 lanes, wrapping, on AVX2; int32 on AVX-512). checksum = sum
  // of every lane of every chain, so without wrap or saturation it equals
  // macs * (uint8_t)a * b.
  PeakLoopFn int8_hw;
};
const PeakLoops* peak_loops(Isa isa);  // null for the scalar ISA

// Every thread of `pool` runs the loops for about `seconds`; the best of
// `reps` runs, summed over threads.
ComputePeak measure_compute_peak(ThreadPool& pool, Isa isa, double seconds = 0.1, int reps = 3);

}  // namespace tessera::kernels
