// Sparse weight matrices (kernels/sparse.h):
//  * the layout: encode -> parse -> dequantize gives each kept weight within
//    Q8_0's half step (Q4_0's whole step) of its value and exact zeros where
//    pruned, against scales computed here from the kept values;
//  * the kernels: on every table this machine runs, a sparse matrix
//    multiplies bit for bit as the dense Q8_0 / Q4_0 matrix it stands for
//    (sparse_dense_row) on that table and on the scalar table, for 1..33
//    tokens (decode tiles and the dense chunks), 1 and 2 threads, padded
//    inputs and row counts that are not a multiple of the tile;
//  * corrupt tensors are refused at parse with a one-line error.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/cpu.h"
#include "core/error.h"
#include "core/fp16.h"
#include "core/thread_pool.h"
#include "kernels/matmul.h"
#include "kernels/matmul_kernels.h"
#include "kernels/sparse.h"

namespace tessera::kernels {
namespace {

struct Table {
  std::string name;
  const MatmulKernels* kernels;
  bool available;
};

std::vector<Table> tables() {
  const bool avx2 = isa_supported(Isa::kAvx2), avx512 = isa_supported(Isa::kAvx512);
  return {{"scalar", &matmul_kernels_ref(), true},
          {"avx2", &matmul_kernels_avx2(), avx2},
          {"avx2_vnni_emulated", &matmul_kernels_avx2_vnni_emulated(), avx2},
          {"avx512", &matmul_kernels_avx512(), avx512},
          {"amx", &matmul_kernels_amx(), avx512 && amx_usable()}};
}

// Random weights with a fraction `sparsity` zeroed at random, plus whole
// super-blocks empty and whole ones full (row 0 all kept, row 1 block 0
// empty).
std::vector<float> pruned_weights(int64_t rows, int64_t cols, double sparsity, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f), p(0.0f, 1.0f);
  std::vector<float> w(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      float v = u(rng);
      if (v == 0.0f) v = 0.5f;
      const bool pruned = r == 0 ? false : (r == 1 && c < 64) ? true : p(rng) < sparsity;
      w[static_cast<size_t>(r * cols + c)] = pruned ? 0.0f : v;
    }
  }
  return w;
}

TEST(SparseLayout, RoundTripsWithinHalfAStep) {
  std::mt19937 rng(1);
  for (DType type : {DType::kSpQ8_0, DType::kSpQ4_0}) {
    for (double s : {0.0, 0.3, 0.5, 0.9}) {
      const int64_t rows = 13, cols = 192;
      const std::vector<float> w = pruned_weights(rows, cols, s, rng);
      const std::vector<uint8_t> bytes = encode_sparse(type, w.data(), rows, cols);
      const SparseView v = parse_sparse(bytes.data(), bytes.size(), cols, rows, "test");
      EXPECT_EQ(sparse_size(bytes.data(), bytes.size()), bytes.size());
      uint64_t kept = 0;
      for (float x : w) kept += x != 0.0f;
      EXPECT_EQ(v.kept, kept);
      std::vector<float> row(static_cast<size_t>(cols));
      for (int64_t r = 0; r < rows; ++r) {
        sparse_dequantize_row(v, r, row.data());
        for (int64_t b = 0; b < cols / 64; ++b) {
          float amax = 0.0f;
          for (int j = 0; j < 64; ++j) amax = std::max(amax, std::fabs(w[static_cast<size_t>(r * cols + 64 * b + j)]));
          // Q8_0 rounds to the nearest step; Q4_0's d = max / -8 puts the
          // extreme of the other sign at q = 16, clamped to 15: a whole step.
          // Both plus the fp16 rounding of d (|q| at most 127 or 8 steps).
          const bool q8 = type == DType::kSpQ8_0;
          const double step = q8 ? amax / 127.0 : amax / 8.0;
          const double bound = (q8 ? 0.5 + 127 * 0x1p-11 : 1.0 + 8 * 0x1p-11) * step + 1e-7;
          for (int j = 0; j < 64; ++j) {
            const size_t i = static_cast<size_t>(r * cols + 64 * b + j);
            if (w[i] == 0.0f) {
              EXPECT_EQ(row[static_cast<size_t>(64 * b + j)], 0.0f);
            } else {
              EXPECT_LE(std::fabs(row[static_cast<size_t>(64 * b + j)] - w[i]), bound)
                  << dtype_name(type) << " row " << r << " col " << 64 * b + j;
            }
          }
        }
      }
    }
  }
}

