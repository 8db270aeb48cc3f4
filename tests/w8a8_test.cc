// The W8A8 kernels (kernels/w8a8.h): every ISA bit-identical to the scalar
// reference on odd shapes, token counts and thread counts; the reference
// against a double-precision product of the same quantized values (so the
// integer sums and scales are right, not merely consistent); the
// activations' quantization against its definition on every ISA, special
// values included; errors for codes and shapes the format cannot hold.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "core/cpu.h"
#include "core/error.h"
#include "kernels/matmul.h"
#include "kernels/quant.h"
#include "kernels/w8a8.h"

namespace tessera::kernels {
namespace {

struct Problem {
  int64_t rows, cols, tokens;
  std::vector<float> w, x;
  std::vector<int8_t> q;
  std::vector<float> sw;
  W8Matrix m;
};

Problem make(int64_t rows, int64_t cols, int64_t tokens, std::mt19937& rng, int bits = 8) {
  Problem p{rows, cols, tokens, {}, {}, {}, {}, {}};
  std::normal_distribution<float> n01(0.0f, 1.0f);
  p.w.resize(static_cast<size_t>(rows * cols));
  p.x.resize(static_cast<size_t>(tokens * cols));
  for (float& v : p.w) v = n01(rng) * 0.1f;
  for (size_t i = 0; i < p.x.size(); ++i) p.x[i] = n01(rng) * (i % 13 == 0 ? 8.0f : 1.0f);  // outlier channels
  if (rows > 2) std::fill(p.w.begin() + cols, p.w.begin() + 2 * cols, 0.0f);  // an all-zero row
  p.q.resize(p.w.size());
  p.sw.resize(static_cast<size_t>(rows));
  if (bits == 4) {
    quantize_rows_w4(p.w.data(), rows, cols, p.q.data(), p.sw.data());
    p.m = pack_w4(p.q.data(), p.sw.data(), rows, cols);
  } else {
    quantize_rows_w8(p.w.data(), rows, cols, p.q.data(), p.sw.data());
    p.m = pack_w8(p.q.data(), p.sw.data(), rows, cols);
  }
  return p;
}

std::vector<float> run(const W8A8Kernels& k, const Problem& p, int threads, Isa isa) {
  ThreadPool pool(threads);
  Workspace ws;
  KernelContext ctx{&pool, isa, &ws, /*force_parallel=*/true};
  const int64_t ys = p.rows + 3;  // padded rows: the padding is never written
  std::vector<float> y(static_cast<size_t>(p.tokens * ys), -7.0f);
  matmul_w8a8_with(k, p.m, p.x.data(), p.cols, p.tokens, y.data(), ys, ctx);
  for (int64_t t = 0; t < p.tokens; ++t) {
    for (int64_t r = p.rows; r < ys; ++r) EXPECT_EQ(y[t * ys + r], -7.0f);
  }
  return y;
}

const W8A8Kernels& kernels_of(Isa isa) {
  return isa == Isa::kAvx512 ? w8a8_kernels_avx512() : isa == Isa::kAvx2 ? w8a8_kernels_avx2() : w8a8_kernels_ref();
}

// Every table this machine runs: the ISAs', and AMX where the process may use it.
std::vector<const W8A8Kernels*> tables() {
  std::vector<const W8A8Kernels*> t;
  for (Isa isa : supported_isas()) t.push_back(&kernels_of(isa));
  if (amx_usable()) t.push_back(&w8a8_kernels_amx());
  return t;
}

TEST(W8A8, EveryIsaEqualsTheScalarReferenceBitwise) {
  std::mt19937 rng(5);
  // (AMX takes blocks of 32 tokens x 2 row groups over columns in 64s: 64 x
  // 2048 x 70, 100 x 256 x 97 and 48 x 128 x 33 mix its blocks with the
  // AVX-512 kernel's leftovers.)
  const int64_t shapes[][3] = {{1, 1, 1},    {16, 4, 1},    {17, 33, 5},   {64, 2048, 70}, {100, 130, 13},
                               {33, 1000, 70}, {129, 67, 6}, {48, 96, 128}, {250, 512, 19}, {7, 5, 64},
                               {100, 256, 97}, {48, 128, 33}};
  for (const auto& s : shapes) {
    const Problem p = make(s[0], s[1], s[2], rng);
    const std::vector<float> want = run(w8a8_kernels_ref(), p, 1, Isa::kScalar);
    for (const W8A8Kernels* k : tables()) {
      for (int threads : {1, 2, 3}) {
        const Isa isa = std::string(k->name) == "avx2" ? Isa::kAvx2 : std::string(k->name) == "scalar" ? Isa::kScalar : Isa::kAvx512;
        const std::vector<float> got = run(*k, p, threads, isa);
        ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)))
            << k->name << " " << s[0] << "x" << s[1] << " x " << s[2] << " tokens, " << threads << " threads";
      }
    }
  }
}

