// matmul kernels against references, for every weight type x kernel table:
//  * the scalar table against a float64 dot of dequantize_row() values, with
//    an error bound derived from the inputs (formulas below);
//  * every vector table against the scalar table: bit-identical for the
//    quantized types (the integer dots are exact, see matmul_kernels.h), and
//    within a float bound for the float types;
//  * batch invariance: each token's output, computed in batches of 1..67
//    tokens at different batch positions and with 1, 2, 3 threads, equals
//    (memcmp) the single-token result.
// Odd shapes (K one block, K not a multiple of the vector width, N odd or
// below one tile per thread), misaligned x / y / weights, padded strides.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/cpu.h"
#include "core/error.h"
#include "core/fp16.h"
#include "core/thread_pool.h"
#include "kernels/matmul.h"
#include "kernels/matmul_kernels.h"
#include "kernels/quant.h"

namespace tessera::kernels {
namespace {

constexpr double kEps = 0x1p-24;  // unit roundoff of f32

struct Table {
  std::string name;
  const MatmulKernels* kernels;
  int lanes;  // float lanes per accumulator (for the float bound)
  bool available;
};

std::vector<Table> all_tables() {
  const bool avx2 = isa_supported(Isa::kAvx2);
  return {
      {"scalar", &matmul_kernels_ref(), 1, true},
      {"avx2", &matmul_kernels_avx2(), 8, avx2},
      {"avx2_vnni_emulated", &matmul_kernels_avx2_vnni_emulated(), 8, avx2},
      {"avx512", &matmul_kernels_avx512(), 16, isa_supported(Isa::kAvx512)},
      {"amx", &matmul_kernels_amx(), 16, isa_supported(Isa::kAvx512) && amx_usable()},
  };
}

const DType kTypes[] = {DType::kF32,   DType::kF16,   DType::kBF16,  DType::kQ8_0,  DType::kQ4_0,
                        DType::kQ4_1,  DType::kQ5_0,  DType::kQ5_1,  DType::kIQ4_NL, DType::kMXFP4,
                        DType::kQ2_K,  DType::kQ3_K,  DType::kQ4_K,  DType::kQ5_K,  DType::kQ6_K,
                        DType::kIQ4_XS, DType::kTQ1_0, DType::kTQ2_0};

bool is_float(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

// Quantized types whose blocks hold 32 values (activation blocks of 32).
bool is_block32(DType t) { return !is_float(t) && dtype_traits(t).block_size == 32; }

// Where a block keeps its fp16 scales: (byte offset, may be negative).
// MXFP4's scale is an E8M0 byte: any random byte is one.
std::vector<std::pair<size_t, bool>> scale_slots(DType t) {
  switch (t) {
    case DType::kQ8_0: case DType::kQ4_0: case DType::kQ5_0: case DType::kIQ4_NL: case DType::kIQ4_XS:
      return {{0, true}};
    case DType::kQ4_1: case DType::kQ5_1: return {{0, true}, {2, true}};
    case DType::kQ4_K: case DType::kQ5_K: return {{0, false}, {2, false}};
    case DType::kQ2_K: return {{80, false}, {82, false}};
    case DType::kQ6_K: return {{208, true}};
    case DType::kQ3_K: return {{108, true}};
    case DType::kTQ1_0: return {{52, true}};
    case DType::kTQ2_0: return {{64, true}};
    default: return {};
  }
}

// Affine types (w = d q + min term, which can cancel): the bytes of a
// block's values, [first, last).
std::optional<std::pair<size_t, size_t>> value_bytes(DType t) {
  switch (t) {
    case DType::kQ4_K: return std::pair<size_t, size_t>{16, 144};
    case DType::kQ5_K: return std::pair<size_t, size_t>{16, 176};
    case DType::kQ4_1: return std::pair<size_t, size_t>{4, 20};
    case DType::kQ5_1: return std::pair<size_t, size_t>{4, 24};
    case DType::kQ2_K: return std::pair<size_t, size_t>{16, 80};
    default: return std::nullopt;
  }
}

// A weight matrix in its own buffer, rows `stride` bytes apart, starting
// `misalign` bytes into the allocation.
struct Matrix {
  DType type;
  int64_t rows, cols;
  size_t stride;
  std::vector<uint8_t> storage;
  size_t misalign;
  WeightView view() const {
    return {type, storage.data() + misalign, rows, cols, stride};
  }
};

uint16_t random_scale_f16(std::mt19937& rng, bool allow_negative) {
  std::uniform_real_distribution<float> u(0.002f, 0.03f);
  float v = u(rng);
  if (allow_negative && (rng() & 1)) v = -v;
  return f32_to_fp16(v);
}

// Random weights: float types from random values (every representable
// pattern class: the kernels must convert exactly); quantized types from
// random bytes (every q pattern, including Q8_0's -128 and Q6_K's -128
// scales), with random but moderate fp16 scales.
Matrix random_matrix(DType type, int64_t rows, int64_t cols, std::mt19937& rng, size_t misalign, size_t pad) {
  Matrix m{type, rows, cols, row_bytes(type, cols) + pad, {}, misalign};
  m.storage.assign(misalign + m.stride * static_cast<size_t>(rows), 0);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::uniform_int_distribution<int> byte(0, 255);
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* row = m.storage.data() + misalign + m.stride * static_cast<size_t>(r);
    if (is_float(type)) {
      std::vector<float> v(static_cast<size_t>(cols));
      for (auto& x : v) x = u(rng);
      quantize_row(type, v.data(), row, cols);
      continue;
    }
    const size_t n = row_bytes(type, cols);
    for (size_t i = 0; i < n; ++i) row[i] = static_cast<uint8_t>(byte(rng));
    const DTypeTraits tr = dtype_traits(type);
    for (int64_t b = 0; b < cols / tr.block_size; ++b) {
      uint8_t* blk = row + b * tr.type_size;
      for (const auto& [off, negative] : scale_slots(type)) {
        const uint16_t h = random_scale_f16(rng, negative);
        std::memcpy(blk + off, &h, 2);
      }
      // MXFP4: exponents near 2^-7 (the random fp16 scales' range).
      if (type == DType::kMXFP4) blk[0] = static_cast<uint8_t>(118 + byte(rng) % 6);
    }
  }
  return m;
}

std::vector<float> random_activations(int64_t n, int64_t stride, std::mt19937& rng) {
  std::vector<float> x(static_cast<size_t>(n * stride) + 1, 0.0f);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (auto& v : x) v = g(rng);
  // A few outliers, as real activations have.
  for (int64_t i = 0; i < n * stride / 50; ++i) x[rng() % x.size()] *= 20.0f;
  return x;
}

// y[t, r] for tokens [0, n) with the given table and pool.
std::vector<float> run(const Table& tab, const Matrix& m, const float* x, int64_t x_stride, int64_t n,
                       int64_t y_stride, ThreadPool* pool, Workspace* ws) {
  std::vector<float> y(static_cast<size_t>(n * y_stride) + 1, -777.0f);
  KernelContext ctx{pool, Isa::kScalar, ws};
  matmul_with(*tab.kernels, m.view(), x, x_stride, n, y.data() + 1, y_stride, ctx);  // y misaligned by 1 float
  y.erase(y.begin());
  return y;
}

// The activation quantization step of element k of token row x: the
// contract's d of its block (amax / 127); zero for float weights.
std::vector<double> act_steps(DType type, const float* x, int64_t k) {
  std::vector<double> step(static_cast<size_t>(k), 0.0);
  if (is_float(type)) return step;
  const int64_t block = is_block32(type) ? 32 : 256;
  for (int64_t b = 0; b < k / block; ++b) {
    float amax = 0.0f;
    for (int64_t j = 0; j < block; ++j) amax = std::fmax(amax, std::fabs(x[b * block + j]));
    for (int64_t j = 0; j < block; ++j) step[static_cast<size_t>(b * block + j)] = amax / 127.0f;
  }
  return step;
}

// Per element magnitude of the terms the kernel rounds: |w|, except for
// Q4_K / Q5_K whose w = d*sc*q - dmin*m can cancel: there |d*sc*q| + |dmin*m|.
std::vector<float> magnitudes(const Matrix& m, const uint8_t* row, const std::vector<float>& w) {
  std::vector<float> mag(w.size());
  for (size_t i = 0; i < w.size(); ++i) mag[i] = std::fabs(w[i]);
  const auto values = value_bytes(m.type);
  if (!values) return mag;
  std::vector<uint8_t> zero_q(row, row + row_bytes(m.type, m.cols));
  const DTypeTraits tr = dtype_traits(m.type);
  for (int64_t b = 0; b < m.cols / tr.block_size; ++b) {
    std::memset(zero_q.data() + b * tr.type_size + values->first, 0, values->second - values->first);
  }
  std::vector<float> mins(w.size());
  dequantize_row(m.type, zero_q.data(), mins.data(), m.cols);  // = -dmin * m per element
  for (size_t i = 0; i < w.size(); ++i) mag[i] = std::fabs(w[i] - mins[i]) + std::fabs(mins[i]);
  return mag;
}

struct Shape {
  int64_t rows, cols;
};

std::vector<Shape> shapes_for(DType t) {
  if (is_float(t)) return {{1, 1}, {5, 7}, {9, 8}, {13, 33}, {37, 100}, {17, 515}};
  if (is_block32(t)) return {{1, 32}, {9, 32}, {13, 96}, {37, 288}, {8, 1024}};
  return {{1, 256}, {9, 256}, {37, 512}, {16, 1024}};
}

class MatmulTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    tab_ = all_tables()[static_cast<size_t>(GetParam())];
    if (!tab_.available) GTEST_SKIP() << "this CPU cannot run the " << tab_.name << " kernels";
  }
  Table tab_;
  Workspace ws_;
};

