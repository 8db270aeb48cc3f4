// QMoE (kernels/qmoe.h, quant/qmoe.h): the Tunstall code parses every
// sequence and gets near the symbols' entropy; a tensor's bytes decode to the
// ternary matrices that were encoded; every ISA's product gives the scalar
// reference's bits and a float64 dot product's value; corrupt bytes are
// refused by name; ternary GPTQ lowers the output error of rounding to
// nearest.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "core/error.h"
#include "kernels/qmoe.h"
#include "kernels/qmoe_kernels.h"
#include "quant/gptq.h"
#include "quant/qmoe.h"
#include "util/test_util.h"

namespace tessera::quant {
namespace {

// Random ternary matrices: zeros with probability p0, lo / hi otherwise.
std::vector<TernaryMatrix> random_matrices(int n, int64_t rows, int64_t cols, double p0, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<TernaryMatrix> out;
  for (int m = 0; m < n; ++m) {
    TernaryMatrix t{rows, cols, {}, {}, std::vector<uint8_t>(static_cast<size_t>(rows * cols))};
    for (int64_t r = 0; r < rows; ++r) {
      t.lo.push_back(-std::ldexp(1.0f, -static_cast<int>(rng() % 6)));  // exact in fp16
      t.hi.push_back(std::ldexp(1.0f, -static_cast<int>(rng() % 6)) * 0.75f);
    }
    for (uint8_t& s : t.sym) {
      const float v = u(rng);
      s = v < p0 ? kTernaryZero : v < p0 + (1 - p0) / 2 ? kTernaryLo : kTernaryHi;
    }
    out.push_back(std::move(t));
  }
  return out;
}

TEST(Qmoe, TunstallDictionaryIsACompleteCodeNearTheEntropy) {
  for (double p0 : {0.5, 0.8, 0.9, 0.97}) {
    const std::array<double, 3> p{p0, (1 - p0) / 2, (1 - p0) / 2};
    const auto d = tunstall_dictionary(p);
    // Complete and prefix-free: the probabilities of the 255 strings sum to 1.
    double total = 0.0, mean_len = 0.0;
    for (int i = 0; i < 255; ++i) {
      ASSERT_GE(d[i].length, 1);
      ASSERT_LE(d[i].length, 16);
      ASSERT_EQ(d[i].lo_mask & d[i].hi_mask, 0);
      double prob = 1.0;
      for (int j = 0; j < d[i].length; ++j) prob *= (d[i].lo_mask >> j & 1) ? p[1] : (d[i].hi_mask >> j & 1) ? p[2] : p[0];
      total += prob;
      mean_len += prob * d[i].length;
    }
    EXPECT_NEAR(total, 1.0, 1e-9) << p0;
    const double entropy = -(p[0] * std::log2(p[0]) + 2 * p[1] * std::log2(p[1]));
    // A codeword is a byte for at most 16 symbols: never under half a bit.
    EXPECT_LT(8.0 / mean_len, 1.3 * std::max(entropy, 0.5)) << "p0 " << p0 << ": " << 8.0 / mean_len << " bits per symbol";
    if (p0 == 0.9) {
      EXPECT_LT(8.0 / mean_len, 0.75);
    }
  }
}

TEST(Qmoe, TensorDecodesToTheMatricesEncoded) {
  const auto mats = random_matrices(3, 45, 100, 0.88, 1);  // 45 rows: groups of 32 cross matrices
  const std::vector<uint8_t> bytes = encode_qmoe(mats);
  EXPECT_EQ(kernels::qmoe_size(bytes.data(), bytes.size()), bytes.size());
  const kernels::QmoeView v = kernels::parse_qmoe(bytes.data(), bytes.size(), 100, 45, 3, "t");
  std::vector<float> row(100);
  for (int64_t m = 0; m < 3; ++m) {
    for (int64_t r = 0; r < 45; ++r) {
      kernels::qmoe_dequantize_row(v, m, r, row.data());
      for (int64_t c = 0; c < 100; ++c) ASSERT_EQ(row[c], mats[m].value(r, c)) << m << " " << r << " " << c;
    }
  }
  // Under a bit per weight at 88% zeros, dictionary, offsets and scales
  // included, once the matrices outweigh the 2 KiB dictionary.
  const auto big = random_matrices(8, 64, 512, 0.88, 2);
  const std::vector<uint8_t> big_bytes = encode_qmoe(big);
  EXPECT_LT(8.0 * static_cast<double>(big_bytes.size()) / (8 * 64 * 512), 1.0);
}

TEST(Qmoe, EveryIsaGivesTheReferenceBitsAndTheProduct) {
  for (int64_t cols : {16, 37, 256}) {
    const int64_t rows = 70, n_mat = 3;
    const auto mats = random_matrices(static_cast<int>(n_mat), rows, cols, 0.85, static_cast<uint32_t>(cols));
    const std::vector<uint8_t> bytes = encode_qmoe(mats);
    const kernels::QmoeView v = kernels::parse_qmoe(bytes.data(), bytes.size(), cols, rows, n_mat, "t");
    std::mt19937 rng(7);
    std::normal_distribution<float> nd;
    for (int64_t n : {1, 2, 3, 5, 9}) {
      std::vector<float> x(static_cast<size_t>(n * (cols + 3)));
      for (float& f : x) f = nd(rng);
      for (int64_t m = 0; m < n_mat; ++m) {
        std::vector<float> want(static_cast<size_t>(n * rows));
        kernels::KernelContext ref{nullptr, Isa::kScalar, nullptr};
        kernels::qmoe_matmul(v, m, x.data(), cols + 3, n, want.data(), rows, ref);
        for (int64_t t = 0; t < n; ++t) {
          for (int64_t r = 0; r < rows; ++r) {
            double dot = 0.0, mag = 0.0;
            for (int64_t c = 0; c < cols; ++c) {
              dot += static_cast<double>(mats[m].value(r, c)) * x[t * (cols + 3) + c];
              mag += std::abs(static_cast<double>(mats[m].value(r, c)) * x[t * (cols + 3) + c]);
            }
            ASSERT_NEAR(want[t * rows + r], dot, 1e-6 * mag + 1e-7) << cols << " " << m << " " << t << " " << r;
          }
        }
        ThreadPool pool(2);
        for (Isa isa : supported_isas()) {
          std::vector<float> got(want.size(), -1.0f);
          kernels::KernelContext ctx{&pool, isa, nullptr, /*force_parallel=*/true};
          kernels::qmoe_matmul(v, m, x.data(), cols + 3, n, got.data(), rows, ctx);
          ASSERT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * sizeof(float)))
              << isa_name(isa) << " cols " << cols << " n " << n << " matrix " << m;
        }
      }
    }
  }
}

