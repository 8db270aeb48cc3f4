// Element-wise and row-wise operations of a transformer layer, on f32
// activations. Each dispatches on `isa` to the scalar reference (Isa::kScalar)
// or a vector version (ops_avx2.cc, ops_avx512.cc). Vector versions agree
// with the reference within float rounding (rope and add_inplace exactly);
// each is a function of its row alone, so results never depend on the batch.
#pragma once

#include <cstdint>

#include "core/cpu.h"

namespace tessera::kernels {

// y = x / sqrt(mean(x^2) + eps) * weight, over one row of n.
void rmsnorm(const float* x, const float* weight, float* y, int64_t n, float eps, Isa isa);

// Rotary position embedding, in place, on n_heads heads of head_dim for one
// token at position `pos`. Only the first n_rot dims of each head rotate.
// Normal (GPT-J / llama) ordering rotates pairs (2i, 2i+1); NeoX ordering
// rotates (i, i + n_rot/2). Pair i turns by
//   theta_i = pos * freq_scale * base^(-2i/n_rot) / factor_i
// (factor_i = 1 without freq_factors), as ggml_rope_ext computes it. With
// YaRN (ext_factor != 0), pair i's angle mixes the scaled angle above with
// the unscaled one (freq_scale = 1) by ramp_i * ext_factor, where ramp_i is
// 1 below yarn_low, 0 above yarn_high and linear between (yarn_corr_dims()),
// and cos and sin are multiplied by attn_factor * (1 + 0.1 ln(1/freq_scale));
// without YaRN they are multiplied by attn_factor.
struct RopeParams {
  int64_t n_rot = 0;
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;
  bool neox = false;
  const float* freq_factors = nullptr;  // [n_rot / 2] divisors of theta_i (Llama 3's rope_freqs), or null
  float ext_factor = 0.0f;              // YaRN's extrapolation mix; 0: off
  float attn_factor = 1.0f;
  float yarn_low = 0.0f, yarn_high = 0.0f;  // YaRN's correction range, in rotary pairs
};

// YaRN's correction range for n_rot rotated dims of a model trained on
// n_ctx_orig positions: the pairs that turn more than beta_fast times over
// that context keep their angle, those that turn less than beta_slow times
// are interpolated (ggml_rope_yarn_corr_dims). out = {low, high}.
void yarn_corr_dims(int64_t n_rot, int64_t n_ctx_orig, float freq_base, float beta_fast, float beta_slow,
                    float out[2]);
void rope(float* x, int64_t n_heads, int64_t head_dim, int64_t pos, const RopeParams& p, Isa isa);

// cos and sin of theta_i for i < n_rot / 2 (computed in double, rounded to
// float): the rotation every rope() version applies.
void rope_angles(int64_t pos, const RopeParams& p, float* cos_out, float* sin_out);

// rope() with the angles of rope_angles() given (a forward pass computes
// them once per token and rotates every layer's q and k with them; the
// same bits as rope()). cos, sin: [n_rot / 2].
void rope_rotate(float* x, int64_t n_heads, int64_t head_dim, const RopeParams& p, const float* cos,
                 const float* sin, Isa isa);

// gate[i] = silu(gate[i]) * up[i]
void silu_mul(float* gate, const float* up, int64_t n, Isa isa);

// gate[i] = gelu(gate[i]) * up[i] with GELU's tanh approximation (Gemma's
// GeGLU): gelu(x) = x / 2 (1 + tanh(z)) = x / (1 + exp(-2 z)),
// z = sqrt(2 / pi) (x + 0.044715 x^3); every version computes the last form.
void gelu_tanh_mul(float* gate, const float* up, int64_t n, Isa isa);

// gpt-oss's clamped SwiGLU (ggml's swiglu_oai): with g = min(gate[i], 7) and
// u = clamp(up[i], -7, 7), gate[i] = g / (1 + exp(-1.702 g)) * (u + 1). A NaN
// is clamped as ggml's MIN / MAX clamp it (to the limit), in every version.
void swiglu_oai_mul(float* gate, const float* up, int64_t n, Isa isa);

// y[i] += x[i]
void add_inplace(float* y, const float* x, int64_t n, Isa isa);

// x = exp(x - max(x)) / sum, in place over one row of n >= 1.
void softmax(float* x, int64_t n, Isa isa);

// Index of the first largest element (NaNs are never chosen; 0 if all are
// NaN or -inf), for greedy sampling.
int64_t argmax(const float* x, int64_t n, Isa isa);

}  // namespace tessera::kernels
