// Matrix multiplication of activations by a weight matrix stored as GGUF
// stores it (one contiguous row per output feature).
//
//   y[t, r] = sum_k x[t, k] * W[r, k]    t < n_tokens, r < W.rows, k < W.cols
//
// Batch invariance: the arithmetic of y[t, r] (order of every rounding) is
// the same whatever n_tokens is, whatever the other rows of x hold, and
// whatever the thread count: work is split across output rows and tokens,
// never across k. The engine's guarantee that a request's output does not
// depend on its batch rests on this.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "kernels/kernel_context.h"

namespace tessera::kernels {

struct WeightView {
  DType type = DType::kF32;
  const uint8_t* data = nullptr;
  int64_t rows = 0;      // output features (N)
  int64_t cols = 0;      // input features (K), a multiple of the type's block size
  size_t row_bytes = 0;  // stride between rows
};

// Whether matmul() handles weights of this type.
bool matmul_supports(DType type);

// x: [n_tokens, x_stride] f32 (first W.cols used); y: [n_tokens, y_stride]
// f32 (first W.rows written).
void matmul(const WeightView& w, const float* x, int64_t x_stride, int64_t n_tokens, float* y,
            int64_t y_stride, const KernelContext& ctx);

}  // namespace tessera::kernels
