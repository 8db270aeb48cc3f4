// The scalar reference of the sparse-input kernels: each output column by
// the contract of sparse_input_kernels.h, one token at a time, the integer
// sum formed directly as sum(hq * q). The vector kernels must agree with it
// bit for bit.
#pragma GCC optimize("fp-contract=off")
#include <cmath>

#include "core/fp16.h"
#include "kernels/sparse_input_kernels.h"

namespace tessera::kernels {
namespace {

void run_ref(const SparseInputArgs& a, int64_t j0, int64_t j1) {
  for (int64_t t = 0; t < a.n_tokens; ++t) {
    const float* dx = a.dx + t * a.dx_stride;
    for (int64_t j = j0; j < j1; ++j) {
      float acc = 0.0f;
      for (int64_t b = 0; b < a.n_blocks; ++b) {
        const int64_t g = a.blocks[b];
        int32_t isum = 0;
        for (int64_t grp = a.gstart[b]; grp < a.gstart[b + 1]; ++grp) {
          const uint32_t packed = static_cast<uint32_t>(a.hq4[t * a.n_groups + grp]);
          for (int r = 0; r < 4; ++r) {
            const int32_t hq = static_cast<int8_t>(static_cast<uint8_t>(packed >> (8 * r)));
            const int32_t q = static_cast<int32_t>(a.u[static_cast<int64_t>(a.rows[4 * grp + r]) * a.stride + j]) - 128;
            isum += hq * q;
          }
        }
        const float s = fp16_to_f32(a.d[g * a.stride + j]) * dx[g];
        acc = std::fma(static_cast<float>(isum), s, acc);
      }
      a.y[t * a.y_stride + j] = acc;
    }
  }
}

constexpr SparseInputKernels kRef = {"scalar", run_ref};

}  // namespace

const SparseInputKernels& sparse_input_kernels_ref() { return kRef; }

}  // namespace tessera::kernels