Isa isa_of(const W8A8Kernels& k) {
  const std::string n = k.name;
  return n == "avx2" ? Isa::kAvx2 : n == "scalar" ? Isa::kScalar : Isa::kAvx512;
}

// W4A8: the nibble matrix gives the bits of the same codes packed as int8
// (pack_w8) through the scalar reference, on every table, thread count and
// shape (odd k groups: the last nibble byte holds one group), unpacked or
// (a few tokens, AVX-512) read in place.
TEST(W4A8, EveryIsaEqualsTheInt8ProductOfItsCodesBitwise) {
  std::mt19937 rng(15);
  const int64_t shapes[][3] = {{1, 1, 1},  {16, 4, 1},     {17, 33, 5},   {64, 2048, 70}, {100, 130, 13},
                               {33, 12, 3}, {129, 67, 6},  {48, 96, 128}, {7, 5, 64},     {100, 256, 97},
                               // up to kW4FusedMaxTokens tokens: the in-place kernel (even and odd chunks)
                               {64, 2048, 2}, {100, 130, 4},  {40, 36, 3}};
  for (const auto& sh : shapes) {
    const Problem p = make(sh[0], sh[1], sh[2], rng, 4);
    ASSERT_EQ(p.m.bits, 4);
    const Problem as8{p.rows, p.cols, p.tokens, p.w, p.x, p.q, p.sw, pack_w8(p.q.data(), p.sw.data(), p.rows, p.cols)};
    const std::vector<float> want = run(w8a8_kernels_ref(), as8, 1, Isa::kScalar);
    for (const W8A8Kernels* k : tables()) {
      for (int threads : {1, 2}) {
        const std::vector<float> got = run(*k, p, threads, isa_of(*k));
        ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)))
            << k->name << " " << sh[0] << "x" << sh[1] << " x " << sh[2] << " tokens, " << threads << " threads";
      }
    }
  }
}

TEST(W4A8, UnpackingIsTheReferenceOnEveryIsa) {
  std::mt19937 rng(16);
  std::uniform_int_distribution<int> byte(0, 255);
  for (int64_t cols4 : {1, 2, 3, 8, 31}) {
    std::vector<uint8_t> nib(static_cast<size_t>((cols4 + 1) / 2 * 64));
    for (uint8_t& b : nib) b = static_cast<uint8_t>(byte(rng));
    std::vector<int8_t> want(static_cast<size_t>(cols4 * 64 + 64), 99), got = want;
    w4_unpack_ref(nib.data(), cols4, want.data());
    for (int64_t c = 0; c < cols4; ++c) {  // the layout, spelled out
      for (int64_t b = 0; b < 64; ++b) {
        const uint8_t v = nib[static_cast<size_t>((c / 2) * 64 + b)];
        ASSERT_EQ(want[static_cast<size_t>(c * 64 + b)], (c % 2 == 0 ? v & 15 : v >> 4) - 8);
      }
    }
    EXPECT_EQ(want[static_cast<size_t>(cols4 * 64)], 99);  // nothing past cols4 groups
    for (const W8A8Kernels* k : tables()) {
      std::fill(got.begin(), got.end(), int8_t{99});
      k->unpack4(nib.data(), cols4, got.data());
      EXPECT_EQ(want, got) << k->name << " cols4 " << cols4;
    }
  }
}