// The scalar table against float64 dot products of the dequantized weights.
//   float types:  |y - ref| <= (K / lanes + log2(lanes) + 2) * eps * sum_k |w_k x_k|
//                 (each lane sums ceil(K / lanes) products, then a tree)
//   quantized:    |y - ref| <= sum_k |w_k| * step_k / 2                      (x rounded to the step)
//                            + (nb + 6) * eps * sum_k mag_k * (|x_k| + step_k) (fp32 accumulation of nb
//                              blocks, the scale product, int->float, and the reference's own
//                              dequantization roundings)
// Vector tables: quantized bit-identical to scalar; float types checked with
// the same bound at their lane count.
TEST_P(MatmulTest, MatchesReference) {
  std::mt19937 rng(1234 + GetParam());
  const Table ref = all_tables()[0];
  for (DType type : kTypes) {
    for (const Shape& s : shapes_for(type)) {
      SCOPED_TRACE(std::string(dtype_name(type)) + " " + std::to_string(s.rows) + "x" + std::to_string(s.cols));
      const size_t misalign = is_float(type) ? dtype_traits(type).type_size : 2;
      const Matrix m = random_matrix(type, s.rows, s.cols, rng, misalign, /*pad=*/6);
      const int64_t n = 5, x_stride = s.cols + 3, y_stride = s.rows + 2;
      std::vector<float> xbuf = random_activations(n, x_stride, rng);
      const float* x = xbuf.data() + 1;  // misaligned by one float
      const std::vector<float> y = run(tab_, m, x, x_stride, n, y_stride, nullptr, &ws_);
      if (!is_float(type) && tab_.kernels != ref.kernels) {
        const std::vector<float> yr = run(ref, m, x, x_stride, n, y_stride, nullptr, &ws_);
        for (int64_t t = 0; t < n; ++t) {
          ASSERT_EQ(0, std::memcmp(&y[t * y_stride], &yr[t * y_stride], s.rows * sizeof(float)))
              << "token " << t << " differs from the scalar kernels";
        }
        continue;
      }
      std::vector<float> w(static_cast<size_t>(s.cols));
      for (int64_t r = 0; r < s.rows; ++r) {
        const uint8_t* row = m.view().data + m.stride * static_cast<size_t>(r);
        dequantize_row(type, row, w.data(), s.cols);
        const std::vector<float> mag = magnitudes(m, row, w);
        for (int64_t t = 0; t < n; ++t) {
          const float* xt = x + t * x_stride;
          const std::vector<double> step = act_steps(type, xt, s.cols);
          double exact = 0, sum_wx = 0, quant_err = 0, mag_sum = 0;
          for (int64_t k = 0; k < s.cols; ++k) {
            exact += static_cast<double>(w[k]) * xt[k];
            sum_wx += std::fabs(static_cast<double>(w[k]) * xt[k]);
            quant_err += std::fabs(w[k]) * step[k] / 2;
            mag_sum += mag[k] * (std::fabs(xt[k]) + step[k]);
          }
          double tol;
          if (is_float(type)) {
            tol = (static_cast<double>((s.cols + tab_.lanes - 1) / tab_.lanes) + std::log2(tab_.lanes) + 2) * kEps *
                  sum_wx;
          } else {
            const double nb = static_cast<double>(s.cols / dtype_traits(type).block_size);
            tol = quant_err + (nb + 6) * kEps * mag_sum;
          }
          ASSERT_NEAR(y[t * y_stride + r], exact, tol) << "row " << r << " token " << t;
        }
      }
      // The stride padding of y must be untouched.
      for (int64_t t = 0; t + 1 < n; ++t) ASSERT_EQ(y[t * y_stride + s.rows], -777.0f);
    }
  }
}

