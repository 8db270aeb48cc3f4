// QMoE (Frantar & Alistarh 2023): expert matrices of ternary weights
// {lo_r, 0, hi_r} per row r, entropy-coded with a dictionary of fixed-length
// codewords, multiplied without ever being decompressed in memory: each
// 8-bit codeword names a dictionary entry of up to 16 consecutive weights as
// two 16-bit masks (which of them are lo_r, which hi_r), and the kernel adds
// the inputs under each mask into lane accumulators:
//   y_r = lo_r * sum_{c in L_r} x_c + hi_r * sum_{c in H_r} x_c.
// The tensor layout (a custom GGUF tensor type, docs/FORMATS.md "QMOE"):
//   0   char[4] "QMOE", u32 version (1), u64 n_bytes (all of it, header included)
//   16  u32 group_rows (32), u32 reserved (0), u64 n_codes
//   32  dictionary: 256 x {u16 lo_mask, u16 hi_mask, u8 length (1..16), u8[3] 0}
//   2080 scales: n_rows x {f16 lo, f16 hi}        (n_rows = rows x matrices)
//   ...  group starts: ceil(n_rows / 32) + 1 x u32 (index of a group's first codeword; the last: n_codes)
//   ...  codes: n_codes x u8, zero bytes up to a multiple of 8.
// A row's codewords follow the previous row's and cover its columns in
// order; the last one may run past the row's end with zero weights only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "kernels/kernel_context.h"

namespace tessera::kernels {

inline constexpr uint32_t kQmoeVersion = 1;
inline constexpr int64_t kQmoeGroupRows = 32;
inline constexpr int kQmoeMaxLength = 16;  // weights per codeword at most
inline constexpr size_t kQmoeHeaderBytes = 32;

struct QmoeEntry {
  uint16_t lo_mask = 0, hi_mask = 0;
  uint8_t length = 0;
  uint8_t pad[3] = {0, 0, 0};
};
static_assert(sizeof(QmoeEntry) == 8);

// A QMOE tensor in memory (pointers into its bytes): `matrices` matrices of
// [rows, cols], row-major, matrix m's row r being row m * rows + r.
struct QmoeView {
  int64_t cols = 0, rows = 0, matrices = 0;
  const QmoeEntry* dict = nullptr;  // [256]
  const uint16_t* scales = nullptr; // [rows * matrices][2] f16 lo, hi
  const uint32_t* group_start = nullptr;  // [groups + 1]
  const uint8_t* codes = nullptr;   // [n_codes]
  uint64_t n_codes = 0;
  size_t n_bytes = 0;
  int64_t n_rows() const { return rows * matrices; }
  int64_t groups() const { return (n_rows() + kQmoeGroupRows - 1) / kQmoeGroupRows; }
};

// The bytes of a QMOE tensor at `data` (at most `avail` of them), checked:
// header, sizes, group starts in order and within the codes, every
// dictionary entry 1..16 long with disjoint masks inside its length. Throws
// Error(kCorruptFile) naming `what`. Each group's codewords are checked to
// cover its rows exactly when `check_codes` (a pass over all codes).
QmoeView parse_qmoe(const uint8_t* data, size_t avail, int64_t cols, int64_t rows, int64_t matrices,
                    const char* what, bool check_codes = true);

// Byte size of a QMOE tensor from its header (the first 16 bytes), or 0 when
// `data` does not start with the QMOE magic.
uint64_t qmoe_size(const uint8_t* data, size_t avail);

// y[t][r] for rows [0, rows) of matrix `m` (t < n_tokens): x [n_tokens,
// x_stride] f32 with cols used; y [n_tokens, y_stride]. Parallel over row
// groups on ctx.pool. Every ISA gives the same bits (the sums' order is
// fixed: lane j of a codeword adds into accumulator lane j, then a fixed tree
// (lanes i + i+8, i + i+4, i + i+2, 0 + 1), then y = fma(lo, sum_lo, hi * sum_hi)).
void qmoe_matmul(const QmoeView& w, int64_t m, const float* x, int64_t x_stride, int64_t n_tokens, float* y,
                 int64_t y_stride, const KernelContext& ctx);

// Several (matrix, input, output) products of one QMOE tensor (a mixture's
// chosen experts): one pool dispatch over every (product, row group).
struct QmoeJob {
  const QmoeView* w;
  int64_t m;
  const float* x;
  int64_t x_stride, n_tokens;
  float* y;
  int64_t y_stride;
};
void qmoe_matmul_grouped(std::span<const QmoeJob> jobs, const KernelContext& ctx);

// Dequantized row r of matrix m (cols values): lo, 0 or hi.
void qmoe_dequantize_row(const QmoeView& w, int64_t m, int64_t r, float* out);

}  // namespace tessera::kernels