// The clipping search never does worse than rounding with max|w| / 7, and
// codes stay in [-8, 7].
TEST(W4A8, ClippedScalesLoseNoMoreThanAbsmax) {
  std::mt19937 rng(17);
  std::student_t_distribution<float> heavy(3.0f);
  const int64_t rows = 40, cols = 96;
  std::vector<float> w(static_cast<size_t>(rows * cols));
  for (float& v : w) v = heavy(rng);
  std::vector<int8_t> q(w.size());
  std::vector<float> sw(static_cast<size_t>(rows));
  quantize_rows_w4(w.data(), rows, cols, q.data(), sw.data());
  int clipped = 0;
  for (int64_t r = 0; r < rows; ++r) {
    double amax = 0.0, err = 0.0, err_absmax = 0.0;
    for (int64_t k = 0; k < cols; ++k) amax = std::max(amax, std::fabs(static_cast<double>(w[r * cols + k])));
    const float s0 = static_cast<float>(amax) / 7.0f;
    for (int64_t k = 0; k < cols; ++k) {
      const int8_t v = q[r * cols + k];
      ASSERT_TRUE(v >= -8 && v <= 7);
      const float x = w[r * cols + k];
      err += std::pow(x - static_cast<double>(v) * sw[r], 2);
      err_absmax += std::pow(x - std::clamp(std::nearbyint(x / s0), -8.0f, 7.0f) * static_cast<double>(s0), 2);
    }
    EXPECT_LE(err, err_absmax * (1 + 1e-12)) << r;
    clipped += sw[r] < s0;
  }
  EXPECT_GT(clipped, rows / 2);  // heavy tails: most rows clip
}

// The reference against the product of the quantized values in double: the
// exact integer sum times sx times sw, rounded twice in float (2 ulp).
TEST(W8A8, ReferenceIsTheProductOfTheQuantizedValues) {
  std::mt19937 rng(6);
  const Problem p = make(37, 300, 9, rng);
  const std::vector<float> y = run(w8a8_kernels_ref(), p, 1, Isa::kScalar);
  std::vector<uint8_t> act(static_cast<size_t>((p.cols + 3) / 4 * 4));
  for (int64_t t = 0; t < p.tokens; ++t) {
    const float sx = quantize_activation_w8(p.x.data() + t * p.cols, p.cols, (p.cols + 3) / 4, act.data());
    for (int64_t r = 0; r < p.rows; ++r) {
      double dot = 0.0;
      for (int64_t k = 0; k < p.cols; ++k) dot += (static_cast<double>(act[k]) - 128.0) * p.q[r * p.cols + k];
      const double want = dot * sx * p.sw[r];
      EXPECT_NEAR(y[t * (p.rows + 3) + r], want, std::fabs(want) * 3e-7 + 1e-30) << t << " " << r;
    }
  }
  // And near the float product (the quantization's error: half a step of
  // each factor over the row).
  for (int64_t t = 0; t < p.tokens; ++t) {
    for (int64_t r = 0; r < p.rows; ++r) {
      double exact = 0.0, bound = 0.0, amax = 0.0;
      for (int64_t k = 0; k < p.cols; ++k) amax = std::max(amax, std::fabs(static_cast<double>(p.x[t * p.cols + k])));
      for (int64_t k = 0; k < p.cols; ++k) {
        const double xv = p.x[t * p.cols + k], wv = p.w[r * p.cols + k];
        exact += xv * wv;
        bound += 0.5 * (amax / 127.0) * (std::fabs(wv) + p.sw[r] / 2) + 0.5 * p.sw[r] * std::fabs(xv);
      }
      EXPECT_NEAR(y[t * (p.rows + 3) + r], exact, bound * 1.01 + 1e-6);
    }
  }
}

