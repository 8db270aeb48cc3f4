// Pruning (quant/prune.h) and the pruned files of tessera prune:
//  * prune_matrix against a reference written differently (every row's
//    scores fully sorted; N:M groups by brute force);
//  * Wanda's score uses the input norms: a column with a large input keeps
//    its small weights where magnitude drops them;
//  * stories260K pruned into SP_Q8_0 / SP_Q4_0 loads, keeps exactly the
//    F32-pruned file's zero pattern, and its logits match the numpy
//    reference reading the same file (tests/reference/gguf_ref.py decodes
//    the sparse layout from the format description);
//  * bad options are errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/sequence_runner.h"
#include "kernels/sparse.h"
#include "model/weights.h"
#include "quant/prune.h"
#include "quant/quantize_model.h"
#include "util/test_util.h"

namespace tessera::quant {
namespace {

std::vector<float> random_matrix(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> w(static_cast<size_t>(rows * cols));
  for (float& x : w) x = n(rng);
  return w;
}

// The kept columns of each row by a full sort of its scores (stable: ties
// keep the lower column first among the dropped).
std::vector<std::vector<bool>> reference_keep(const std::vector<float>& w, int64_t rows, int64_t cols,
                                              const std::vector<float>& norms, double sparsity) {
  std::vector<std::vector<bool>> keep(static_cast<size_t>(rows), std::vector<bool>(static_cast<size_t>(cols), true));
  const int64_t drop = std::llround(sparsity * static_cast<double>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<std::pair<double, int64_t>> s;
    for (int64_t c = 0; c < cols; ++c) {
      const double score = std::fabs(static_cast<double>(w[static_cast<size_t>(r * cols + c)])) *
                           (norms.empty() ? 1.0 : static_cast<double>(norms[static_cast<size_t>(c)]));
      s.emplace_back(score, c);
    }
    std::stable_sort(s.begin(), s.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (int64_t k = 0; k < drop; ++k) keep[static_cast<size_t>(r)][static_cast<size_t>(s[static_cast<size_t>(k)].second)] = false;
  }
  return keep;
}

TEST(PruneMatrix, UnstructuredDropsTheLowestScoresOfEachRow) {
  const int64_t rows = 17, cols = 100;
  std::vector<float> norms(static_cast<size_t>(cols));
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(0.1f, 10.0f);
  for (float& x : norms) x = u(rng);
  for (PruneMethod method : {PruneMethod::kMagnitude, PruneMethod::kWanda}) {
    for (double s : {0.0, 0.3, 0.5, 0.63}) {
      std::vector<float> w = random_matrix(rows, cols, 11);
      const std::vector<float> orig = w;
      PruneOptions o;
      o.method = method;
      o.sparsity = s;
      const bool wanda = method == PruneMethod::kWanda;
      const int64_t kept = prune_matrix(w.data(), rows, cols, wanda ? norms : std::vector<float>(), o);
      const auto keep = reference_keep(orig, rows, cols, wanda ? norms : std::vector<float>(), s);
      int64_t want = 0;
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
          const size_t i = static_cast<size_t>(r * cols + c);
          const bool k = keep[static_cast<size_t>(r)][static_cast<size_t>(c)];
          want += k;
          EXPECT_EQ(w[i], k ? orig[i] : 0.0f) << prune_method_name(method) << " " << s << " row " << r << " col " << c;
        }
      }
      EXPECT_EQ(kept, want);
      EXPECT_EQ(kept, rows * (cols - std::llround(s * cols)));
    }
  }
}

TEST(PruneMatrix, NMKeepsNOfEveryMConsecutive) {
  const int64_t rows = 9, cols = 64;
  for (const auto& [n, m] : {std::pair<int, int>{2, 4}, {4, 8}, {1, 4}}) {
    std::vector<float> w = random_matrix(rows, cols, 3);
    const std::vector<float> orig = w;
    PruneOptions o;
    o.method = PruneMethod::kMagnitude;
    o.n = n;
    o.m = m;
    prune_matrix(w.data(), rows, cols, {}, o);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t g = 0; g < cols; g += m) {
        int nonzero = 0;
        float min_kept = INFINITY, max_dropped = 0.0f;
        for (int64_t c = g; c < g + m; ++c) {
          const size_t i = static_cast<size_t>(r * cols + c);
          if (w[i] != 0.0f) {
            ++nonzero;
            EXPECT_EQ(w[i], orig[i]);
            min_kept = std::min(min_kept, std::fabs(orig[i]));
          } else {
            max_dropped = std::max(max_dropped, std::fabs(orig[i]));
          }
        }
        EXPECT_EQ(nonzero, n) << n << ":" << m;
        EXPECT_GE(min_kept, max_dropped) << n << ":" << m;
      }
    }
  }
}

TEST(PruneMatrix, WandaKeepsSmallWeightsOfLargeInputs) {
  // Column 0 has small weights but an input 100x larger than the others'.
  const int64_t rows = 4, cols = 8;
  std::vector<float> w(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) w[static_cast<size_t>(r * cols + c)] = c == 0 ? 0.05f : 0.1f * static_cast<float>(c);
  }
  std::vector<float> norms(static_cast<size_t>(cols), 1.0f);
  norms[0] = 100.0f;
  PruneOptions o;
  o.sparsity = 0.5;
  std::vector<float> a = w, b = w;
  o.method = PruneMethod::kMagnitude;
  prune_matrix(a.data(), rows, cols, {}, o);
  o.method = PruneMethod::kWanda;
  prune_matrix(b.data(), rows, cols, norms, o);
  for (int64_t r = 0; r < rows; ++r) {
    EXPECT_EQ(a[static_cast<size_t>(r * cols)], 0.0f);
    EXPECT_EQ(b[static_cast<size_t>(r * cols)], 0.05f);
  }
}

