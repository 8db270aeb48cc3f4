// The scalar reference of the QMoE kernels (qmoe_kernels.h): the arithmetic
// every ISA reproduces bit for bit.
#include <cmath>

#include "core/fp16.h"
#include "kernels/qmoe_kernels.h"

namespace tessera::kernels {
namespace {

void rows_ref(const QmoeRowsArgs& a) {
  const QmoeView& w = *a.w;
  uint64_t k = a.code_begin;
  const uint64_t k_end = w.n_codes;
  for (int64_t r = a.row_begin; r < a.row_end; ++r) {
    const int64_t global = a.m * w.rows + r;
    const float lo = fp16_to_f32(w.scales[2 * global]), hi = fp16_to_f32(w.scales[2 * global + 1]);
    // The row's codewords, then each token over them.
    const uint64_t k0 = k;
    for (int64_t c = 0; c < w.cols && k < k_end; ++k) c += w.dict[w.codes[k]].length;
    for (int64_t t = 0; t < a.n_tokens; ++t) {
      const float* x = a.x + t * a.x_stride;
      float acc_lo[2][16] = {}, acc_hi[2][16] = {};
      int64_t c = 0;
      for (uint64_t i = k0; i < k; ++i) {
        const QmoeEntry& e = w.dict[w.codes[i]];
        const int set = static_cast<int>((i - k0) & 1);
        for (int j = 0; j < 16; ++j) {
          if (e.lo_mask >> j & 1) acc_lo[set][j] += x[c + j];
          if (e.hi_mask >> j & 1) acc_hi[set][j] += x[c + j];
        }
        c += e.length;
      }
      float sum_lo[16], sum_hi[16];
      for (int j = 0; j < 16; ++j) {
        sum_lo[j] = acc_lo[0][j] + acc_lo[1][j];
        sum_hi[j] = acc_hi[0][j] + acc_hi[1][j];
      }
      a.y[t * a.y_stride + r] = std::fma(lo, qmoe_tree16(sum_lo), hi * qmoe_tree16(sum_hi));
    }
  }
}

}  // namespace

const QmoeKernels& qmoe_kernels_ref() {
  static const QmoeKernels k{"scalar", &rows_ref};
  return k;
}

}  // namespace tessera::kernels
