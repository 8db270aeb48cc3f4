#include "kernels/matmul.h"

#include "core/error.h"
#include "kernels/quant.h"

namespace tessera::kernels {

bool matmul_supports(DType type) { return can_dequantize(type); }

// Reference path: dequantize each weight row once, dot it with every token.
// The dot is a plain left-to-right float sum, so it does not depend on the
// batch or the thread count.
void matmul(const WeightView& w, const float* x, int64_t x_stride, int64_t n_tokens, float* y,
            int64_t y_stride, const KernelContext& ctx) {
  TESSERA_CHECK(matmul_supports(w.type), kInvalidArgument, "matmul: unsupported weight type {}",
                dtype_name(w.type));
  const int64_t K = w.cols;
  ctx.pool->run([&](int tid, int nth) {
    const int64_t r0 = w.rows * tid / nth, r1 = w.rows * (tid + 1) / nth;
    AlignedBuffer<float> row(static_cast<size_t>(K));
    for (int64_t r = r0; r < r1; ++r) {
      dequantize_row(w.type, w.data + static_cast<size_t>(r) * w.row_bytes, row.data(), K);
      for (int64_t t = 0; t < n_tokens; ++t) {
        const float* xt = x + t * x_stride;
        float acc = 0.0f;
        for (int64_t k = 0; k < K; ++k) acc += row[k] * xt[k];
        y[t * y_stride + r] = acc;
      }
    }
  });
}

}  // namespace tessera::kernels
