// The interface between w8a8.cc (packing, activation quantization, threads)
// and the W8A8 GEMM kernels: the scalar reference (w8a8_ref.cc) and one file
// per ISA (w8a8_avx2.cc, w8a8_avx512.cc). Plain data and function pointers
// only (docs/KERNELS.md, "ODR rule").
//
// Arithmetic (SmoothQuant's W8A8: one scale per output channel, one per
// token, the integer dot over the whole row):
//   weights  W[r, k] = sw[r] * q[r, k],  q in [-127, 127]
//   inputs   x[t, k] ~ sx[t] * a[t, k],  a in [-127, 127] (w8a8.h says how)
//   acc      = sum over k of a[t, k] * q[r, k]                    (int32, exact)
//   y[t, r]  = (float(acc) * sx[t]) * sw[r]                        (two roundings)
// Every kernel forms the same exact acc (AVX-512 as sum((a + 128) * q) -
// 128 * sum(q), VPDPBUSD's unsigned operand; AVX2 with VPMADDUBSW on |q| and
// a signed like q), so every ISA gives the same bits.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tessera::kernels {

// Rows per packed group: one zmm holds 16 rows x 4 consecutive k.
constexpr int64_t kW8Group = 16;

struct W8A8Args {
  // [groups][cols4][16][4]: q[16 g + i, 4 c + j] at ((g * cols4 + c) * 16 + i) * 4 + j.
  const int8_t* q = nullptr;
  const float* sw = nullptr;       // [groups * 16] (0 past the rows)
  const int32_t* wsum128 = nullptr;  // [groups * 16]: 128 * sum_k q[r, k]
  int64_t cols4 = 0;               // k groups of 4 (cols rounded up to 4, zero-padded)
  // [n_tokens][act_stride] bytes a + 128 (k past cols: 128, i.e. a = 0).
  const uint8_t* act = nullptr;
  int64_t act_stride = 0;
  const float* sx = nullptr;       // [n_tokens]
  float* y = nullptr;              // [n_tokens][y_stride]
  int64_t y_stride = 0;
  int64_t rows = 0;                // y columns written: r < rows
  // W4A8 (W8Matrix::bits 4) read in place by W4RunFn: the nibbles of
  // W4UnpackFn's layout, [groups][(cols4 + 1) / 2][16][4] (q unused).
  const uint8_t* nib = nullptr;
};

// Writes y[t][r] for t in [t0, t1) and r in row groups [g0, g1) (rows past
// `rows` not written).
using W8A8Fn = void (*)(const W8A8Args& a, int64_t g0, int64_t g1, int64_t t0, int64_t t1);

// One token's activations (w8a8.h): writes cols4 * 4 bytes a + 128 (128
// past cols) and returns sx. The scale's max|x| is taken no lower than
// amax_floor (0: x's own; a tensor-parallel rank passes the whole row's
// max, so its part of the row gets one process's codes). Every ISA's
// version gives the same bytes.
using W8QuantFn = float (*)(const float* x, int64_t cols, int64_t cols4, float amax_floor, uint8_t* act);

// W4A8 (w8a8.h, W8Matrix::bits 4): one row group's 4-bit codes to the int8
// layout of W8A8Args::q. nib: [cols8][16][4] bytes, byte (c8, i, j) = (q[i,
// 8 c8 + j] + 8) | (q[i, 8 c8 + 4 + j] + 8) << 4 (cols8 = (cols4 + 1) / 2);
// q: [cols4][16][4] int8 (k groups 2 c8 and 2 c8 + 1 of the same 16 rows).
using W4UnpackFn = void (*)(const uint8_t* nib, int64_t cols4, int8_t* q);

// W4A8 over the nibbles in place, for a few tokens (decode: no unpacked
// copy to write and read back); the same arithmetic and bits as W8A8Fn on
// the unpacked codes. nullptr where a table has none (the unpacking runs).
constexpr int64_t kW4FusedMaxTokens = 4;
using W4RunFn = void (*)(const W8A8Args& a, int64_t g0, int64_t g1, int64_t t0, int64_t t1);

struct W8A8Kernels {
  const char* name;
  W8A8Fn run;
  W8QuantFn quantize;
  W4UnpackFn unpack4;
  W4RunFn run4;  // t1 - t0 <= kW4FusedMaxTokens
};

// The scalar unpacking (every ISA's gives the same bytes).
void w4_unpack_ref(const uint8_t* nib, int64_t cols4, int8_t* q);

const W8A8Kernels& w8a8_kernels_ref();
const W8A8Kernels& w8a8_kernels_avx2();
const W8A8Kernels& w8a8_kernels_avx512();
// The AVX-512 table with 32-token blocks on AMX-INT8 tiles (w8a8_amx.cc):
// only where amx_usable().
const W8A8Kernels& w8a8_kernels_amx();

}  // namespace tessera::kernels