// Every token's output in a batch equals its single-token output, bit for
// bit, for batches of 1..67 at varying offsets and 1, 2, 3 threads.
TEST_P(MatmulTest, BatchInvariant) {
  std::mt19937 rng(99 + GetParam());
  ThreadPool pool2(2), pool3(3);
  ThreadPool* pools[] = {nullptr, &pool2, &pool3};
  const bool slow = tab_.lanes == 1;  // the scalar table: fewer batch sizes
  for (DType type : kTypes) {
    const int64_t cols = is_float(type) ? 75 : (is_block32(type) ? 160 : 256);
    for (int64_t rows : {int64_t{37}, int64_t{9}}) {
      SCOPED_TRACE(std::string(dtype_name(type)) + " rows " + std::to_string(rows));
      const Matrix m = random_matrix(type, rows, cols, rng, 0, 0);
      const int64_t n_max = 67 + 11;
      std::vector<float> x = random_activations(n_max, cols, rng);
      std::vector<float> single(static_cast<size_t>(n_max * rows));
      for (int64_t t = 0; t < n_max; ++t) {
        const std::vector<float> y = run(tab_, m, x.data() + t * cols, cols, 1, rows, nullptr, &ws_);
        std::memcpy(&single[t * rows], y.data(), rows * sizeof(float));
      }
      for (int64_t n = 1; n <= 67; n += (slow && n > 4 ? 9 : 1)) {
        const int64_t offset = (n * 7) % 12;  // different neighbours for each n
        for (ThreadPool* pool : pools) {
          const std::vector<float> y = run(tab_, m, x.data() + offset * cols, cols, n, rows, pool, &ws_);
          for (int64_t t = 0; t < n; ++t) {
            ASSERT_EQ(0, std::memcmp(&y[t * rows], &single[(offset + t) * rows], rows * sizeof(float)))
                << "batch of " << n << ", token " << t << ", threads " << (pool ? pool->size() : 1);
          }
        }
      }
    }
  }
}