// Activations: sx = max|x| / 127 and a = nearbyint(x / sx) clamped, ties to
// even, NaN to 0, on every ISA; an infinity makes the row's codes 0.
TEST(W8A8, ActivationQuantizationIsItsDefinitionOnEveryIsa) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::vector<std::vector<float>> rows = {{1.0f, -127.0f, 63.5f, 64.5f, -0.5f, 0.5f, 1.5f, 2.5f, 0.0f, -0.0f, nan, 3.0f,
                                           100.25f, -64.5f, 12.0f, 126.5f, -126.5f, 7.0f},
                                          {0.0f, 0.0f, 0.0f},
                                          {inf, 1.0f, -2.0f, 3.0f, nan},
                                          {nan, nan}};
  std::mt19937 rng(7);
  std::normal_distribution<float> n01(0.0f, 3.0f);
  std::vector<float> big(333);
  for (float& v : big) v = n01(rng);
  rows.push_back(big);
  for (const std::vector<float>& x : rows) {
    const int64_t cols = static_cast<int64_t>(x.size()), cols4 = (cols + 3) / 4;
    std::vector<uint8_t> want(static_cast<size_t>(cols4 * 4));
    const float sx = quantize_activation_w8(x.data(), cols, cols4, want.data());
    float amax = 0.0f;
    for (float v : x) amax = std::isnan(v) ? amax : std::max(amax, std::fabs(v));
    EXPECT_EQ(sx, amax / 127.0f);
    for (int64_t k = 0; k < cols4 * 4; ++k) {
      int want_code = 0;
      if (k < cols && std::isfinite(x[k]) && std::isfinite(amax) && amax > 0) {
        want_code = static_cast<int>(std::clamp(std::nearbyint(x[k] * (1.0f / sx)), -127.0f, 127.0f));
      }
      EXPECT_EQ(static_cast<int>(want[k]) - 128, want_code) << "k " << k << " of " << cols;
    }
    for (Isa isa : supported_isas()) {
      std::vector<uint8_t> got(want.size(), 0x55);
      EXPECT_EQ(kernels_of(isa).quantize(x.data(), cols, cols4, 0.0f, got.data()), sx) << isa_name(isa);
      EXPECT_TRUE(got == want) << isa_name(isa) << " cols " << cols;
    }
  }
}

// A row's part quantized with the whole row's max|x| as the floor (a
// tensor-parallel rank's columns) gets the whole row's codes and scale, on
// every ISA; so two column parts' products, summed, are the whole product
// up to the float rounding of that one sum (their int32 sums add exactly).
TEST(W8A8, PartsOfARowWithTheWholeRowsFloorGiveItsCodes) {
  std::mt19937 rng(11);
  for (int bits : {8, 4}) {
    const Problem p = make(37, 96, 5, rng, bits);
    const int64_t h = 40;  // part 0: columns [0, 40), part 1: [40, 96)
    std::vector<float> floors(static_cast<size_t>(p.tokens));
    for (int64_t t = 0; t < p.tokens; ++t) {
      for (int64_t k = 0; k < p.cols; ++k) floors[t] = std::max(floors[t], std::fabs(p.x[t * p.cols + k]));
      std::vector<uint8_t> whole(static_cast<size_t>(p.cols)), part(static_cast<size_t>(p.cols - h));
      const float sx = quantize_activation_w8(p.x.data() + t * p.cols, p.cols, p.cols / 4, whole.data());
      for (Isa isa : supported_isas()) {
        const int64_t c4 = (p.cols - h) / 4;
        EXPECT_EQ(kernels_of(isa).quantize(p.x.data() + t * p.cols + h, p.cols - h, c4, floors[t], part.data()), sx);
        EXPECT_TRUE(std::equal(part.begin(), part.end(), whole.begin() + h)) << isa_name(isa) << " token " << t;
      }
    }
    std::vector<float> y0(static_cast<size_t>(p.tokens * p.rows)), y1(y0.size());
    const auto part_product = [&](int64_t c0, int64_t n, std::vector<float>& y, Isa isa) {
      std::vector<int8_t> q(static_cast<size_t>(p.rows * n));
      std::vector<float> x(static_cast<size_t>(p.tokens * n));
      for (int64_t r = 0; r < p.rows; ++r) std::copy_n(p.q.begin() + r * p.cols + c0, n, q.begin() + r * n);
      for (int64_t t = 0; t < p.tokens; ++t) std::copy_n(p.x.begin() + t * p.cols + c0, n, x.begin() + t * n);
      const W8Matrix m = bits == 4 ? pack_w4(q.data(), p.sw.data(), p.rows, n) : pack_w8(q.data(), p.sw.data(), p.rows, n);
      ThreadPool pool(2);
      Workspace ws;
      const KernelContext ctx{&pool, isa, &ws, /*force_parallel=*/true};
      matmul_w8a8_with(kernels_of(isa), m, x.data(), n, p.tokens, y.data(), p.rows, ctx, floors.data());
    };
    const std::vector<float> want = run(w8a8_kernels_ref(), p, 1, Isa::kScalar);
    for (Isa isa : supported_isas()) {
      part_product(0, h, y0, isa);
      part_product(h, p.cols - h, y1, isa);
      for (int64_t t = 0; t < p.tokens; ++t) {
        for (int64_t r = 0; r < p.rows; ++r) {
          const float a = y0[t * p.rows + r], b = y1[t * p.rows + r], w = want[t * (p.rows + 3) + r];
          EXPECT_NEAR(a + b, w, 4e-7f * (std::fabs(a) + std::fabs(b)) + 1e-30f)
              << isa_name(isa) << " bits " << bits << " t " << t << " r " << r;
        }
      }
    }
  }
}