TEST(SparseLayout, HalfSparseIsSmallerThanDense) {
  std::mt19937 rng(2);
  const int64_t rows = 64, cols = 2048;
  const std::vector<float> w = pruned_weights(rows, cols, 0.5, rng);
  const size_t q8 = encode_sparse(DType::kSpQ8_0, w.data(), rows, cols).size();
  const size_t q4 = encode_sparse(DType::kSpQ4_0, w.data(), rows, cols).size();
  // Per 64 weights: 10 bytes of scale and mask, then the kept values.
  EXPECT_LT(static_cast<double>(q8) / static_cast<double>(row_bytes(DType::kQ8_0, cols) * rows), 0.64);
  EXPECT_LT(static_cast<double>(q4) / static_cast<double>(row_bytes(DType::kQ4_0, cols) * rows), 0.75);
}

// The dense Q8_0 / Q4_0 rows a sparse matrix multiplies as.
std::vector<uint8_t> dense_of(const SparseView& v) {
  const size_t rb = row_bytes(sparse_dense_type(v.type), v.cols);
  std::vector<uint8_t> d(rb * static_cast<size_t>(v.rows));
  for (int64_t r = 0; r < v.rows; ++r) sparse_dense_row(v, r, d.data() + rb * static_cast<size_t>(r));
  return d;
}

TEST(SparseKernels, BitIdenticalToTheDenseMatrixOnEveryTable) {
  std::mt19937 rng(3);
  ThreadPool pool2(2);
  for (DType type : {DType::kSpQ8_0, DType::kSpQ4_0}) {
    for (const auto& [rows, cols, x_cols] : {std::tuple<int64_t, int64_t, int64_t>{21, 128, 0}, {64, 256, 0},
                                             {8, 64, 0}, {70, 192, 172}, {5, 320, 0}}) {
      const std::vector<float> w = pruned_weights(rows, cols, 0.55, rng);
      const std::vector<uint8_t> bytes = encode_sparse(type, w.data(), rows, cols);
      const SparseView v = parse_sparse(bytes.data(), bytes.size(), cols, rows, "test");
      const std::vector<uint8_t> dense = dense_of(v);
      WeightView sw{type, bytes.data(), rows, cols, 0, x_cols};
      WeightView dw{sparse_dense_type(type), dense.data(), rows, cols, row_bytes(sparse_dense_type(type), cols), x_cols};
      const PreparedWeight dp = prepare_weight(dw);
      const int64_t in = x_cols > 0 ? x_cols : cols;
      for (int64_t n : {1, 2, 3, 4, 5, 9, 33}) {
        std::uniform_real_distribution<float> u(-2.0f, 2.0f);
        std::vector<float> x(static_cast<size_t>(n * in));
        for (float& e : x) e = u(rng);
        std::vector<float> ref(static_cast<size_t>(n * rows));
        KernelContext one;
        matmul_with(matmul_kernels_ref(), dw, x.data(), in, n, ref.data(), rows, one);
        for (const Table& t : tables()) {
          if (!t.available) continue;
          for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool2}) {
            KernelContext ctx;
            ctx.pool = pool;
            ctx.force_parallel = pool != nullptr;
            std::vector<float> ys(ref.size(), -1.0f), yd(ref.size(), -2.0f);
            matmul_with(*t.kernels, sw, x.data(), in, n, ys.data(), rows, ctx);
            matmul_with(*t.kernels, dp, x.data(), in, n, yd.data(), rows, ctx);
            const std::string what = std::string(dtype_name(type)) + " " + t.name + " " + std::to_string(rows) + "x" +
                                     std::to_string(cols) + " tokens " + std::to_string(n) +
                                     (pool ? " 2 threads" : " 1 thread");
            EXPECT_EQ(std::memcmp(ys.data(), yd.data(), ys.size() * sizeof(float)), 0) << what << " (sparse vs dense)";
            EXPECT_EQ(std::memcmp(ys.data(), ref.data(), ys.size() * sizeof(float)), 0) << what << " (vs scalar dense)";
          }
        }
      }
    }
  }
}

