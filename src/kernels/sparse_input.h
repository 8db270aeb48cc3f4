// A Q8_0 matrix times inputs of which few columns are nonzero, reading only
// those columns' weights: contextual sparsity's FFN down projection
// (model/ffn_sparsity.h), where a token keeps a fraction of the FFN's
// neurons. W [out, in] is stored transposed (one contiguous row of `out`
// bytes per input column, the block scales as a [in / 32, out] fp16
// table), built at load from the Q8_0 rows without any rounding, so
//
//   sparse_input_matmul(transpose_q8_0(W), x) == matmul(W, x)   bit for bit
//
// on every ISA (the arithmetic in kernels/sparse_input_kernels.h). A zero
// input column costs nothing; a step with many tokens is better off with
// the dense product (the model decides).
#pragma once

#include <cstdint>
#include <memory>

#include "core/aligned_buffer.h"
#include "kernels/kernel_context.h"
#include "kernels/matmul.h"
#include "kernels/sparse_input_kernels.h"

namespace tessera::kernels {

struct TransposedQ8_0 {
  int64_t out = 0, in = 0;  // W's rows and columns
  int64_t stride = 0;       // out rounded up to 64
  // [in][stride]: W[j, i]'s value + 128 at i * stride + j. In 2 MiB pages
  // where the kernel allows (transparent huge pages): a step reads short
  // segments of many rows, one TLB entry per row otherwise.
  std::shared_ptr<uint8_t> u;
  AlignedBuffer<uint16_t> d;   // [in / 32][stride] fp16
  bool empty() const { return in == 0; }
};

// W must be Q8_0 (rows contiguous, no padding columns).
TransposedQ8_0 transpose_q8_0(const WeightView& w);

// y[t, j] = sum_i x[t, i] * W[j, i] for t < n_tokens <= kSparseInputMaxTokens
// (sparse_input_kernels.h), j < out. Runs on ctx.pool; the workspace keeps
// the quantized input and the list of nonzero columns.
void sparse_input_matmul(const TransposedQ8_0& w, const float* x, int64_t x_stride, int64_t n_tokens, float* y,
                         int64_t y_stride, const KernelContext& ctx);

void sparse_input_matmul_with(const SparseInputKernels& k, const TransposedQ8_0& w, const float* x,
                              int64_t x_stride, int64_t n_tokens, float* y, int64_t y_stride,
                              const KernelContext& ctx);

}  // namespace tessera::kernels