TEST(PruneOptions, BadValuesAreErrors) {
  PruneOptions o;
  EXPECT_THROW(parse_nm("2-4", &o), Error);
  EXPECT_THROW(parse_nm("4:4", &o), Error);
  EXPECT_THROW(parse_nm("2:3", &o), Error);  // 3 does not divide 64
  EXPECT_THROW(parse_nm("a:b", &o), Error);
  EXPECT_THROW(parse_prune_method("sparsegpt"), Error);
  parse_nm("2:4", &o);
  EXPECT_EQ(o.n, 2);
  EXPECT_EQ(o.m, 4);
  EXPECT_TRUE(prunable("blk.3.ffn_down.weight"));
  EXPECT_TRUE(prunable("blk.0.attn_q.weight"));
  EXPECT_FALSE(prunable("output.weight"));
  EXPECT_FALSE(prunable("token_embd.weight"));
  EXPECT_FALSE(prunable("blk.0.ffn_gate_exps.weight"));
  EXPECT_FALSE(prunable("blk.0.attn_norm.weight"));
  EXPECT_FALSE(prunable("blk..attn_q.weight"));
  EXPECT_FALSE(prunable("blk.1.attn_q.weight.x"));
  EXPECT_FALSE(prunable("xblk.1.attn_q.weight"));
}

TEST(PruneModel, Stories260KSparseFilesKeepThePrunedPatternAndMatchNumpy) {
  const auto& m = testing::stories260k();
  ThreadPool pool(2);
  WholeCalibration stats(testing::stories260k_calibration());
  QuantizeOptions f32;
  f32.type = DType::kF32;
  f32.prune = PruneOptions{};  // Wanda, 50%
  const std::string dense_path = testing::temp_path("s260k_wanda_f32.gguf");
  quantize_model(*m.lm.file, dense_path, f32, &stats, pool);
  const LoadedModel dense = load_model(dense_path);
  for (DType type : {DType::kSpQ8_0, DType::kSpQ4_0}) {
    QuantizeOptions sp = f32;
    sp.type = type;
    const std::string path = testing::temp_path(std::string("s260k_wanda_") + std::string(dtype_name(type)) + ".gguf");
    const QuantizeResult res = quantize_model(*m.lm.file, path, sp, &stats, pool);
    EXPECT_LT(res.bits_per_weight(), type == DType::kSpQ8_0 ? 6.6 : 4.6);
    const LoadedModel q = load_model(path);
    int sparse = 0;
    for (const gguf::TensorInfo& t : q.file->tensors()) {
      if (!prunable(t.name)) {
        if (t.n_dims == 2) {
          EXPECT_FALSE(kernels::is_sparse(t.type)) << t.name;
        }
        continue;
      }
      ASSERT_EQ(t.type, type) << t.name;
      ++sparse;
      const kernels::SparseView v = kernels::parse_sparse(t.data, t.n_bytes, t.ne[0], t.ne[1], t.name.c_str());
      const gguf::TensorInfo& d = dense.file->tensor(t.name);
      const auto* dw = reinterpret_cast<const float*>(d.data);
      const int64_t cols = d.ne[0], nb = t.ne[0] / 64;
      int64_t zeros = 0;
      for (int64_t r = 0; r < t.ne[1]; ++r) {
        const std::vector<uint64_t> masks = kernels::sparse_row_masks(v, r);
        ASSERT_EQ(static_cast<int64_t>(masks.size()), nb);
        for (int64_t c = 0; c < t.ne[0]; ++c) {
          const bool kept = (masks[static_cast<size_t>(c / 64)] >> (c % 64)) & 1;
          const bool nonzero = c < cols && dw[r * cols + c] != 0.0f;
          ASSERT_EQ(kept, nonzero) << t.name << " row " << r << " col " << c;
          zeros += c < cols && !nonzero;
        }
      }
      EXPECT_EQ(zeros, std::llround(0.5 * static_cast<double>(cols)) * t.ne[1]) << t.name;
    }
    EXPECT_EQ(sparse, 5 * 7);
    testing::expect_logits_match_numpy(q, path, std::string("pruned-") + std::string(dtype_name(type)), pool);
  }
}

TEST(PruneModel, BadRequestsAreErrors) {
  const auto& m = testing::stories260k();
  ThreadPool pool(1);
  const std::string path = testing::temp_path("s260k_bad_prune.gguf");
  QuantizeOptions o;
  o.type = DType::kSpQ8_0;  // sparse without pruning
  EXPECT_THROW(quantize_model(*m.lm.file, path, o, nullptr, pool), Error);
  o.prune = PruneOptions{};  // Wanda without statistics
  EXPECT_THROW(quantize_model(*m.lm.file, path, o, nullptr, pool), Error);
  o.prune->method = PruneMethod::kMagnitude;
  o.method = Method::kGptq;  // pruning rounds to nearest only
  WholeCalibration stats(testing::stories260k_calibration());
  EXPECT_THROW(quantize_model(*m.lm.file, path, o, &stats, pool), Error);
}

}  // namespace
}  // namespace tessera::quant
