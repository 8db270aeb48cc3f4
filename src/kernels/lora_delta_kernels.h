// The interface between lora_delta.cc (checks, dispatch) and the LoRA delta
// kernels: the scalar reference (lora_delta_ref.cc) and one file per ISA
// (lora_delta_avx2.cc, lora_delta_avx512.cc). Plain data and function
// pointers only (see docs/KERNELS.md, "ODR rule").
//
// Arithmetic, per output element (the vector kernels' tiles never change it,
// so a token's delta is the same whatever other tokens share its call):
//  * shrink: lane l of one accumulator sums A[k, j] * x[j] for j = l mod W
//    by fused multiply-add in increasing j (masked tail: zeros), then the
//    ISA's fixed horizontal sum, then times `scale`. The reference sums in
//    increasing j with a separate multiply and add.
//  * expand: acc = sum over k in increasing order of ax[k] * B[k, o] by
//    fused multiply-add from +0 (no lane crosses another: the same bits for
//    every vector width), then y = y + acc. The reference: separate multiply
//    and add.
// So vector and reference results agree within float rounding only.
//
// Weights stored in F16 or Q8_0 (LoraWeightType) are read as the floats
// they stand for (F16 converted exactly; Q8_0 as d * q, one multiply of an
// 11-bit by an 8-bit mantissa: exact), then the arithmetic above: a kernel
// over compact weights gives the bits of the same kernel over their F32
// values.
#pragma once

#include <cstdint>

#include "kernels/lora_delta.h"

namespace tessera::kernels {

// Token i of a call reads (writes) row rows[i] of x (y), or row i when
// rows is null.
struct LoraShrinkArgs {
  const void* a = nullptr;  // [rank][in] in `type`
  LoraWeightType type = LoraWeightType::kF32;
  int64_t rank = 0, in = 0;
  float scale = 1.0f;
  const float* x = nullptr;  // [*, x_stride]
  int64_t x_stride = 0;
  const int32_t* rows = nullptr;  // [n] or null
  int64_t n = 0;
  float* ax = nullptr;  // [n][rank]: ax[i][k] = scale * A[k, :] . x[row(i), :]
};

struct LoraExpandArgs {
  const void* b = nullptr;  // [rank][out] in `type`
  LoraWeightType type = LoraWeightType::kF32;
  int64_t rank = 0, out = 0;
  const float* ax = nullptr;  // [n][rank]
  float* y = nullptr;         // [*, y_stride]: y[row(i), o] += sum_k ax[i][k] * B[k, o]
  int64_t y_stride = 0;
  const int32_t* rows = nullptr;  // [n] or null
  int64_t n = 0;
};

struct LoraKernels {
  const char* name;
  void (*shrink)(const LoraShrinkArgs& a);
  void (*expand)(const LoraExpandArgs& a);
};

// Call the ISA tables only where the CPU has the ISA.
const LoraKernels& lora_kernels_ref();
const LoraKernels& lora_kernels_avx2();
const LoraKernels& lora_kernels_avx512();

}  // namespace tessera::kernels
