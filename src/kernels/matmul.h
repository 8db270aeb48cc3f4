// Matrix multiplication of activations by a weight matrix stored as GGUF
// stores it (one contiguous row per output feature).
//
//   y[t, r] = sum_k x[t, k] * W[r, k]    t < n_tokens, r < W.rows, k < W.cols
//
// Batch invariance: the arithmetic of y[t, r] (order of every rounding) is
// the same whatever n_tokens is, whatever the other rows of x hold, and
// whatever the thread count: work is split across output rows and tokens,
// never across k. The engine's guarantee that a request's output does not
// depend on its batch rests on this. For the quantized weight types the
// result is moreover the same on every ISA (see kernels/matmul_kernels.h for
// the exact arithmetic); docs/KERNELS.md describes the kernels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "core/aligned_buffer.h"
#include "core/dtype.h"
#include "kernels/kernel_context.h"
#include "kernels/w8a8.h"

namespace tessera::kernels {

struct WeightView {
  DType type = DType::kF32;
  const uint8_t* data = nullptr;
  int64_t rows = 0;      // output features (N)
  int64_t cols = 0;      // input features (K), a multiple of the type's block size
  size_t row_bytes = 0;  // stride between rows
  // Any-shape weights (tessera quantize, docs/QUANTIZATION.md): rows stored
  // with zero columns appended up to a whole block. x then has only
  // `x_cols` columns; matmul widens it with zeros. 0: x has `cols`.
  int64_t x_cols = 0;
  // Variable-size types (SP_Q8_0, SP_Q4_0: kernels/sparse.h, whose
  // row_bytes is 0): the tensor's bytes.
  size_t n_bytes = 0;
  int64_t input_cols() const { return x_cols > 0 ? x_cols : cols; }
};

// Whether matmul() handles weights of this type: F32, F16, BF16, Q8_0, Q4_0,
// Q4_K, Q6_K.
bool matmul_supports(DType type);

// x: [n_tokens, x_stride] f32 (first W.cols used); y: [n_tokens, y_stride]
// f32 (first W.rows written). Runs on ctx.pool (null: the calling thread)
// with ctx.isa's kernels; quantized types quantize x into ctx.ws (which then
// only grows: no allocation once it has reached the largest call; null: a
// temporary is allocated per call).
void matmul(const WeightView& w, const float* x, int64_t x_stride, int64_t n_tokens, float* y,
            int64_t y_stride, const KernelContext& ctx);

// A weight matrix prepared once (at model load) for faster kernels: Q8_0,
// Q4_0, Q4_K and Q6_K rows repacked 8 at a time so one vector load feeds 8 outputs
// (layout in kernels/matmul_kernels.h). `view` keeps pointing at the
// original data, which stays valid and usable; other types are not copied.
// matmul() on a PreparedWeight gives the same bits as on its view.
struct PreparedWeight {
  WeightView view;
  AlignedBuffer<uint8_t> packed;  // empty: no packed layout for this type
  // Set by prepare_weight_w8a8: matmul() runs the W8A8 product of these
  // codes (kernels/w8a8.h) instead of the view's type.
  std::shared_ptr<const W8Matrix> w8;
};
PreparedWeight prepare_weight(const WeightView& w);
// Whether matmul() of p on `isa` reads only its packed copy (never the
// view's bytes again): then a copy the view points into may be freed.
bool reads_packed_only(const PreparedWeight& p, Isa isa);

// Dynamic W8A8 at load (vLLM's on-the-fly quantization, for SmoothQuant's
// format without its calibration): the weight's values, per-output-channel
// int8; matmul() then quantizes each token's activations to int8 and runs
// the integer product. Types dequantize_row() cannot read, and any-shape
// weights, are prepared as prepare_weight() does.
PreparedWeight prepare_weight_w8a8(const WeightView& w);
// W4A8 likewise (QuaRot's W4 with int8 activations): 4-bit codes per output
// channel with a clipped scale (kernels::quantize_rows_w4).
PreparedWeight prepare_weight_w4a8(const WeightView& w);
// Columns [c0, c0 + n) of w in W8A8 (bits 8) or W4A8 (bits 4), each row's
// scale still its whole row's: a tensor-parallel rank's part of a product
// split by columns holds one process's codes (with matmul_w8a8's floors,
// its activations too). The view keeps the part's shape and points
// nowhere. w8 is empty where prepare_weight_w8a8 would not quantize w.
PreparedWeight prepare_weight_int_cols(const WeightView& w, int bits, int64_t c0, int64_t n);

void matmul(const PreparedWeight& w, const float* x, int64_t x_stride, int64_t n_tokens, float* y,
            int64_t y_stride, const KernelContext& ctx);

// The product of gathered rows of w (contextual sparsity, model/ffn_sparsity.h):
// y[t, k] = sum_c x[t, c] * W[rows[k], c] for k < rows.size(), bit-identical
// to column rows[k] of matmul(w, ...) (on the same ISA). Not for sparse types.
void matmul_rows(const WeightView& w, std::span<const int32_t> rows, const float* x, int64_t x_stride,
                 int64_t n_tokens, float* y, int64_t y_stride, const KernelContext& ctx);

// Several products of one input (Q, K and V of a layer; gate and up): the
// activation is quantized once and one thread-pool dispatch covers the rows
// of every weight. Each output is bit-identical to matmul() of its weight
// alone. Weights of different types or widths fall back to one matmul each.
struct MatmulOutput {
  const PreparedWeight* w;
  float* y;  // [n_tokens, y_stride]
  int64_t y_stride;
};
constexpr size_t kMaxSharedInput = 4;
void matmul_shared_input(std::span<const MatmulOutput> outs, const float* x, int64_t x_stride, int64_t n_tokens,
                         const KernelContext& ctx);

// Products of several weights, each over its own input rows (a mixture's
// experts, each over the tokens routed to it): one thread-pool dispatch
// quantizes every input and then covers the row tiles of every weight. Jobs
// whose input is the same (pointer, stride and token count: an expert's
// gate and up) share its quantized rows. Each output is bit-identical to
// matmul() of its weight on its input alone. Weights of different types or
// widths, or padded ones, fall back to one matmul each.
struct GroupedMatmul {
  const PreparedWeight* w;
  const float* x;  // [n_tokens, x_stride]
  int64_t x_stride;
  int64_t n_tokens;
  float* y;  // [n_tokens, y_stride]
  int64_t y_stride;
};
void matmul_grouped(std::span<const GroupedMatmul> jobs, const KernelContext& ctx);

// The same with an explicit kernel table (tests and benchmarks use this to
// run a table that is not the one of an Isa, e.g. the emulated-VNNI one).
struct MatmulKernels;
const MatmulKernels& matmul_kernels(Isa isa);
// Its name: "scalar", "avx2", "avx512", or "amx" (AVX-512 with AMX prompt tiles).
const char* matmul_kernels_name(Isa isa);
void matmul_with(const MatmulKernels& kernels, const WeightView& w, const float* x, int64_t x_stride,
                 int64_t n_tokens, float* y, int64_t y_stride, const KernelContext& ctx);
void matmul_rows_with(const MatmulKernels& kernels, const WeightView& w, std::span<const int32_t> rows,
                      const float* x, int64_t x_stride, int64_t n_tokens, float* y, int64_t y_stride,
                      const KernelContext& ctx);
void matmul_with(const MatmulKernels& kernels, const PreparedWeight& w, const float* x, int64_t x_stride,
                 int64_t n_tokens, float* y, int64_t y_stride, const KernelContext& ctx);

}  // namespace tessera::kernels
