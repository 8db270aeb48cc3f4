// Sparse weight matrices (issue 42): pruned rows stored as a bitmask of the
// weights kept and only their values, so that a decode step reads fewer
// bytes. Two custom GGUF tensor types (docs/FORMATS.md "SPRS"):
//   SP_Q8_0  kept values as int8 q, stored as the byte q + 128, one fp16
//            scale per 64 columns
//   SP_Q4_0  kept values as 4-bit q (w = d (q - 8)), the same scales
// Per 64 weights: an fp16 scale (2 bytes), a 64-bit mask (8 bytes), and
// popcount(mask) values (SP_Q4_0: two per byte, low nibble
// first, a super-block's values starting on a byte). At 50% sparsity SP_Q8_0
// is 42 bytes per 64 weights against Q8_0's 68 (0.62x), SP_Q4_0 26 against
// Q4_0's 36 (0.72x); N:M patterns (2:4, 4:8) are the same bytes as their
// indices would be (one bit a weight), so one format serves both.
//
// The tensor layout (GGUF ne = [cols, rows], cols a multiple of 64). Rows
// come in groups of 16, each group one stream read front to back (one
// sequential stream per 16 rows for the prefetchers). A group's 16 x 64
// super-block is stored as 16 tiles of 16 rows x 4 columns, tile j holding
// columns 4 j .. 4 j + 3, byte 4 r + i of the tile being row r's column
// 4 j + i: expanded, a tile is one 64-byte vector whose int32 lane r is row
// r's four weights, so an integer dot product against the input's four
// values (broadcast) leaves each row's sum in its own lane, with no
// horizontal reduction (the layout of the dense packed kernels, 16 rows
// wide). The layout:
//   0   char[4] "SPRS", u32 version (3), u64 n_bytes (all of it, header included)
//   16  u32 value type (8: Q8_0 values, 2: Q4_0 values), u32 block (64)
//   24  u64 rows, 32 u64 cols, 40 u64 stream_bytes, 48 u64 kept, 56 u64 0
//   64  group_start: groups + 1 u64 (groups = ceil(rows / 16)), group g's
//       stream at streams + group_start[g] (group_start[groups] = stream_bytes)
//   ..  streams: per group, per super-block b in order:
//         u64 mask[16]   tile j's mask: bit 4 r + i set when row 16 g + r,
//                        column 64 b + 4 j + i is kept
//         fp16 d[16]     row 16 g + r's scale for the super-block
//         values         tile 0's kept values in bit order, then tile 1's, ...
//       (rows past the last: nothing kept, d 0), then 64 zero bytes (kernels
//       load 64 bytes at a tile's values), zero bytes to a multiple of 8.
// Each 64-bit mask still covers 64 weights (16 rows x 4 columns): the bytes
// are those of a mask per row.
//
// Arithmetic: a sparse matrix multiplies exactly as the dense Q8_0 (Q4_0)
// matrix whose 32-blocks hold its values with zeros where pruned and the
// super-block's scale in both halves (kernels/matmul_kernels.h's contract:
// every ISA, batch size and thread count gives the same bits as the dense
// matrix's kernels). Decode (a few tokens) expands each super-block in
// registers; longer inputs expand a few row groups at a time into the dense
// packed layout and run the dense prompt tiles on them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "kernels/sparse_kernels.h"

namespace tessera::kernels {

inline constexpr uint32_t kSparseVersion = 3;
inline constexpr size_t kSparseHeaderBytes = 64;
inline constexpr size_t kSparseValuePad = 64;

inline bool is_sparse(DType t) { return t == DType::kSpQ8_0 || t == DType::kSpQ4_0; }
// The dense type whose kernels a sparse type's arithmetic follows.
inline DType sparse_dense_type(DType t) { return t == DType::kSpQ4_0 ? DType::kQ4_0 : DType::kQ8_0; }

// Bytes a super-block with `kept` values stores them in.
inline size_t sparse_block_value_bytes(DType t, int kept) {
  return t == DType::kSpQ4_0 ? static_cast<size_t>(kept + 1) / 2 : static_cast<size_t>(kept);
}

// The bytes of a sparse tensor at `data` (at most `avail`), checked: header,
// type, shape (rows x cols), sizes, every row's values exactly the bytes its
// masks need, the value padding zero, every scale finite. Throws
// Error(kCorruptFile) naming `what`.
SparseView parse_sparse(const uint8_t* data, size_t avail, int64_t cols, int64_t rows, const char* what);

// Byte size from the header (the first 16 bytes), or 0 when `data` does not
// start with the magic.
uint64_t sparse_size(const uint8_t* data, size_t avail);

// Encodes w ([rows, cols] f32, cols a multiple of 64): the nonzero weights
// are kept, each super-block's scale fitted to its kept values (SP_Q8_0:
// d = amax / 127, q = round(w / d); SP_Q4_0: Q4_0's d = max / -8 with the
// signed max). A kept weight that rounds to 0 is stored as a value 0.
std::vector<uint8_t> encode_sparse(DType type, const float* w, int64_t rows, int64_t cols);

// Rows [r0, r0 + n_rows) and columns [c0, c0 + n_cols) of w as a sparse
// tensor of their own, the same masks, scales and values (a tensor-parallel
// rank's part): r0 a multiple of 16 and n_rows too unless the part ends at
// the last row; c0 and n_cols multiples of 64. Throws kInvalidArgument.
std::vector<uint8_t> sparse_part(const SparseView& w, int64_t r0, int64_t n_rows, int64_t c0, int64_t n_cols);

// Row r's integer values (SP_Q8_0: q, SP_Q4_0: q - 8), 0 where pruned
// (cols values), decoded one by one from the layout.
void sparse_row_levels(const SparseView& w, int64_t r, int8_t* out);
// Row r's masks and fp16 scales, one per super-block.
std::vector<uint64_t> sparse_row_masks(const SparseView& w, int64_t r);
std::vector<uint16_t> sparse_row_scales(const SparseView& w, int64_t r);

// Row r as floats (cols values): d q where kept, 0 elsewhere.
void sparse_dequantize_row(const SparseView& w, int64_t r, float* out);

// Row r as the dense Q8_0 (SP_Q8_0) or Q4_0 (SP_Q4_0) row the kernels
// multiply it as (row_bytes(sparse_dense_type, cols) bytes).
void sparse_dense_row(const SparseView& w, int64_t r, uint8_t* out);

}  // namespace tessera::kernels