// The activation quantization of every table is the scalar one, byte for
// byte, including NaN and infinite inputs (clamped, never undefined).
TEST_P(MatmulTest, ActivationQuantizationMatchesScalar) {
  std::mt19937 rng(7);
  for (int block : {32, 256}) {
    for (int group : {16, 32}) {
      const int64_t k = 512, n = 3;
      ActLayout lay;
      lay.k = k;
      lay.block = block;
      lay.group = group;
      lay.d_offset = k;
      lay.sum_offset = k + 4 * (k / block);
      lay.row_bytes = (lay.sum_offset + 2 * (k / group) + 10 + 63) / 64 * 64;  // rows keep d aligned, as matmul() lays them out
      std::vector<float> x = random_activations(n, k, rng);
      x[5] = std::nanf("");
      x[700] = INFINITY;
      for (int j = 64; j < 96; ++j) x[j] = 0.0f;  // an all-zero block
      std::vector<uint8_t> a(n * lay.row_bytes, 0), b(n * lay.row_bytes, 0);
      tab_.kernels->quantize_act(x.data(), k, 0, n, a.data(), lay);
      matmul_kernels_ref().quantize_act(x.data(), k, 0, n, b.data(), lay);
      EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size())) << "block " << block << " group " << group;
    }
  }
}

