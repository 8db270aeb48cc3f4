// When the kernels use the thread pool (kernel_context.h's cost model), and
// that what the pool does never changes the bits:
//  - a matmul or an attention call below its threshold runs on the caller
//    (no dispatch, counted by ThreadPool::stats()), one at the threshold
//    dispatches; both give the bits of the caller alone;
//  - stories260K decodes 256 tokens without a single dispatch;
//  - an adaptive pool narrowing (a held worker), running narrowed, probing
//    and (load permitting) widening again gives the bits of one thread, for
//    decode and prefill matmuls and attention.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <random>
#include <vector>

#include "core/cpu.h"
#include "engine/sequence_runner.h"
#include "kernels/attention.h"
#include "kernels/matmul.h"
#include "kernels/quant.h"
#include "model/model.h"
#include "util/test_util.h"

namespace tessera::kernels {
namespace {

struct Weight {
  std::vector<uint8_t> bytes;
  PreparedWeight prepared;
};

Weight random_weight(DType type, int64_t rows, int64_t cols, std::mt19937& rng) {
  std::normal_distribution<float> g(0.0f, 0.1f);
  Weight w;
  const size_t rb = row_bytes(type, cols);
  w.bytes.resize(rb * static_cast<size_t>(rows));
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (float& v : row) v = g(rng);
    quantize_row(type, row.data(), w.bytes.data() + rb * static_cast<size_t>(r), cols);
  }
  w.prepared = prepare_weight({type, w.bytes.data(), rows, cols, rb});
  return w;
}

std::vector<float> random_vector(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = g(rng);
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// y = W x for n tokens on `pool` (null: the caller), and whether the pool
// was dispatched to.
std::vector<float> product(const Weight& w, const std::vector<float>& x, int64_t n, ThreadPool* pool, bool* dispatched) {
  Workspace ws;
  const KernelContext ctx{pool, active_isa(), &ws};
  const int64_t before = pool != nullptr ? pool->stats().dispatches : 0;
  std::vector<float> y(static_cast<size_t>(n * w.prepared.view.rows), -1.0f);
  matmul(w.prepared, x.data(), w.prepared.view.cols, n, y.data(), w.prepared.view.rows, ctx);
  if (dispatched != nullptr) *dispatched = pool != nullptr && pool->stats().dispatches > before;
  return y;
}

TEST(ParallelDispatch, MatmulBelowThresholdRunsOnTheCaller) {
  std::mt19937 rng(5);
  ThreadPool pool(2);
  for (DType type : {DType::kF32, DType::kQ8_0}) {
    const int64_t cols = 64;
    const int64_t threshold = type == DType::kF32 ? kMinParallelFloatMatmulMacs : kMinParallelQuantMatmulMacs;
    const int64_t below = threshold / cols - 8, at = threshold / cols;
    for (int64_t n : {int64_t{1}, int64_t{3}}) {
      for (int64_t rows : {below / n, at / n + 8}) {
        const Weight w = random_weight(type, rows, cols, rng);
        const std::vector<float> x = random_vector(static_cast<size_t>(n * cols), rng);
        bool dispatched = false;
        const std::vector<float> got = product(w, x, n, &pool, &dispatched);
        EXPECT_EQ(dispatched, rows * cols * n >= threshold)
            << dtype_name(type) << " " << rows << " x " << cols << ", " << n << " tokens";
        EXPECT_TRUE(same_bits(got, product(w, x, n, nullptr, nullptr)));
      }
    }
  }
}

// One decode step of attention: n_heads query heads over kv_len keys.
struct AttentionCase {
  KvLayerView kv;
  std::vector<uint8_t> k, v;
  std::vector<int32_t> table;
  std::vector<float> q;
  AttentionSeq seq;
  AttentionShape shape;
};

AttentionCase attention_case(int n_heads, int n_kv_heads, int head_dim, int kv_len, std::mt19937& rng) {
  AttentionCase c;
  c.kv.type = DType::kF16;
  c.kv.block_size = 16;
  c.kv.n_kv_heads = n_kv_heads;
  c.kv.head_dim = head_dim;
  const int n_blocks = (kv_len + 15) / 16 + 1;
  c.k.resize(c.kv.block_bytes() * static_cast<size_t>(n_blocks));
  c.v.resize(c.k.size());
  for (auto& b : c.k) b = static_cast<uint8_t>(rng() & 0x3b);  // small finite f16 values
  for (auto& b : c.v) b = static_cast<uint8_t>(rng() & 0x3b);
  c.kv.k = c.k.data();
  c.kv.v = c.v.data();
  for (int i = 1; i < n_blocks; ++i) c.table.push_back(i);
  c.q = random_vector(static_cast<size_t>(n_heads * head_dim), rng);
  c.seq = {0, 1, kv_len, c.table.data()};
  c.shape = {n_heads, 1.0f / 8};
  return c;
}

std::vector<float> attend(const AttentionCase& c, ThreadPool* pool, bool* dispatched) {
  Workspace ws;
  const KernelContext ctx{pool, active_isa(), &ws};
  const int64_t before = pool != nullptr ? pool->stats().dispatches : 0;
  std::vector<float> out(c.q.size(), -1.0f);
  const int64_t stride = static_cast<int64_t>(c.q.size());
  paged_attention(c.kv, c.q.data(), stride, out.data(), stride, std::span<const AttentionSeq>(&c.seq, 1), c.shape, ctx);
  if (dispatched != nullptr) *dispatched = pool != nullptr && pool->stats().dispatches > before;
  return out;
}

TEST(ParallelDispatch, AttentionBelowThresholdRunsOnTheCaller) {
  std::mt19937 rng(6);
  ThreadPool pool(2);
  // stories260K's shape (8 heads over 4 KV heads of 8) and 110m's (12 of 64).
  for (auto [heads, kv_heads, hd] : {std::tuple{8, 4, 8}, std::tuple{12, 12, 64}}) {
    const int64_t per_key = int64_t{heads} * 2 * hd;
    const int below = static_cast<int>(kMinParallelAttentionMacs / per_key) - 1;
    const int at = static_cast<int>((kMinParallelAttentionMacs + per_key - 1) / per_key);
    for (int kv_len : {below, at}) {
      const AttentionCase c = attention_case(heads, kv_heads, hd, kv_len, rng);
      bool dispatched = false;
      const std::vector<float> got = attend(c, &pool, &dispatched);
      EXPECT_EQ(dispatched, kv_len == at) << heads << " heads of " << hd << ", " << kv_len << " keys";
      EXPECT_TRUE(same_bits(got, attend(c, nullptr, nullptr)));
    }
  }
}

// stories260K's dims are 64 wide: every call of a decode step, attention
// over the whole 256-token context included, is cheaper than a dispatch.
TEST(ParallelDispatch, Stories260KDecodesOnTheCallerAlone) {
  TESSERA_REQUIRE_SHARED("models/stories260K/stories260K.gguf");
  const LoadedModel lm = load_model(testing::stories260k_path());
  ThreadPool pool(2);
  engine::SequenceRunner runner(*lm.model, {.n_ctx = 512}, pool);
  int32_t tok = 1;
  for (int i = 0; i < 256; ++i) {
    const int32_t ids[1] = {tok};
    const std::span<const float> logits = runner.append(ids);
    tok = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  EXPECT_EQ(pool.stats().dispatches, 0);
}

// An adaptive pool through narrowing (worker held), narrowed running,
// failed probes, release, probing and widening: every product and
// attention output keeps the bits of the caller alone.
TEST(ParallelDispatch, AdaptiveWidthChangesKeepTheBits) {
  std::mt19937 rng(7);
  ThreadPool pool(2, ThreadPool::Mode::kAdaptive);
  // A decode product over the threshold (so are the attention and prefill calls).
  const Weight w = random_weight(DType::kQ8_0, kMinParallelQuantMatmulMacs / 256 + 128, 256, rng);
  const std::vector<float> x1 = random_vector(256, rng), x5 = random_vector(5 * 256, rng);
  const std::vector<float> want1 = product(w, x1, 1, nullptr, nullptr), want5 = product(w, x5, 5, nullptr, nullptr);
  const AttentionCase att = attention_case(12, 4, 64, 200, rng);
  const std::vector<float> want_att = attend(att, nullptr, nullptr);
  std::atomic<bool> gate{false};
  pool.hold_worker_for_testing(1, &gate);
  // Decode, attention and prefill (whose activation quantization is
  // shared too): each completes without the held worker.
  auto check = [&](const char* phase, int i) {
    ASSERT_TRUE(same_bits(product(w, x1, 1, &pool, nullptr), want1)) << phase << " call " << i;
    ASSERT_TRUE(same_bits(attend(att, &pool, nullptr), want_att)) << phase << " call " << i;
    ASSERT_TRUE(same_bits(product(w, x5, 5, &pool, nullptr), want5)) << phase << " call " << i;
  };
  for (int i = 0; i < (ThreadPool::kWindow + 2) / 3; ++i) check("held", i);
  ASSERT_EQ(pool.width(), 1);  // a window of calls, every one late
  for (int i = 0; i < 2 * ThreadPool::kMinProbeInterval; ++i) check("narrowed", i);
  EXPECT_GE(pool.stats().probes, 1);
  gate = true;
  for (int i = 0; i < ThreadPool::kMaxProbeInterval && pool.width() == 1; ++i) check("released", i);
  // (Whether the worker keeps up now depends on the machine's load; that
  // the pool widens when it does is ThreadPool's own test.)
  for (int i = 0; i < 4 * ThreadPool::kWindow; ++i) check("after", i);
  pool.hold_worker_for_testing(1, nullptr);
}

}  // namespace
}  // namespace tessera::kernels
