// What a kernel call needs besides its operands: the threads to run on, the
// instruction set to use, and scratch memory. Passed explicitly (no globals)
// so tests can run any ISA and thread count side by side.
#pragma once

#include <cstdint>

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
};

struct KernelContext {
  ThreadPool* pool = nullptr;
  Isa isa = Isa::kScalar;
  Workspace* ws = nullptr;
};

}  // namespace tessera::kernels
