// The per-ISA table behind ops.h (plain function pointers; see
// matmul_kernels.h for why the per-ISA files exchange only POD).
#pragma once

#include <cstdint>

namespace tessera::kernels {

// GELU's tanh approximation: sqrt(2 / pi) and the cubic coefficient.
constexpr float kGeluSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;
// gpt-oss's clamped SwiGLU (ops.h, swiglu_oai_mul).
constexpr float kSwigluOaiAlpha = 1.702f;
constexpr float kSwigluOaiLimit = 7.0f;

struct OpsKernels {
  // inv_rms: 1 / sqrt(mean(x^2) + eps) as the reference computes it.
  void (*rmsnorm)(const float* x, const float* weight, float* y, int64_t n, float eps);
  // Rotates n_heads heads given rope_angles() output for half = n_rot / 2.
  void (*rope_apply)(float* x, int64_t n_heads, int64_t head_dim, int64_t half, bool neox, const float* cos,
                     const float* sin);
  void (*silu_mul)(float* gate, const float* up, int64_t n);
  void (*gelu_tanh_mul)(float* gate, const float* up, int64_t n);
  void (*swiglu_oai_mul)(float* gate, const float* up, int64_t n);
  void (*add_inplace)(float* y, const float* x, int64_t n);
  void (*softmax)(float* x, int64_t n);
  int64_t (*argmax)(const float* x, int64_t n);
};

const OpsKernels& ops_kernels_avx2();
const OpsKernels& ops_kernels_avx512();

}  // namespace tessera::kernels