// prepare_weight(): the packed Q8_0 / Q4_0 / Q3_K / Q4_K / Q5_K / Q6_K kernels give exactly the bits of
// the plain-layout kernels (hence of the scalar reference), for any batch
// and thread count, with rows not a multiple of the 8-row group; other types
// are left unpacked and still work; the original data is untouched.
TEST_P(MatmulTest, PreparedMatchesPlain) {
  std::mt19937 rng(555 + GetParam());
  ThreadPool pool3(3);
  for (DType type : kTypes) {
    for (const Shape& s : std::vector<Shape>{{1, 32}, {9, 64}, {37, 160}, {16, 96}}) {
      const int64_t cols = is_float(type) || is_block32(type) ? s.cols : 256 * (1 + s.rows % 2);
      SCOPED_TRACE(std::string(dtype_name(type)) + " " + std::to_string(s.rows) + "x" + std::to_string(cols));
      const Matrix m = random_matrix(type, s.rows, cols, rng, 2, 4);
      const std::vector<uint8_t> before = m.storage;
      const PreparedWeight pw = prepare_weight(m.view());
      EXPECT_EQ(pw.packed.empty(), type != DType::kQ8_0 && type != DType::kQ4_0 && type != DType::kQ4_K &&
                                       type != DType::kQ5_K && type != DType::kQ6_K && type != DType::kQ3_K &&
                                       type != DType::kIQ4_NL && type != DType::kMXFP4 && type != DType::kQ4_1 &&
                                       type != DType::kQ5_0 && type != DType::kQ5_1 && type != DType::kIQ4_XS &&
                                       type != DType::kQ2_K && type != DType::kTQ1_0 && type != DType::kTQ2_0);
      EXPECT_EQ(pw.view.data, m.view().data);
      const int64_t n_max = 23;
      std::vector<float> x = random_activations(n_max, cols, rng);
      for (int64_t n : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{5}, int64_t{23}}) {
        for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool3}) {
          KernelContext ctx{pool, Isa::kScalar, &ws_};
          std::vector<float> yp(static_cast<size_t>(n * s.rows)), yq(static_cast<size_t>(n * s.rows));
          matmul_with(*tab_.kernels, pw, x.data(), cols, n, yp.data(), s.rows, ctx);
          matmul_with(*tab_.kernels, m.view(), x.data(), cols, n, yq.data(), s.rows, ctx);
          ASSERT_EQ(0, std::memcmp(yp.data(), yq.data(), yp.size() * sizeof(float))) << "batch " << n;
        }
      }
      EXPECT_EQ(m.storage, before);
    }
  }
}

// MXFP4 scales outside fp16 (2^(e - 128) for e < 104 or e > 143) leave the
// weight unpacked: the plain rows' kernels, the same bits as the reference.
TEST_P(MatmulTest, Mxfp4ScalesBeyondFp16StayUnpacked) {
  std::mt19937 rng(556 + GetParam());
  Matrix m = random_matrix(DType::kMXFP4, 9, 64, rng, 0, 0);
  m.storage[0] = 150;  // 2^22: not an fp16
  EXPECT_TRUE(prepare_weight(m.view()).packed.empty());
  m.storage[0] = 143;  // 2^15: the largest that is
  const PreparedWeight pw = prepare_weight(m.view());
  ASSERT_FALSE(pw.packed.empty());
  std::vector<float> x = random_activations(3, 64, rng);
  std::vector<float> want(27), got(27);
  KernelContext ctx{nullptr, Isa::kScalar, &ws_};
  matmul_with(matmul_kernels_ref(), m.view(), x.data(), 64, 3, want.data(), 9, ctx);
  matmul_with(*tab_.kernels, pw, x.data(), 64, 3, got.data(), 9, ctx);
  EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)));
}

