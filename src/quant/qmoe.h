// QMoE (Frantar & Alistarh 2023) for Tessera's mixtures: each expert matrix
// is quantized to ternary weights {lo_r, 0, hi_r} per row r (lo_r the row's
// minimum, hi_r its maximum, both as fp16), by GPTQ against the Hessian of
// the tokens the router sent to that expert (or by rounding to nearest
// without calibration), and the symbols of all the experts of one tensor are
// entropy-coded with a Tunstall code: 256 fixed-length 8-bit codewords, each
// for a string of up to 16 symbols, the strings chosen by the symbols'
// frequencies (the most probable string is split until there are 255), so
// that long runs of zeros cost one byte. The layout: kernels/qmoe.h.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/qmoe.h"
#include "quant/gptq.h"

namespace tessera::quant {

// Symbols of a ternary weight.
inline constexpr uint8_t kTernaryZero = 0, kTernaryLo = 1, kTernaryHi = 2;

// One matrix [rows, cols] of ternary weights.
struct TernaryMatrix {
  int64_t rows = 0, cols = 0;
  std::vector<float> lo, hi;   // [rows], fp16 values as stored
  std::vector<uint8_t> sym;    // [rows, cols] kTernary*
  float value(int64_t r, int64_t c) const {
    const uint8_t s = sym[static_cast<size_t>(r * cols + c)];
    return s == kTernaryLo ? lo[r] : s == kTernaryHi ? hi[r] : 0.0f;
  }
};

// Each weight to the nearest of {lo_r, 0, hi_r} (ties to zero).
TernaryMatrix ternary_rtn(const float* w, int64_t rows, int64_t cols);

// GPTQ on the same grid (lo_r, hi_r from the original row): h [cols, cols]
// the expert's input Hessian (quant/gptq.h).
//
// GPTQ's error feedback turns zeros into +-: at GPTQ's usual dampening
// (0.01 mean(diag H)) a ternary row holds far more non-zeros than its
// rounding (measured on models/stories-moe's wide model: 1.24 bits per
// weight against 0.84). A stronger dampening keeps the codes sparse and
// most of GPTQ's gain: `tessera quantize --method qmoe` uses kQmoeDamp
// unless --damp says otherwise (docs/QUANTIZATION.md, QMoE).
constexpr double kQmoeDamp = 0.5;
TernaryMatrix ternary_gptq(const float* w, int64_t rows, int64_t cols, std::span<const double> h,
                           const GptqOptions& opt, ThreadPool* pool);

// The Tunstall dictionary for symbol probabilities p (zero, lo, hi): 255
// strings of 1..16 symbols (a complete tree: every sequence parses), the
// 256th entry a copy of the first.
std::array<kernels::QmoeEntry, 256> tunstall_dictionary(const std::array<double, 3>& p);

// The bytes of a QMOE tensor holding `matrices` (all of one shape), coded
// with one dictionary built from their symbols' frequencies.
std::vector<uint8_t> encode_qmoe(std::span<const TernaryMatrix> matrices);

}  // namespace tessera::quant
