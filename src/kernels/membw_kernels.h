// The read loops of the bandwidth probe (membw.h), one per ISA: sum every
// 64-bit word of [p, p + words) (wrapping), so the loads cannot be dropped
// and a test can check the sum against the scalar loop's.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/cpu.h"

namespace tessera::kernels {

using ReadSumFn = uint64_t (*)(const uint64_t* p, size_t words);

uint64_t read_sum_scalar(const uint64_t* p, size_t words);
uint64_t read_sum_avx2(const uint64_t* p, size_t words);
uint64_t read_sum_avx512(const uint64_t* p, size_t words);

// The loop for `isa` (the scalar one for Isa::kScalar).
ReadSumFn read_sum_fn(Isa isa);

}  // namespace tessera::kernels