// The largest integer sums the kernels can meet: every Q4_0 nibble 15 (or
// 0) against activations that quantize to +-127 (each block's values equal
// in magnitude). The AVX2 packed kernel sums a block's eight vpmaddubsw
// results in int16 (8 x 2 x 15 x 127 = 30480, just inside int16); any
// overflow there would change the bits against the scalar table. Q8_0 with
// every q = -128 / 127 checks the sign-trick path at its limit too; Q4_K
// with every 6-bit scale and min at 63 (fill 0xff) the packed kernel's
// int16 pairs and int32 super-block sums at theirs, and Q6_K with every q
// at 63 or 0 and every int8 scale at -1, -128 or 127 (fills 0xff, 0x80, 0x7f),
// and Q3_K with every q at 3 or -4 and every scale at 31 or -32.
TEST_P(MatmulTest, ExtremeIntegerSumsAreExact) {
  const int64_t rows = 16, cols = 256;
  ThreadPool pool2(2);
  for (DType type : {DType::kQ4_0, DType::kQ8_0, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K,
                     DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kIQ4_NL, DType::kMXFP4, DType::kQ2_K,
                     DType::kIQ4_XS, DType::kTQ1_0, DType::kTQ2_0}) {
    for (uint8_t fill : {uint8_t{0xff}, uint8_t{0x00}, uint8_t{0x80}, uint8_t{0x7f}, uint8_t{0xf0}}) {
      SCOPED_TRACE(std::string(dtype_name(type)) + " fill " + std::to_string(fill));
      Matrix m{type, rows, cols, row_bytes(type, cols), {}, 0};
      m.storage.assign(m.stride * rows, fill);
      const DTypeTraits tr = dtype_traits(type);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t b = 0; b < cols / tr.block_size; ++b) {
          const uint16_t d = f32_to_fp16(0.01f * static_cast<float>(1 + (r + b) % 3));
          const auto slots = scale_slots(type);
          uint8_t* blk = m.storage.data() + r * m.stride + b * tr.type_size;
          if (!slots.empty()) std::memcpy(blk + slots[0].first, &d, 2);
          if (slots.size() > 1) {  // dmin (or Q4_1 / Q5_1's m)
            const uint16_t dmin = f32_to_fp16(0.003f * static_cast<float>(1 + (r + 2 * b) % 5));
            std::memcpy(blk + slots[1].first, &dmin, 2);
          }
          if (type == DType::kMXFP4) blk[0] = static_cast<uint8_t>(120 + (r + b) % 3);
        }
      const PreparedWeight pw = prepare_weight(m.view());
      for (float sign : {1.0f, -1.0f}) {
        const int64_t n = 7;  // several tiles of tokens
        std::vector<float> x(static_cast<size_t>(n * cols));
        for (int64_t t = 0; t < n; ++t)
          for (int64_t k = 0; k < cols; ++k)
            x[t * cols + k] = (t % 2 ? -sign : sign) * static_cast<float>(1 + (k / 32) % 4);
        std::vector<float> want(static_cast<size_t>(n * rows)), got(want.size()), got_packed(want.size());
        KernelContext ctx{&pool2, Isa::kScalar, &ws_};
        matmul_with(matmul_kernels_ref(), m.view(), x.data(), cols, n, want.data(), rows, ctx);
        matmul_with(*tab_.kernels, m.view(), x.data(), cols, n, got.data(), rows, ctx);
        matmul_with(*tab_.kernels, pw, x.data(), cols, n, got_packed.data(), rows, ctx);
        ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)));
        ASSERT_EQ(0, std::memcmp(want.data(), got_packed.data(), want.size() * sizeof(float)));
        if (type != DType::kQ4_0 && type != DType::kQ8_0) continue;  // (the others: the kernels' bounds, above)
        // And the scalar table itself against the float64 value: each block's
        // integer sum is exactly 32 * q * 127 (x quantizes to +-127).
        const double q = type == DType::kQ4_0 ? static_cast<double>(fill & 0x0f) - 8.0 +
                                                    (static_cast<double>(fill >> 4) - static_cast<double>(fill & 0x0f)) / 2
                                              : static_cast<double>(static_cast<int8_t>(fill));
        double ref = 0;
        for (int64_t b = 0; b < cols / 32; ++b) {
          const double dw = fp16_to_f32(f32_to_fp16(0.01f * static_cast<float>(1 + b % 3)));
          const double dx = static_cast<double>(static_cast<float>(1 + b % 4) / 127.0f);
          ref += dw * dx * 32.0 * q * 127.0;
        }
        EXPECT_NEAR(want[0], sign * ref, 1e-5 * std::fabs(ref) + 1e-6);
      }
    }
  }
}

