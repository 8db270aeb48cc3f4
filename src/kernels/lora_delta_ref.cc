// Scalar reference of the LoRA delta kernels (lora_delta_kernels.h): each
// output summed in increasing order with a separate multiply and add, as
// written in the definition; the vector kernels are checked against it.
#include <algorithm>

#include "core/fp16.h"
#include "kernels/blocks.h"
#include "kernels/lora_delta_kernels.h"

namespace tessera::kernels {
namespace {

// Element j of row k of a [*][n] matrix stored in t (lora_delta.h).
float lora_ref_weight(const void* w, LoraWeightType t, int64_t n, int64_t k, int64_t j) {
  switch (t) {
    case LoraWeightType::kF32: return static_cast<const float*>(w)[k * n + j];
    case LoraWeightType::kF16: return fp16_to_f32(static_cast<const fp16_t*>(w)[k * n + j]);
    case LoraWeightType::kQ8_0: {
      const BlockQ8_0& b = static_cast<const BlockQ8_0*>(w)[(k * n + j) / kQK];
      return fp16_to_f32(b.d) * static_cast<float>(b.qs[j % kQK]);
    }
  }
  return 0.0f;
}

template <class T>
T* lora_ref_row(T* base, int64_t stride, const int32_t* rows, int64_t i) {
  return base + (rows != nullptr ? rows[i] : i) * stride;
}

void lora_shrink_ref(const LoraShrinkArgs& p) {
  for (int64_t i = 0; i < p.n; ++i) {
    const float* x = lora_ref_row(p.x, p.x_stride, p.rows, i);
    for (int64_t k = 0; k < p.rank; ++k) {
      float acc = 0.0f;
      for (int64_t j = 0; j < p.in; ++j) acc += lora_ref_weight(p.a, p.type, p.in, k, j) * x[j];
      p.ax[i * p.rank + k] = acc * p.scale;
    }
  }
}

// Along out in chunks, rank by rank over B's contiguous rows (a column
// walk down B would touch `rank` lines `out` apart per output); each output
// still sums its ranks in increasing order before y is added.
void lora_expand_ref(const LoraExpandArgs& p) {
  constexpr int64_t kChunk = 256;
  float acc[kChunk];
  for (int64_t i = 0; i < p.n; ++i) {
    float* y = lora_ref_row(p.y, p.y_stride, p.rows, i);
    const float* ax = p.ax + i * p.rank;
    for (int64_t o0 = 0; o0 < p.out; o0 += kChunk) {
      const int64_t w = std::min(kChunk, p.out - o0);
      std::fill_n(acc, w, 0.0f);
      for (int64_t k = 0; k < p.rank; ++k) {
        for (int64_t o = 0; o < w; ++o) acc[o] += ax[k] * lora_ref_weight(p.b, p.type, p.out, k, o0 + o);
      }
      for (int64_t o = 0; o < w; ++o) y[o0 + o] += acc[o];
    }
  }
}

constexpr LoraKernels kLoraRefTable = {"scalar", lora_shrink_ref, lora_expand_ref};

}  // namespace

const LoraKernels& lora_kernels_ref() { return kLoraRefTable; }

}  // namespace tessera::kernels
