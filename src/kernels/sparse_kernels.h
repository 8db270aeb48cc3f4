// The interface between the sparse layout (sparse.h, sparse.cc) and the
// kernels that multiply it (sparse_ref.cc, sparse_<isa>.cc): plain data and
// declarations only, so the per-ISA files can include it without emitting
// any inline function (docs/KERNELS.md, "ODR rule").
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "kernels/matmul_kernels.h"

namespace tessera::kernels {

inline constexpr int64_t kSparseBlock = 64;
// Rows per group (one stream; the kernels' row tile: ranges start on one).
inline constexpr int64_t kSparseGroupRows = 16;
// Inputs of at most this many tokens use the decode kernels (super-blocks
// expanded in registers); more are multiplied through dense packed tiles
// expanded a few row groups at a time (MatmulArgs::dense).
inline constexpr int64_t kSparseDecodeMaxTokens = 4;
// Rows expanded per dense chunk (8 packed groups of 8).
inline constexpr int64_t kSparseChunkRows = 64;

// A sparse tensor in memory (pointers into its bytes; layout in sparse.h).
struct SparseView {
  DType type = DType::kSpQ8_0;
  int64_t rows = 0, cols = 0;
  const uint64_t* group_start = nullptr;  // [groups + 1]
  const uint8_t* streams = nullptr;
  uint64_t stream_bytes = 0, kept = 0;
  size_t n_bytes = 0;
};
// Bytes of a super-block's masks (16 tiles) and scales (16 rows) in a
// group's stream.
inline constexpr size_t kSparseBlockHead = 16 * 8 + 16 * 2;

// The view of the sparse tensor at `data`, unchecked (the kernels' path:
// parse_sparse has checked it at load). Defined in sparse.cc.
SparseView sparse_view(const uint8_t* data);
// Super-blocks per row: cols / kSparseBlock; groups of 16 rows.
int64_t sparse_blocks(const SparseView& w);
int64_t sparse_groups(const SparseView& w);

// This thread's scratch of at least `bytes` bytes, 64-byte aligned (the
// dense chunks the kernels expand); valid until its next call on the thread.
uint8_t* sparse_scratch(size_t bytes);

// The range kernels of the sparse types (MatmulKernels::sparse_range):
// a.w is the tensor's bytes; rows [r0, r1) (r0 a multiple of kSparseGroupRows),
// tokens [t0, t1), activations as Q8_0's (block 32).
void sparse_range_ref(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1);
void sparse_range_avx2(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1);
// AVX-512 VBMI2's byte expansion where the CPU has it (sparse_avx512.cc),
// else the AVX2 kernels.
void sparse_range_avx512(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1);

}  // namespace tessera::kernels