// matmul_shared_input(): several weights over one input give, for each, the
// bits of matmul() of that weight alone, for every ISA, type, batch and
// thread count, with row counts that are not multiples of the row tile and
// an empty weight; weights of different types fall back to one product each.
// The 300-row weight makes the threads' chunks of row tiles (two tiles
// each, taken from a shared counter) straddle the boundaries between jobs.
TEST(MatmulShared, EqualsSeparateProducts) {
  std::mt19937 rng(4242);
  ThreadPool pool2(2), pool3(3);
  Workspace ws;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (!isa_supported(isa)) continue;
    for (DType type : kTypes) {
      const int64_t cols = dtype_traits(type).block_size == 256 ? 256 : 96;
      SCOPED_TRACE(std::string(isa_name(isa)) + " " + std::string(dtype_name(type)));
      std::vector<Matrix> ms;
      std::vector<PreparedWeight> pws;
      for (int64_t rows : {13, 8, 0, 300}) ms.push_back(random_matrix(type, rows, cols, rng, 0, 0));
      ms.push_back(random_matrix(type == DType::kF32 ? DType::kQ8_0 : DType::kF32, 5, cols, rng, 0, 0));
      for (const Matrix& m : ms) pws.push_back(prepare_weight(m.view()));
      const std::vector<float> x = random_activations(23, cols, rng);
      for (int64_t n : {int64_t{1}, int64_t{2}, int64_t{5}, int64_t{23}}) {
        for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool2, &pool3}) {
          const KernelContext ctx{pool, isa, &ws};
          for (size_t count : {size_t{4}, size_t{2}, size_t{3}}) {
            // count 3 with the last weight swapped for the other-type one: the fallback.
            std::vector<size_t> pick = {0, 1, 2, 3};
            pick.resize(count);
            if (count == 3) pick[2] = 4;
            std::vector<std::vector<float>> shared(count), alone(count);
            std::vector<MatmulOutput> outs;
            for (size_t i = 0; i < count; ++i) {
              const int64_t rows = ms[pick[i]].rows;
              shared[i].assign(static_cast<size_t>(n * rows), -1.0f);
              alone[i].assign(static_cast<size_t>(n * rows), -2.0f);
              outs.push_back({&pws[pick[i]], shared[i].data(), rows});
            }
            matmul_shared_input(outs, x.data(), cols, n, ctx);
            for (size_t i = 0; i < count; ++i) {
              const int64_t rows = ms[pick[i]].rows;
              matmul(pws[pick[i]], x.data(), cols, n, alone[i].data(), rows, ctx);
              // Bitwise (memcmp needs a non-null pointer: the 0-row weight has none).
              ASSERT_TRUE(shared[i].empty() ||
                          std::memcmp(shared[i].data(), alone[i].data(), shared[i].size() * sizeof(float)) == 0)
                  << "output " << i << " of " << count << ", batch " << n;
            }
          }
        }
      }
    }
  }
}