TEST(SparseKernels, ThroughPreparedWeightAndMatmul) {
  std::mt19937 rng(4);
  const int64_t rows = 40, cols = 128;
  const std::vector<float> w = pruned_weights(rows, cols, 0.5, rng);
  const std::vector<uint8_t> bytes = encode_sparse(DType::kSpQ8_0, w.data(), rows, cols);
  const PreparedWeight p = prepare_weight({DType::kSpQ8_0, bytes.data(), rows, cols, 0});
  EXPECT_TRUE(p.packed.empty());
  EXPECT_TRUE(matmul_supports(DType::kSpQ8_0));
  std::vector<float> x(static_cast<size_t>(cols), 0.25f), y(static_cast<size_t>(rows)), yr(y.size());
  KernelContext ctx;
  ctx.isa = active_isa();
  matmul(p, x.data(), cols, 1, y.data(), rows, ctx);
  matmul_with(matmul_kernels_ref(), p, x.data(), cols, 1, yr.data(), rows, KernelContext{});
  EXPECT_EQ(std::memcmp(y.data(), yr.data(), y.size() * sizeof(float)), 0);
  // And close to the float product of the kept weights.
  for (int64_t r = 0; r < rows; ++r) {
    double want = 0.0;
    for (int64_t c = 0; c < cols; ++c) want += 0.25 * w[static_cast<size_t>(r * cols + c)];
    EXPECT_NEAR(y[static_cast<size_t>(r)], want, 0.05);
  }
}

void expect_corrupt(std::vector<uint8_t> bytes, int64_t cols, int64_t rows, const std::string& why) {
  try {
    parse_sparse(bytes.data(), bytes.size(), cols, rows, "t");
    ADD_FAILURE() << "accepted: " << why;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kCorruptFile) << why;
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << why;
  }
}

// A part (a tensor-parallel rank's rows or columns) is a tensor of its own
// that parses, with each row's masks, scales and values those of the
// whole's rows at those columns; bad bounds are refused.
TEST(SparseLayout, PartsHoldTheWholesRowsAndColumns) {
  std::mt19937 rng(5);
  const int64_t rows = 40, cols = 256;  // a last group of 8 rows
  const std::vector<float> w = pruned_weights(rows, cols, 0.5, rng);
  for (DType type : {DType::kSpQ8_0, DType::kSpQ4_0}) {
    const std::vector<uint8_t> bytes = encode_sparse(type, w.data(), rows, cols);
    const SparseView whole = parse_sparse(bytes.data(), bytes.size(), cols, rows, "whole");
    struct Part { int64_t r0, nr, c0, nc; };
    for (const Part p : {Part{0, 16, 0, 256}, Part{16, 24, 0, 256}, Part{0, 40, 128, 128}, Part{16, 16, 64, 128}}) {
      const std::vector<uint8_t> part = sparse_part(whole, p.r0, p.nr, p.c0, p.nc);
      const SparseView v = parse_sparse(part.data(), part.size(), p.nc, p.nr, "part");
      std::vector<int8_t> a(static_cast<size_t>(cols)), b(static_cast<size_t>(p.nc));
      for (int64_t r = 0; r < p.nr; ++r) {
        sparse_row_levels(whole, p.r0 + r, a.data());
        sparse_row_levels(v, r, b.data());
        ASSERT_TRUE(std::equal(b.begin(), b.end(), a.begin() + p.c0)) << dtype_name(type) << " row " << r;
        const std::vector<uint16_t> da = sparse_row_scales(whole, p.r0 + r), db = sparse_row_scales(v, r);
        ASSERT_TRUE(std::equal(db.begin(), db.end(), da.begin() + p.c0 / 64)) << dtype_name(type) << " row " << r;
      }
    }
    EXPECT_THROW(sparse_part(whole, 8, 16, 0, 256), Error);   // not a whole group
    EXPECT_THROW(sparse_part(whole, 0, 16, 32, 128), Error);  // not a whole super-block
    EXPECT_THROW(sparse_part(whole, 16, 32, 0, 256), Error);  // past the last row
  }
}