TEST(Qmoe, CorruptTensorsAreRefusedByName) {
  const auto mats = random_matrices(2, 40, 64, 0.9, 3);
  const std::vector<uint8_t> good = encode_qmoe(mats);
  auto expect_refused = [&](std::vector<uint8_t> b, size_t avail, const std::string& want) {
    try {
      kernels::parse_qmoe(b.data(), avail, 64, 40, 2, "blk.0.ffn_up_exps.weight");
      ADD_FAILURE() << "accepted; wanted: " << want;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("'blk.0.ffn_up_exps.weight'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  };
  expect_refused(good, good.size() - 8, "bytes declared");
  std::vector<uint8_t> b = good;
  b[0] = 'X';
  expect_refused(b, b.size(), "no QMOE header");
  b = good;
  b[32 + 8 * 5 + 4] = 0;  // entry 5's length
  expect_refused(b, b.size(), "dictionary entry 5");
  b = good;
  b[32 + 8 * 7 + 4] = 17;
  expect_refused(b, b.size(), "dictionary entry 7");
  b = good;
  const size_t starts = 32 + 2048 + 80 * 4;
  b[starts + 4] = 0xff;  // group 1 starts past the codes
  b[starts + 5] = 0xff;
  expect_refused(b, b.size(), "group");
  b = good;
  b[starts + 4] += 1;  // group 1 starts one codeword late: group 0's rows end before it
  expect_refused(b, b.size(), "do not cover its rows");
  // The bytes of another shape (one row more per matrix).
  try {
    kernels::parse_qmoe(good.data(), good.size(), 64, 41, 2, "t");
    ADD_FAILURE() << "a tensor of 2 x 40 rows read as 2 x 41";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bytes"), std::string::npos) << e.what();
  }
}

TEST(Qmoe, GptqLowersTheOutputErrorOfRounding) {
  const int64_t rows = 24, cols = 64, n = 512;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  std::vector<float> w(static_cast<size_t>(rows * cols));
  for (float& f : w) f = nd(rng);
  // Correlated inputs: x = A z.
  std::vector<double> xs(static_cast<size_t>(n * cols));
  std::vector<float> a(static_cast<size_t>(cols * 8));
  for (float& f : a) f = nd(rng);
  for (int64_t t = 0; t < n; ++t) {
    float z[8];
    for (float& f : z) f = nd(rng);
    for (int64_t c = 0; c < cols; ++c) {
      double v = 0.1 * nd(rng);
      for (int k = 0; k < 8; ++k) v += a[c * 8 + k] * z[k];
      xs[t * cols + c] = v;
    }
  }
  std::vector<double> h(static_cast<size_t>(cols * cols), 0.0);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t i = 0; i < cols; ++i) {
      for (int64_t j = 0; j < cols; ++j) h[i * cols + j] += xs[t * cols + i] * xs[t * cols + j];
    }
  }
  const TernaryMatrix rtn = ternary_rtn(w.data(), rows, cols);
  const TernaryMatrix gq = ternary_gptq(w.data(), rows, cols, h, GptqOptions{}, nullptr);
  std::vector<float> qr(w.size()), qg(w.size());
  for (int64_t r = 0; r < rows; ++r) {
    EXPECT_EQ(rtn.lo[r], gq.lo[r]);
    EXPECT_EQ(rtn.hi[r], gq.hi[r]);
    for (int64_t c = 0; c < cols; ++c) {
      qr[r * cols + c] = rtn.value(r, c);
      qg[r * cols + c] = gq.value(r, c);
    }
  }
  const double er = output_error(w.data(), qr.data(), rows, cols, h);
  const double eg = output_error(w.data(), qg.data(), rows, cols, h);
  EXPECT_LT(eg, 0.8 * er) << "GPTQ " << eg << " vs RTN " << er;
}

}  // namespace
}  // namespace tessera::quant
