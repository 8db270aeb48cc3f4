// What a kernel call needs besides its operands: the threads to run on, the
// instruction set to use, and scratch memory. Passed explicitly (no globals)
// so tests can run any ISA and thread count side by side.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/cpu.h"
#include "core/thread_pool.h"

namespace tessera::kernels {

// Scratch for one caller: activations quantized on the fly, per-thread
// partials. Grows to the largest call and then stays: no allocation on the
// steady-state hot path. Not shared by callers running concurrently.
struct Workspace {
  AlignedBuffer<uint8_t> act;  // quantized activations
  AlignedBuffer<float> tmp;    // per-thread scratch
  AlignedBuffer<float> padded_x;  // [n_tokens, cols]: x widened for weights stored with padding
  AlignedBuffer<float> attn_mass;        // attention mass capture (kernels/attention.cc)
  AlignedBuffer<int64_t> attn_mass_sum;  // its per-unit sums
  AlignedBuffer<float> attn_q;           // queries rotated for a --kv-hadamard cache
  AlignedBuffer<float> act_scale;        // W8A8 products: each token's activation scale (kernels/w8a8.cc)
  // QMoE products (kernels/qmoe.cc): each job's padded input offset and
  // the (job, row group) work units.
  std::vector<size_t> qmoe_x_at;
  std::vector<std::pair<size_t, int64_t>> qmoe_units;
  // Sparse-input products (kernels/sparse_input.cc): the nonzero inputs,
  // their quantized values and each thread's sums; the padded outputs.
  AlignedBuffer<int32_t> sparse_index;
  AlignedBuffer<float> sparse_y;
};

struct KernelContext {
  ThreadPool* pool = nullptr;
  Isa isa = Isa::kScalar;
  Workspace* ws = nullptr;
  // Tests and the cost-model measurement: use the pool even below the
  // thresholds of parallel_pool().
  bool force_parallel = false;
};

// Cost model of a pool dispatch. Handing a call to a spinning worker and
// waiting for it costs about 1 us here (an empty run() on 2 threads: 0.2-0.9
// us on a quiet machine, tens of us while other programs run), plus the
// shared chunk counters and the caches the worker has to warm; a call pays
// for that only when it is long enough. Work is counted in multiply-adds;
// each threshold is about where two threads (fixed pool, dispatch forced)
// stopped being slower than one (median of 3 quiet runs of decode calls on
// cache-resident data, 2-vCPU Zen 3; docs/BENCHMARKS.md "Thread
// contention"), rounded up to a power of two. Weights streamed from memory
// gain from a second thread sooner, so this leans towards the caller alone.
// Below a threshold the caller runs the call alone: no hand-off, and no
// wait for a worker the OS has descheduled. Single-thread rates measured:
// int8 decode kernels 30-40 multiply-adds/ns, f32 10-15, attention 10 at
// head_dim 64 and 4 at head_dim 8.
constexpr int64_t kMinParallelQuantMatmulMacs = 256 * 1024;  // rows * cols * tokens, int8 kernels
constexpr int64_t kMinParallelFloatMatmulMacs = 64 * 1024;   // rows * cols * tokens, F32/F16/BF16
constexpr int64_t kMinParallelAttentionMacs = 64 * 1024;     // query rows * heads * keys * 2 * head_dim

// The pool a call of `work` multiply-adds runs on (null: the caller alone).
inline ThreadPool* parallel_pool(const KernelContext& ctx, int64_t work, int64_t threshold) {
  if (ctx.pool == nullptr || ctx.pool->size() == 1) return nullptr;
  return ctx.force_parallel || work >= threshold ? ctx.pool : nullptr;
}

}  // namespace tessera::kernels
