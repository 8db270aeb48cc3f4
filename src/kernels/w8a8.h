// W8A8 matrix products (SmoothQuant, issue 36): int8 weights with one scale
// per output channel, int8 activations with one scale per token, an int32
// dot over the whole row and one float step per output (the arithmetic in
// kernels/w8a8_kernels.h). Per-block formats (Q8_0) pay a convert, a scale
// and an FMA per 32 values beside the integer dots; this pays them once per
// output, so prompt processing can run at the int8 multiply-add peak.
//
// Activations are quantized per token, symmetric: sx = max|x| / 127,
// a = nearbyint(x / sx) (ties to even) clamped to [-127, 127]; a NaN becomes
// 0. Outliers in a few input channels cost every channel its precision:
// SmoothQuant moves them into the weights first (quant/, issue 36).
#pragma once

#include <cstdint>

#include "core/aligned_buffer.h"
#include "kernels/kernel_context.h"
#include "kernels/w8a8_kernels.h"

namespace tessera::kernels {

// W4A8 (QuaRot's W4 with int8 activations) is the same product over 4-bit
// codes q in [-8, 7] (bits 4): they are stored as nibbles (W4UnpackFn's
// layout, half the bytes) and each unit of the product unpacks its row
// groups to int8 before the W8A8 kernel runs on them, so both give the
// bits of the integer arithmetic above.
struct W8Matrix {
  int64_t rows = 0, cols = 0;
  int64_t cols4 = 0;   // cols rounded up to 4, / 4
  int64_t groups = 0;  // rows rounded up to 16, / 16
  int bits = 8;
  AlignedBuffer<int8_t> q;        // W8A8Args::q's layout (bits 8)
  AlignedBuffer<uint8_t> nib;     // [groups][(cols4 + 1) / 2][16][4] (bits 4)
  AlignedBuffer<float> sw;        // [groups * 16]
  AlignedBuffer<int32_t> wsum128; // [groups * 16]
};

// Per-output-channel int8 of f32 rows: sw[r] = max_k |w[r, k]| / 127, q =
// nearbyint(w / sw) (0 for an all-zero row; non-finite weights refused).
void quantize_rows_w8(const float* w, int64_t rows, int64_t cols, int8_t* q, float* sw);

// Packs row-major q [rows][cols] and its scales for the kernels.
W8Matrix pack_w8(const int8_t* q, const float* sw, int64_t rows, int64_t cols);

// Per-output-channel 4-bit codes in [-8, 7] with the scale of least squared
// error among sw = f * max_k |w[r, k]| / 7, f in {1, 0.95, ..., 0.7}
// (clipping the largest weights can cost less than a coarse step for all),
// q = clamp(nearbyint(w / sw), -8, 7).
void quantize_rows_w4(const float* w, int64_t rows, int64_t cols, int8_t* q, float* sw);
// Packs codes in [-8, 7] as nibbles (bits 4).
W8Matrix pack_w4(const int8_t* q, const float* sw, int64_t rows, int64_t cols);

// y[t, r] = sum_k x[t, k] * W[r, k] as w8a8_kernels.h computes it; x: [n_tokens,
// x_stride] f32 (first cols used); y: [n_tokens, y_stride]. Runs on ctx.pool
// (work split by row groups and tokens: the bits do not depend on it).
// amax_floor: nullptr, or [n_tokens] floors of each token's max|x| (W8QuantFn):
// a product whose columns are split over ranks quantizes each rank's part
// of a row with the whole row's scale.
void matmul_w8a8(const W8Matrix& w, const float* x, int64_t x_stride, int64_t n_tokens, float* y, int64_t y_stride,
                 const KernelContext& ctx, const float* amax_floor = nullptr);
void matmul_w8a8_with(const W8A8Kernels& k, const W8Matrix& w, const float* x, int64_t x_stride, int64_t n_tokens,
                      float* y, int64_t y_stride, const KernelContext& ctx, const float* amax_floor = nullptr);

// The activation quantization above, one row: writes cols4 * 4 bytes a + 128
// (padding: 128) and returns sx.
float quantize_activation_w8(const float* x, int64_t cols, int64_t cols4, uint8_t* act, float amax_floor = 0.0f);

}  // namespace tessera::kernels