TEST(SparseLayout, CorruptTensorsAreRefused) {
  std::mt19937 rng(5);
  const int64_t rows = 20, cols = 128;
  const std::vector<float> w = pruned_weights(rows, cols, 0.5, rng);
  const std::vector<uint8_t> good = encode_sparse(DType::kSpQ8_0, w.data(), rows, cols);
  const SparseView v = parse_sparse(good.data(), good.size(), cols, rows, "t");
  // Group 0's first super-block: 16 tile masks, 16 scales, then the values.
  const size_t starts = kSparseHeaderBytes;
  const size_t head = static_cast<size_t>(v.streams - good.data());
  const size_t pad = head + v.stream_bytes;
  auto with = [&](size_t at, const void* p, size_t n) {
    std::vector<uint8_t> b = good;
    std::memcpy(b.data() + at, p, n);
    return b;
  };
  expect_corrupt(std::vector<uint8_t>(good.begin(), good.begin() + 32), cols, rows, "truncated header");
  expect_corrupt(std::vector<uint8_t>(good.begin(), good.end() - 8), cols, rows, "truncated");
  expect_corrupt(with(0, "SPRX", 4), cols, rows, "magic");
  const uint32_t v2 = kSparseVersion + 1, vt = 5;
  expect_corrupt(with(4, &v2, 4), cols, rows, "version");
  expect_corrupt(with(16, &vt, 4), cols, rows, "value type");
  expect_corrupt(good, cols, rows + 1, "shape");
  const uint16_t nan = 0x7e00, inf = 0x7c00;
  expect_corrupt(with(head + 128 + 2 * 3, &nan, 2), cols, rows, "NaN scale");
  expect_corrupt(with(head + 128, &inf, 2), cols, rows, "inf scale");
  // Group 0's last super-block's last tile: one value more or less than
  // the group's stream holds. (A mask changed earlier in a stream can shift
  // the reading of what follows into another self-consistent layout: the
  // checks are structural, they keep every read in bounds, not a checksum.)
  size_t last = head + kSparseBlockHead;
  for (int j = 0; j < 16; ++j) {
    uint64_t mj;
    std::memcpy(&mj, good.data() + head + 8 * j, 8);
    last += static_cast<size_t>(std::popcount(mj));
  }
  uint64_t m;
  std::memcpy(&m, good.data() + last + 8 * 15, 8);
  m ^= 1;
  expect_corrupt(with(last + 8 * 15, &m, 8), cols, rows, "mask");
  const uint64_t s = v.group_start[1] + 1;
  expect_corrupt(with(starts + 8, &s, 8), cols, rows, "group start");
  // Rows 20..31 are padding in group 1: they must stay empty.
  const size_t group1 = head + v.group_start[1];
  const uint16_t one_h = 0x3c00;
  expect_corrupt(with(group1 + 128 + 2 * 5, &one_h, 2), cols, rows, "padding row's scale");
  uint64_t m1;
  std::memcpy(&m1, good.data() + group1, 8);
  m1 |= uint64_t{1} << (4 * 6);  // row 22, column 0: a value more, and a padding row's
  expect_corrupt(with(group1, &m1, 8), cols, rows, "padding row's weight");
  const uint8_t one = 1;
  expect_corrupt(with(pad, &one, 1), cols, rows, "padding");
}

}  // namespace
}  // namespace tessera::kernels