// prepare_weight_w8a8 (dynamic W8A8 at load): matmul() of it is the W8A8
// product of the weight's own values, bitwise; a shared-input call gives
// each output the same bits; an any-shape weight keeps its own type.
TEST(W8A8, PreparedWeightsRunTheW8A8Product) {
  std::mt19937 rng(8);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  const int64_t rows = 70, cols = 96, n = 5;
  std::vector<float> w(static_cast<size_t>(rows * cols)), x(static_cast<size_t>(n * cols));
  for (float& v : w) v = n01(rng) * 0.05f;
  for (float& v : x) v = n01(rng);
  std::vector<uint8_t> q8(row_bytes(DType::kQ8_0, cols) * rows);
  for (int64_t r = 0; r < rows; ++r) quantize_row(DType::kQ8_0, w.data() + r * cols, q8.data() + r * row_bytes(DType::kQ8_0, cols), cols);
  const WeightView view{DType::kQ8_0, q8.data(), rows, cols, row_bytes(DType::kQ8_0, cols)};
  const PreparedWeight pw = prepare_weight_w8a8(view);
  ASSERT_NE(pw.w8, nullptr);
  // The reference: the Q8_0 values, quantized per row, packed, multiplied.
  std::vector<float> deq(w.size());
  for (int64_t r = 0; r < rows; ++r) dequantize_row(DType::kQ8_0, q8.data() + r * view.row_bytes, deq.data() + r * cols, cols);
  std::vector<int8_t> q(w.size());
  std::vector<float> sw(static_cast<size_t>(rows));
  quantize_rows_w8(deq.data(), rows, cols, q.data(), sw.data());
  const W8Matrix m = pack_w8(q.data(), sw.data(), rows, cols);
  for (Isa isa : supported_isas()) {
    ThreadPool pool(2);
    Workspace ws;
    KernelContext ctx{&pool, isa, &ws};
    std::vector<float> want(static_cast<size_t>(n * rows)), got(want.size()), a(want.size()), b(want.size());
    matmul_w8a8(m, x.data(), cols, n, want.data(), rows, ctx);
    matmul(pw, x.data(), cols, n, got.data(), rows, ctx);
    EXPECT_TRUE(got == want) << isa_name(isa);
    const MatmulOutput outs[] = {{&pw, a.data(), rows}, {&pw, b.data(), rows}};
    matmul_shared_input(outs, x.data(), cols, n, ctx);
    EXPECT_TRUE(a == want && b == want) << isa_name(isa);
  }
  WeightView padded = view;
  padded.x_cols = cols - 5;
  EXPECT_EQ(prepare_weight_w8a8(padded).w8, nullptr);
}

TEST(W8A8, RefusesWhatTheFormatCannotHold) {
  std::vector<int8_t> q = {1, -128, 3, 4};
  std::vector<float> sw = {1.0f};
  EXPECT_THROW(pack_w8(q.data(), sw.data(), 1, 4), Error);
  std::vector<int8_t> wide(65537, 1);
  EXPECT_THROW(pack_w8(wide.data(), sw.data(), 1, 65537), Error);
  std::vector<float> w = {1.0f, std::numeric_limits<float>::quiet_NaN()};
  std::vector<int8_t> out(2);
  EXPECT_THROW(quantize_rows_w8(w.data(), 1, 2, out.data(), sw.data()), Error);
}

}  // namespace
}  // namespace tessera::kernels
