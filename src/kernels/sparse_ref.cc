// The scalar reference of the sparse kernels: each row's values decoded one
// by one from the layout (sparse.cc), then matmul_kernels.h's contract for
// Q8_0 / Q4_0 with the super-block's scale in both of its 32-blocks. The
// vector kernels must agree with it bit for bit.
#include <cmath>
#include <vector>

#include "core/fp16.h"
#include "kernels/sparse.h"

namespace tessera::kernels {

void sparse_range_ref(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  const SparseView w = sparse_view(a.w);
  std::vector<int8_t> q(static_cast<size_t>(w.cols));
  for (int64_t r = r0; r < r1; ++r) {
    sparse_row_levels(w, r, q.data());
    const std::vector<uint16_t> d = sparse_row_scales(w, r);
    for (int64_t t = t0; t < t1; ++t) {
      const uint8_t* row = a.act + static_cast<size_t>(t) * a.act_layout.row_bytes;
      const auto* xq = reinterpret_cast<const int8_t*>(row);
      const auto* dx = reinterpret_cast<const float*>(row + a.act_layout.d_offset);
      float acc = 0.0f;
      for (int64_t b = 0; b < w.cols / 32; ++b) {
        int isum = 0;
        for (int64_t i = 32 * b; i < 32 * b + 32; ++i) isum += q[static_cast<size_t>(i)] * xq[i];
        acc = std::fma(static_cast<float>(isum), fp16_to_f32(d[static_cast<size_t>(b / 2)]) * dx[b], acc);
      }
      a.y[t * a.y_stride + r] = acc;
    }
  }
}

}  // namespace tessera::kernels