// matmul_grouped(): weights each over its own input rows (a mixture's
// experts), some sharing one input (gate and up), some with no tokens, give
// for each the bits of matmul() of that weight on that input alone, for
// every ISA, type and thread count; a weight of another type falls back.
TEST(MatmulGrouped, EqualsSeparateProducts) {
  std::mt19937 rng(777);
  ThreadPool pool2(2), pool3(3);
  Workspace ws;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (!isa_supported(isa)) continue;
    for (DType type : kTypes) {
      const int64_t cols = dtype_traits(type).block_size == 256 ? 256 : 96;
      SCOPED_TRACE(std::string(isa_name(isa)) + " " + std::string(dtype_name(type)));
      std::vector<Matrix> ms;
      std::vector<PreparedWeight> pws;
      for (int64_t rows : {40, 40, 13, 300, 8}) ms.push_back(random_matrix(type, rows, cols, rng, 0, 0));
      ms.push_back(random_matrix(type == DType::kF32 ? DType::kQ8_0 : DType::kF32, 5, cols, rng, 0, 0));
      for (const Matrix& m : ms) pws.push_back(prepare_weight(m.view()));
      const std::vector<float> x = random_activations(30, cols, rng);
      // (weight, first input row, tokens): 0 and 1 share rows 0..3 (gate and
      // up), 2 has no tokens, 3 and 4 read their own rows.
      struct Pick {
        size_t w;
        int64_t t0, n;
      };
      for (bool other_type : {false, true}) {
        std::vector<Pick> picks = {{0, 0, 3}, {1, 0, 3}, {2, 3, 0}, {3, 3, 25}, {4, 28, 1}};
        if (other_type) picks.push_back({5, 10, 4});
        for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool2, &pool3}) {
          const KernelContext ctx{pool, isa, &ws};
          std::vector<std::vector<float>> grouped(picks.size()), alone(picks.size());
          std::vector<GroupedMatmul> jobs;
          for (size_t i = 0; i < picks.size(); ++i) {
            const int64_t rows = ms[picks[i].w].rows;
            grouped[i].assign(static_cast<size_t>(picks[i].n * rows), -1.0f);
            alone[i].assign(static_cast<size_t>(picks[i].n * rows), -2.0f);
            jobs.push_back({&pws[picks[i].w], x.data() + picks[i].t0 * cols, cols, picks[i].n, grouped[i].data(), rows});
          }
          matmul_grouped(jobs, ctx);
          for (size_t i = 0; i < picks.size(); ++i) {
            const int64_t rows = ms[picks[i].w].rows;
            matmul(pws[picks[i].w], x.data() + picks[i].t0 * cols, cols, picks[i].n, alone[i].data(), rows, ctx);
            ASSERT_TRUE(grouped[i].empty() ||
                        std::memcmp(grouped[i].data(), alone[i].data(), grouped[i].size() * sizeof(float)) == 0)
                << "job " << i << (other_type ? " (with a weight of another type)" : "");
          }
        }
      }
    }
  }
}

TEST(MatmulApi, RejectsBadArguments) {
  std::vector<uint8_t> w(34 * 4);
  std::vector<float> x(64), y(64);
  KernelContext ctx{nullptr, Isa::kScalar, nullptr};
  EXPECT_THROW(matmul(WeightView{DType::kQ8_0, w.data(), 2, 48, 34 * 2}, x.data(), 48, 1, y.data(), 2, ctx), Error);
  EXPECT_THROW(matmul(WeightView{DType::kQ8_0, w.data(), 2, 64, 60}, x.data(), 64, 1, y.data(), 2, ctx), Error);
  EXPECT_THROW(matmul(WeightView{DType::kIQ2_XXS, w.data(), 2, 256, 66}, x.data(), 64, 1, y.data(), 2, ctx), Error);
  EXPECT_THROW(matmul(WeightView{DType::kQ8_0, w.data(), 2, 64, 68}, x.data(), 32, 2, y.data(), 2, ctx), Error);
  EXPECT_FALSE(matmul_supports(DType::kIQ2_XXS));
  EXPECT_TRUE(matmul_supports(DType::kQ2_K));
  EXPECT_TRUE(matmul_supports(DType::kQ3_K));
  EXPECT_TRUE(matmul_supports(DType::kQ6_K));
  EXPECT_TRUE(matmul_supports(DType::kQ5_K));
}

INSTANTIATE_TEST_SUITE_P(Tables, MatmulTest, ::testing::Range(0, 5), [](const auto& info) {
  return all_tables()[static_cast<size_t>(info.param)].name;
});

}  // namespace
}  // namespace tessera::kernels
