// The tiled paged-attention kernels against the naive reference
// (materialised scores, exact softmax in double) on random shapes: head
// counts, GQA ratios, head dims 8/64/128, contexts 1..4096, block sizes,
// prefill chunks that start mid-block, several sequences per call, shuffled
// block tables, sliding windows, every KV type and ISA.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <string>
#include <limits>
#include <numeric>
#include <random>

#include "core/cpu.h"
#include "core/error.h"
#include "core/fp16.h"
#include "kernels/attention.h"
#include "kernels/quant.h"

namespace tessera::kernels {
namespace {

struct Case {
  int n_heads, n_kv_heads, head_dim, block_size;
  std::vector<std::pair<int, int>> seqs;  // (q_len, kv_len)
  DType type;
  int window = 0;  // sliding window; 0: full causal attention
  float softcap = 0.0f;  // logit soft-capping; 0: none
  std::vector<float> sinks = {};  // attention sinks, one per query head; empty: none
  bool hadamard = false;  // Q8_0 / Q4_0: K and V stored Hadamard-rotated
};

struct KvSetup {
  std::vector<uint8_t> k, v;
  KvLayerView kv;
  std::vector<std::vector<int32_t>> tables;
  std::vector<AttentionSeq> seqs;
  std::vector<float> q;
  int64_t stride = 0;
  int64_t rows = 0;
  double max_k = 0.0, max_v = 0.0;
};

KvSetup make(const Case& c, std::mt19937& rng) {
  KvSetup s;
  int total_blocks = 1;
  for (auto [ql, kl] : c.seqs) total_blocks += (kl + c.block_size - 1) / c.block_size;
  s.kv.type = c.type;
  s.kv.block_size = c.block_size;
  s.kv.n_kv_heads = c.n_kv_heads;
  s.kv.head_dim = c.head_dim;
  s.kv.hadamard = c.hadamard;
  s.k.resize(s.kv.block_bytes() * total_blocks);
  s.v.resize(s.kv.block_bytes() * total_blocks);
  s.kv.k = s.k.data();
  s.kv.v = s.v.data();
  // Physical blocks handed out in a shuffled order: tables are not contiguous.
  std::vector<int32_t> ids(total_blocks - 1);
  std::iota(ids.begin(), ids.end(), 1);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  const int64_t kvw = static_cast<int64_t>(c.n_kv_heads) * c.head_dim;
  size_t next = 0;
  for (auto [ql, kl] : c.seqs) {
    std::vector<int32_t> t;
    for (int b = 0; b < (kl + c.block_size - 1) / c.block_size; ++b) t.push_back(ids[next++]);
    s.tables.push_back(t);
    // Fill the cache through store_kv, as the model does.
    std::vector<float> kr(static_cast<size_t>(kl * kvw)), vr(kr.size());
    for (auto& x : kr) s.max_k = std::max<double>(s.max_k, std::fabs(x = n01(rng) * 1.5f));
    for (auto& x : vr) s.max_v = std::max<double>(s.max_v, std::fabs(x = n01(rng)));
    std::vector<int64_t> slots;
    for (int p = 0; p < kl; ++p) slots.push_back(static_cast<int64_t>(t[p / c.block_size]) * c.block_size + p % c.block_size);
    store_kv(s.kv, kr.data(), vr.data(), kvw, slots.data(), kl, Isa::kScalar);
    if (c.type == DType::kQ8_0 || c.type == DType::kQ4_0) {
      // The reference reads the stored values: bound those (a quantized
      // value can exceed its input by the scale's fp16 rounding; a rotated
      // one, as the kernel reads it, by up to sqrt(run) times).
      std::vector<float> k2(kr.size()), v2(vr.size());
      gather_kv(s.kv, slots.data(), kl, k2.data(), v2.data(), kvw);
      const double grow = c.hadamard ? std::sqrt(static_cast<double>(c.head_dim & -c.head_dim)) : 1.0;
      for (float x : k2) s.max_k = std::max<double>(s.max_k, std::fabs(x) * grow);
      for (float x : v2) s.max_v = std::max<double>(s.max_v, std::fabs(x) * grow);
    }
  }
  s.stride = static_cast<int64_t>(c.n_heads) * c.head_dim + 3;  // padded rows
  for (size_t i = 0; i < c.seqs.size(); ++i) {
    s.seqs.push_back({static_cast<int32_t>(s.rows), c.seqs[i].first, c.seqs[i].second, s.tables[i].data()});
    s.rows += c.seqs[i].first;
  }
  s.q.resize(static_cast<size_t>(s.rows * s.stride));
  for (auto& x : s.q) x = n01(rng);
  return s;
}

void check_case(const Case& c, uint32_t seed) {
  std::mt19937 rng(seed);
  KvSetup s = make(c, rng);
  const AttentionShape shape{c.n_heads, 1.0f / std::sqrt(static_cast<float>(c.head_dim)), c.window, c.softcap,
                             c.sinks.empty() ? nullptr : c.sinks.data()};
  std::vector<float> ref(s.q.size(), 0.0f);
  paged_attention_naive(s.kv, s.q.data(), s.stride, ref.data(), s.stride, s.seqs, shape);
  // Error bound: outputs are convex combinations of V rows. A score error
  // ds changes the weights by a factor exp(+-2 ds), so |dout| <= max|V| *
  // (exp(2 ds) - 1) with ds = hd * eps32 * max sum|q k| * scale (f32
  // accumulation of the dot), plus the exp approximation (2e-7 relative)
  // and the f32 weighted sum (hd-independent: context * eps32 * max|V|).
  double max_qk = 0.0;  // max over rows and heads of sum_d |q_d| |k_d|
  for (int r = 0; r < s.rows; ++r) {
    for (int h = 0; h < c.n_heads; ++h) {
      double qa = 0;
      for (int d = 0; d < c.head_dim; ++d) qa += std::fabs(s.q[r * s.stride + h * c.head_dim + d]);
      max_qk = std::max(max_qk, qa * s.max_k);
    }
  }
  const double max_v = s.max_v;
  int max_ctx = 0;
  for (auto [ql, kl] : c.seqs) max_ctx = std::max(max_ctx, kl);
  const double eps = std::numeric_limits<float>::epsilon();
  // Soft-capping is 1-Lipschitz, so it does not grow ds; its own rounding
  // (cap - 2 cap / (exp + 1) cancels near 0: a few eps of cap, plus the
  // vector exp's 2e-7) comes on top.
  const double ds = c.head_dim * eps * max_qk * shape.scale + c.softcap * (4 * eps + 2e-7);
  double tol = max_v * (std::exp(2.0 * ds) - 1.0 + 4e-7 + 2.0 * max_ctx * eps) + 1e-6;
  if (c.hadamard) {
    // The kernel works on rotated queries (|q'|_1 <= sqrt(run) |q|_1, covered
    // by max_k's growth above) and rotates each output back: log2(run)
    // roundings of sums of |out'| <= max_v.
    const int run = c.head_dim & -c.head_dim;
    tol += 2.0 * std::log2(static_cast<double>(run)) * eps * max_v * std::sqrt(static_cast<double>(run));
  }
  for (Isa isa : supported_isas()) {
    ThreadPool pool(2);
    Workspace ws;
    KernelContext ctx{&pool, isa, &ws};
    std::vector<float> out(s.q.size(), -7.0f);
    paged_attention(s.kv, s.q.data(), s.stride, out.data(), s.stride, s.seqs, shape, ctx);
    double worst = 0.0;
    for (int r = 0; r < s.rows; ++r) {
      for (int i = 0; i < c.n_heads * c.head_dim; ++i) {
        worst = std::max(worst, std::fabs(static_cast<double>(out[r * s.stride + i]) - ref[r * s.stride + i]));
      }
      // The padding after each row is never written.
      for (int i = c.n_heads * c.head_dim; i < s.stride; ++i) ASSERT_EQ(out[r * s.stride + i], -7.0f);
    }
    EXPECT_LE(worst, tol) << isa_name(isa) << " heads " << c.n_heads << "/" << c.n_kv_heads << " hd "
                          << c.head_dim << " bs " << c.block_size << " type " << dtype_name(c.type) << " window "
                          << c.window << " softcap " << c.softcap << " hadamard " << c.hadamard;
  }
}

TEST(Attention, DecodeAndPrefillMatchNaiveOnFixedShapes) {
  uint32_t seed = 1;
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int hd : {8, 64, 128}) {
      for (int bs : {1, 16, 7, 32}) {
        check_case({8, 2, hd, bs, {{1, 1}, {1, 37}, {5, 5}, {16, 100}, {17, 40}, {3, 64}}, t}, seed++);
      }
    }
  }
}

TEST(Attention, LongContextsUpTo4096) {
  uint32_t seed = 100;
  for (int hd : {64, 128}) {
    check_case({4, 4, hd, 16, {{1, 4096}, {2, 2049}, {24, 1000}}, DType::kF16}, seed++);
    check_case({8, 1, hd, 16, {{1, 4096}, {9, 3001}}, DType::kF32}, seed++);
  }
}

TEST(Attention, RandomShapes) {
  std::mt19937 rng(4242);
  for (int it = 0; it < 60; ++it) {
    const int kv_heads = 1 + static_cast<int>(rng() % 4);
    const int group = std::vector<int>{1, 2, 4, 8}[rng() % 4];
    const int hd = std::vector<int>{8, 16, 64, 128, 24}[rng() % 5];
    const int bs = 1 + static_cast<int>(rng() % 40);
    std::vector<std::pair<int, int>> seqs;
    for (int n = 1 + static_cast<int>(rng() % 4); n > 0; --n) {
      const int kl = 1 + static_cast<int>(rng() % 300);
      seqs.emplace_back(1 + static_cast<int>(rng() % std::min(kl, 40)), kl);
    }
    const DType t = std::vector<DType>{DType::kF32, DType::kF16, DType::kBF16}[rng() % 3];
    check_case({kv_heads * group, kv_heads, hd, bs, seqs, t}, static_cast<uint32_t>(rng()));
  }
}

// Sliding window (a query at p sees keys (p - window, p]) on every ISA
// against the naive reference, which computes dense scores and masks those
// before the window: windows of one key, shorter and longer than a block,
// not a multiple of it, and longer than the context; decode and prefill
// chunks that start mid-block; GQA; every KV type.
TEST(Attention, SlidingWindowMatchesDenseMaskedReference) {
  uint32_t seed = 500;
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int window : {1, 5, 16, 17, 40, 1000}) {
      for (int bs : {16, 7, 1, 32}) {
        check_case({8, 2, 64, bs, {{1, 1}, {1, 37}, {5, 5}, {16, 100}, {17, 40}, {3, 64}, {40, 90}}, t, window},
                   seed++);
      }
    }
  }
  std::mt19937 rng(4343);
  for (int it = 0; it < 40; ++it) {
    const int kv_heads = 1 + static_cast<int>(rng() % 3);
    const int group = std::vector<int>{1, 2, 4}[rng() % 3];
    const int hd = std::vector<int>{8, 16, 64, 128, 24}[rng() % 5];
    const int bs = 1 + static_cast<int>(rng() % 40);
    std::vector<std::pair<int, int>> seqs;
    for (int n = 1 + static_cast<int>(rng() % 3); n > 0; --n) {
      const int kl = 1 + static_cast<int>(rng() % 300);
      seqs.emplace_back(1 + static_cast<int>(rng() % std::min(kl, 40)), kl);
    }
    const int window = 1 + static_cast<int>(rng() % 120);
    check_case({kv_heads * group, kv_heads, hd, bs, seqs, DType::kF16, window}, static_cast<uint32_t>(rng()));
  }
}

// Logit soft-capping (Gemma 2: softcap * tanh(score / softcap)) on every ISA
// against the naive reference's std::tanh in double: caps that saturate most
// scores (1), some (4) and few (50), with and without a sliding window,
// decode and prefill, GQA, every KV type.
TEST(Attention, SoftcapMatchesNaiveReference) {
  uint32_t seed = 900;
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (float cap : {1.0f, 4.0f, 50.0f}) {
      for (int window : {0, 17}) {
        for (int bs : {16, 7}) {
          check_case({8, 2, 64, bs, {{1, 1}, {1, 37}, {16, 100}, {3, 64}, {40, 90}}, t, window, cap}, seed++);
        }
      }
    }
  }
  check_case({4, 4, 24, 5, {{7, 30}, {1, 13}}, DType::kF32, 0, 2.5f}, seed++);  // a head dim the vector kernels leave to the reference
}

// Attention sinks (gpt-oss: a per-head logit in the softmax's sum, with no
// value) on every ISA against the naive reference in double: sinks below,
// among and far above the scores (a sink of 30 leaves outputs near 0), with
// and without a window, decode and prefill, GQA, every KV type. The sink only
// lowers every weight by one factor, so the error bound of check_case holds.
TEST(Attention, SinksMatchNaiveReference) {
  uint32_t seed = 1200;
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int window : {0, 17}) {
      for (int bs : {16, 7}) {
        check_case({8, 2, 64, bs, {{1, 1}, {1, 37}, {16, 100}, {3, 64}, {40, 90}}, t, window, 0.0f,
                    {-30.0f, -2.0f, 0.0f, 0.5f, 1.5f, 3.0f, 8.0f, 30.0f}},
                   seed++);
      }
    }
  }
  check_case({4, 4, 24, 5, {{7, 30}, {1, 13}}, DType::kF32, 0, 0.0f, {1.0f, -1.0f, 4.0f, 0.0f}}, seed++);
  // The sink is really in the sum: a large sink scales a one-key row's output
  // (its V row) by 1 / (1 + exp(sink - score)).
  std::mt19937 rng(1300);
  KvSetup s = make({1, 1, 64, 16, {{1, 1}}, DType::kF32}, rng);
  const float sink = 2.0f;
  const AttentionShape plain{1, 0.125f}, with{1, 0.125f, 0, 0.0f, &sink};
  std::vector<float> a(s.q.size()), b(s.q.size());
  paged_attention_naive(s.kv, s.q.data(), s.stride, a.data(), s.stride, s.seqs, plain);
  paged_attention_naive(s.kv, s.q.data(), s.stride, b.data(), s.stride, s.seqs, with);
  double score = 0.0;
  const float* k0 = reinterpret_cast<const float*>(s.kv.k + s.tables[0][0] * s.kv.block_bytes());
  for (int d = 0; d < 64; ++d) score += static_cast<double>(s.q[d]) * k0[d * 16];
  score *= 0.125;
  for (int d = 0; d < 64; ++d) EXPECT_NEAR(b[d], a[d] / (1.0 + std::exp(sink - score)), 1e-6) << d;
}

// Keys before a decode token's window are never read: with them overwritten
// by NaN, every ISA still gives the result of the clean cache, finite.
TEST(Attention, SlidingWindowNeverReadsKeysBeforeTheWindow) {
  std::mt19937 rng(8);
  for (int bs : {16, 5}) {
    for (int window : {3, 16, 21}) {
      const int kv_len = 77;
      KvSetup s = make({4, 2, 64, bs, {{1, kv_len}}, DType::kF32}, rng);
      const AttentionShape shape{4, 0.125f, window};
      std::vector<float> want(s.q.size(), 0.0f);
      paged_attention_naive(s.kv, s.q.data(), s.stride, want.data(), s.stride, s.seqs, shape);
      const int64_t kvw = int64_t{2} * 64;
      std::vector<float> nan(static_cast<size_t>(kvw), std::numeric_limits<float>::quiet_NaN());
      for (int p = 0; p <= kv_len - 1 - window; ++p) {
        const int64_t slot = static_cast<int64_t>(s.tables[0][p / bs]) * bs + p % bs;
        store_kv(s.kv, nan.data(), nan.data(), kvw, &slot, 1, Isa::kScalar);
      }
      for (Isa isa : supported_isas()) {
        ThreadPool pool(2);
        Workspace ws;
        KernelContext ctx{&pool, isa, &ws};
        std::vector<float> got(s.q.size(), 0.0f);
        paged_attention(s.kv, s.q.data(), s.stride, got.data(), s.stride, s.seqs, shape, ctx);
        for (int i = 0; i < 4 * 64; ++i) {
          ASSERT_TRUE(std::isfinite(got[i])) << isa_name(isa) << " bs " << bs << " window " << window << " i " << i;
          ASSERT_NEAR(got[i], want[i], 1e-5) << isa_name(isa) << " bs " << bs << " window " << window << " i " << i;
        }
      }
    }
  }
}

TEST(Attention, ChunkBoundariesDoNotChangeResultsBitwise) {
  // The same queries computed as one chunk, or as the tail of a chunked
  // prefill (fewer query rows per call, down to one token: a decode step),
  // give identical rows: each row's arithmetic does not depend on which rows
  // share its work unit. Units of one or two rows (one token without GQA or
  // with 2 heads per KV head) read K/V in place instead of through f32
  // tiles; that path must give the same bits too, for every KV type.
  std::mt19937 rng(77);
  for (int n_kv : {8, 4, 2}) {  // GQA groups 1, 2, 4
    for (DType kv_type : {DType::kF16, DType::kF32, DType::kBF16, DType::kQ8_0, DType::kQ4_0}) {
      for (int window : {0, 9, 33}) {  // and with sliding windows
        KvSetup s = make({8, n_kv, 64, 16, {{40, 90}}, kv_type, 0, 0.0f, {}, kv_type == DType::kQ4_0}, rng);
        const AttentionShape shape{8, 0.125f, window};
        for (Isa isa : supported_isas()) {
          ThreadPool pool(2);
          Workspace ws;
          KernelContext ctx{&pool, isa, &ws};
          std::vector<float> whole(s.q.size());
          paged_attention(s.kv, s.q.data(), s.stride, whole.data(), s.stride, s.seqs, shape, ctx);
          for (int split : {1, 7, 16, 23, 39}) {
            std::vector<float> parts(s.q.size());
            std::vector<AttentionSeq> a = {{0, split, 90 - 40 + split, s.tables[0].data()}};
            std::vector<AttentionSeq> b = {{split, 40 - split, 90, s.tables[0].data()}};
            paged_attention(s.kv, s.q.data(), s.stride, parts.data(), s.stride, a, shape, ctx);
            paged_attention(s.kv, s.q.data(), s.stride, parts.data(), s.stride, b, shape, ctx);
            for (int r = 0; r < 40; ++r) {
              for (int i = 0; i < 8 * 64; ++i) {
                ASSERT_EQ(whole[r * s.stride + i], parts[r * s.stride + i])
                    << isa_name(isa) << " kv heads " << n_kv << " " << dtype_name(kv_type) << " split " << split
                    << " window " << window << " row " << r;
              }
            }
          }
        }
      }
    }
  }
}


// paged_attention() given the step's new K/V rows (the model's path) equals
// store_kv() then paged_attention(): the same output bits and the same cache
// bytes, whether the rows are written by the units that read them (every
// sequence with at most one query tile: decode batches, short chunks) or up
// front (a longer prefill chunk in the batch), on 2 and 3 threads.
TEST(Attention, NewRowsStoredInTheCallEqualStoreThenAttend) {
  std::mt19937 rng(99);
  const std::vector<std::vector<std::pair<int, int>>> batches = {
      {{1, 1}, {1, 37}, {1, 16}, {1, 100}},  // decode, 4 sequences
      {{16, 16}, {3, 50}, {1, 2}},           // chunks of one query tile
      {{1, 20}, {40, 90}, {2, 33}}};         // one chunk longer than a tile
  for (const auto& batch : batches) {
    for (DType kv_type : {DType::kF16, DType::kF32, DType::kBF16, DType::kQ8_0, DType::kQ4_0}) {
      const Case c{8, 4, 64, 16, batch, kv_type};
      KvSetup s = make(c, rng);
      const int64_t kvw = static_cast<int64_t>(c.n_kv_heads) * c.head_dim;
      // The new rows: each sequence's last q_len positions, read back from the full cache.
      std::vector<int64_t> slots;
      for (size_t i = 0; i < batch.size(); ++i) {
        for (int p = batch[i].second - batch[i].first; p < batch[i].second; ++p) {
          slots.push_back(static_cast<int64_t>(s.tables[i][p / c.block_size]) * c.block_size + p % c.block_size);
        }
      }
      const int64_t n = static_cast<int64_t>(slots.size());
      std::vector<float> k(static_cast<size_t>(n * kvw)), v(k.size());
      gather_kv(s.kv, slots.data(), n, k.data(), v.data(), kvw);
      const AttentionShape shape{c.n_heads, 0.125f};
      for (Isa isa : supported_isas()) {
        for (int threads : {2, 3}) {
          ThreadPool pool(threads);
          Workspace ws;
          KernelContext ctx{&pool, isa, &ws};
          std::vector<float> want(s.q.size(), 0.0f), got(s.q.size(), 0.0f);
          paged_attention(s.kv, s.q.data(), s.stride, want.data(), s.stride, s.seqs, shape, ctx);
          // A copy of the cache with the new rows overwritten by garbage.
          std::vector<uint8_t> k2 = s.k, v2 = s.v;
          KvLayerView kv2 = s.kv;
          kv2.k = k2.data();
          kv2.v = v2.data();
          std::vector<float> junk(k.size(), 1e4f);
          store_kv(kv2, junk.data(), junk.data(), kvw, slots.data(), n, Isa::kScalar);
          const NewKv fresh{k.data(), v.data(), kvw, slots.data(), n};
          paged_attention(kv2, s.q.data(), s.stride, got.data(), s.stride, s.seqs, shape, ctx, &fresh);
          const std::string what = std::string(isa_name(isa)) + " " + std::string(dtype_name(kv_type)) + " t" +
                                   std::to_string(threads) + " batch of " + std::to_string(batch.size());
          ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float))) << what;
          ASSERT_TRUE(k2 == s.k && v2 == s.v) << what;
        }
      }
    }
  }
}

// store_kv on every ISA writes exactly the bytes of the scalar conversions
// (core/fp16.h) for values that round up, down and to even, overflow to
// inf, fall into fp16's subnormals or under them, infinities, signed zeros
// and NaNs with payloads; head dims with a vector tail (72) and longer than
// the kernel's K buffer (160), slots in scattered blocks; the quantized
// types (one scalar codec, kv_codec.h) likewise.
TEST(Attention, StoredBytesEqualTheScalarConversionOnEveryIsa) {
  std::mt19937 rng(31);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> expo(-30, 20), coin(0, 1), special(0, 15);
  const float specials[] = {0.0f, -0.0f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                            65504.0f, 65519.99f, 65520.0f, 1e-8f, -3e-6f, 5.9604645e-8f, 2.9802322e-8f,
                            1.0009765625f + 0.00048828125f,  // halfway between two fp16 values: to even
                            std::bit_cast<float>(0x7fc12345u), std::bit_cast<float>(0xff812345u),
                            std::bit_cast<float>(0x3f808000u), std::bit_cast<float>(0x3f818000u)};
  for (int hd : {72, 160}) {
    const int n_kv_heads = 3, bs = 16, n = 19, blocks = 4;
    const int64_t kvw = int64_t{n_kv_heads} * hd;
    std::vector<float> k(static_cast<size_t>(n * kvw)), v(k.size());
    for (float* p : {k.data(), v.data()}) {
      for (size_t i = 0; i < k.size(); ++i) {
        p[i] = special(rng) == 0 ? specials[rng() % std::size(specials)]
                                 : (coin(rng) ? -1.0f : 1.0f) * std::ldexp(mant(rng), expo(rng));
      }
    }
    std::vector<int64_t> slots(n);
    for (int t = 0; t < n; ++t) slots[t] = (t * 7 + 3) % (blocks * bs);  // distinct, scattered
    for (DType type : {DType::kF16, DType::kBF16, DType::kF32, DType::kQ8_0, DType::kQ4_0}) {
      KvLayerView kv;
      kv.type = type;
      kv.block_size = bs;
      kv.n_kv_heads = n_kv_heads;
      kv.head_dim = hd;
      std::vector<uint8_t> want_k(kv.block_bytes() * blocks, 0xcd), want_v(want_k);
      kv.k = want_k.data();
      kv.v = want_v.data();
      store_kv(kv, k.data(), v.data(), kvw, slots.data(), n, Isa::kScalar);
      for (Isa isa : supported_isas()) {
        std::vector<uint8_t> got_k(want_k.size(), 0xcd), got_v(got_k);
        kv.k = got_k.data();
        kv.v = got_v.data();
        store_kv(kv, k.data(), v.data(), kvw, slots.data(), n, isa);
        const std::string what = std::string(isa_name(isa)) + " " + std::string(dtype_name(type)) + " hd " + std::to_string(hd);
        EXPECT_TRUE(got_k == want_k) << what;
        EXPECT_TRUE(got_v == want_v) << what;
      }
      if (type == DType::kF16) {  // the scalar path is the reference's own conversion
        const int64_t slot = slots[5];
        const fp16_t* vt = reinterpret_cast<const fp16_t*>(want_v.data() + (slot / bs) * kv.block_bytes() +
                                                           kv.tile_bytes());
        EXPECT_EQ(vt[(slot % bs) * hd + 4], f32_to_fp16(v[5 * kvw + hd + 4]));
      }
    }
  }
}

// Attention mass capture (H2O / SpAtten): the softmax weight each slot
// received, summed over rows and heads, equals the naive reference's on
// every ISA, for dense tables (prefill chunks, decode, GQA, windows) and
// mapped ones (scattered positions, empty slots); and capturing it changes
// no output bit.
TEST(Attention, KeyMassMatchesNaiveAndLeavesOutputsAlone) {
  std::mt19937 rng(1234);
  for (int window : {0, 7, 40}) {
    for (int bs : {16, 5}) {
      KvSetup s = make({8, 2, 64, bs, {{1, 37}, {20, 90}, {1, 1}, {3, 64}}, DType::kF16, window}, rng);
      const AttentionShape shape{8, 0.125f, window};
      // Mapped twin of sequence 3 (3 rows over 64 slots): positions
      // scattered over the slots, some slots empty.
      std::vector<int32_t> key_pos(s.tables[3].size() * bs, -1);
      std::vector<int32_t> order(64);
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), rng);
      for (int p = 0; p < 50; ++p) key_pos[order[p]] = p;
      std::vector<AttentionSeq> seqs = s.seqs;
      seqs[3].kv_len = static_cast<int32_t>(key_pos.size());
      seqs[3].key_pos = key_pos.data();
      seqs[3].q_pos = 47;
      std::vector<std::vector<int64_t>> want(seqs.size()), got(seqs.size());
      const int64_t base = 5 * kMassOne;  // the mass is added to what is there
      std::vector<float> ref(s.q.size());
      for (size_t i = 0; i < seqs.size(); ++i) {
        want[i].assign(static_cast<size_t>(seqs[i].kv_len), base);
        seqs[i].key_mass = want[i].data();
      }
      paged_attention_naive(s.kv, s.q.data(), s.stride, ref.data(), s.stride, seqs, shape);
      for (size_t i = 0; i < seqs.size(); ++i) {
        double total = 0.0;
        for (int64_t m : want[i]) total += static_cast<double>(m - base) / kMassOne;
        EXPECT_NEAR(total, 8.0 * seqs[i].q_len, 1e-3) << "every row's weights sum to 1, seq " << i;
      }
      for (Isa isa : supported_isas()) {
        ThreadPool pool(2);
        Workspace ws;
        KernelContext ctx{&pool, isa, &ws};
        std::vector<AttentionSeq> plain = seqs;
        for (auto& q : plain) q.key_mass = nullptr;
        std::vector<float> out0(s.q.size()), out1(s.q.size());
        paged_attention(s.kv, s.q.data(), s.stride, out0.data(), s.stride, plain, shape, ctx);
        for (size_t i = 0; i < seqs.size(); ++i) {
          got[i].assign(static_cast<size_t>(seqs[i].kv_len), base);
          seqs[i].key_mass = got[i].data();
        }
        paged_attention(s.kv, s.q.data(), s.stride, out1.data(), s.stride, seqs, shape, ctx);
        ASSERT_EQ(0, std::memcmp(out0.data(), out1.data(), out0.size() * sizeof(float))) << isa_name(isa);
        for (size_t i = 0; i < seqs.size(); ++i) {
          for (size_t j = 0; j < got[i].size(); ++j) {
            ASSERT_NEAR(static_cast<double>(got[i][j] - want[i][j]) / kMassOne, 0.0, 2e-5)
                << isa_name(isa) << " window " << window << " bs " << bs << " seq " << i << " slot " << j;
          }
        }
      }
    }
  }
}

// Quantized caches (q8_0, q4_0; with and without the Hadamard rotation)
// against the naive reference reading the same stored values (through the
// scalar codec; the kernels read tiles in place or dequantize them as
// vectors): head dims
// whose quantization block is 32 (64, 128) or the whole head (8, 24: and a
// Hadamard run of 8), block sizes 2 to 32, GQA, decode and prefill chunks,
// windows, soft-capping and sinks, on every ISA.
TEST(Attention, QuantizedCachesMatchNaiveReference) {
  uint32_t seed = 2000;
  for (DType t : {DType::kQ8_0, DType::kQ4_0}) {
    for (bool hadamard : {false, true}) {
      for (int hd : {8, 24, 64, 128}) {
        for (int bs : {16, 2, 32}) {
          check_case({8, 2, hd, bs, {{1, 1}, {1, 37}, {5, 5}, {16, 100}, {17, 40}}, t, 0, 0.0f, {}, hadamard}, seed++);
        }
      }
      check_case({8, 4, 64, 16, {{1, 50}, {40, 90}}, t, 17, 0.0f, {}, hadamard}, seed++);
      // Decode without GQA: one or two rows per unit read the tiles in place.
      check_case({4, 4, 64, 16, {{1, 50}, {1, 17}, {1, 1}}, t, 0, 0.0f, {}, hadamard}, seed++);
      check_case({4, 2, 128, 32, {{1, 70}, {1, 33}}, t, 0, 0.0f, {}, hadamard}, seed++);
      check_case({8, 4, 64, 16, {{1, 50}, {40, 90}}, t, 0, 4.0f, {}, hadamard}, seed++);
      check_case({4, 4, 64, 16, {{1, 50}, {9, 33}}, t, 0, 0.0f, {-2.0f, 0.0f, 1.5f, 8.0f}, hadamard}, seed++);
    }
  }
}

// A head vector written to a q8_0 / q4_0 cache reads back as ggml's Q8_0 /
// Q4_0 quantizer (kernels/quant.h, tested against llama.cpp's files) rounds
// it, block of 32 by block of 32; a head of 8 (one block) within half a
// step of its input; non-finite inputs
// read back finite with no undefined behaviour (a NaN as 0, a block holding
// an infinity as zeros).
TEST(Attention, QuantizedCacheValuesAreGgmlsRounding) {
  std::mt19937 rng(55);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  for (DType type : {DType::kQ8_0, DType::kQ4_0}) {
    for (int hd : {64, 128, 8}) {
      const int n_kv_heads = 2, bs = 16, n = 21, blocks = 3;
      const int64_t kvw = int64_t{n_kv_heads} * hd;
      std::vector<float> k(static_cast<size_t>(n * kvw)), v(k.size());
      for (size_t i = 0; i < k.size(); ++i) {
        k[i] = n01(rng) * (i % 7 == 0 ? 20.0f : 1.0f);  // outlier features
        v[i] = n01(rng);
      }
      k[3] = std::numeric_limits<float>::quiet_NaN();
      v[kvw + 1] = std::numeric_limits<float>::infinity();
      std::vector<int64_t> slots(n);
      for (int t = 0; t < n; ++t) slots[t] = (t * 5 + 2) % (blocks * bs);
      KvLayerView kv;
      kv.type = type;
      kv.block_size = bs;
      kv.n_kv_heads = n_kv_heads;
      kv.head_dim = hd;
      std::vector<uint8_t> kb(kv.block_bytes() * blocks, 0xcd), vb(kb);
      kv.k = kb.data();
      kv.v = vb.data();
      store_kv(kv, k.data(), v.data(), kvw, slots.data(), n, Isa::kScalar);  // the same bytes on every ISA (above)
      std::vector<float> gk(k.size()), gv(v.size());
      gather_kv(kv, slots.data(), n, gk.data(), gv.data(), kvw);
      for (int t = 0; t < n; ++t) {
        for (int h = 0; h < n_kv_heads; ++h) {
          for (const auto& [src, got] : {std::pair{&k, &gk}, std::pair{&v, &gv}}) {
            const float* x = src->data() + t * kvw + h * hd;
            const float* y = got->data() + t * kvw + h * hd;
            bool finite = true;
            for (int d = 0; d < hd; ++d) finite = finite && std::isfinite(x[d]);
            if (!finite) {  // NaN values read back as 0, a block with an infinity as zeros
              for (int d = 0; d < hd; ++d) {
                ASSERT_TRUE(std::isfinite(y[d])) << d;
                if (std::isnan(x[d])) {
                  ASSERT_EQ(y[d], 0.0f) << d;
                }
              }
              continue;
            }
            if (hd % 32 == 0) {
              std::vector<uint8_t> blk(row_bytes(type, hd));
              std::vector<float> want(static_cast<size_t>(hd));
              quantize_row(type, x, blk.data(), hd);
              dequantize_row(type, blk.data(), want.data(), hd);
              for (int d = 0; d < hd; ++d) ASSERT_EQ(y[d], want[d]) << dtype_name(type) << " t " << t << " d " << d;
            } else {
              float amax = 0.0f;
              for (int d = 0; d < hd; ++d) amax = std::max(amax, std::fabs(x[d]));
              // Half a step, plus the codes (at most 127 or 8) times the
              // scale's fp16 rounding (2^-11 relative).
              const float codes = type == DType::kQ8_0 ? 127.0f : 8.0f;
              const float step = amax / codes;
              for (int d = 0; d < hd; ++d) ASSERT_LE(std::fabs(y[d] - x[d]), step * (0.5f + codes / 2048.0f) * 1.001f) << d;
            }
          }
        }
      }
    }
  }
}

// The Hadamard rotation: equal to the dense matrix D H / sqrt(p) (H[a][b] =
// (-1)^popcount(a & b), D the signs read off the rotation of unit vectors'
// first entry), orthogonal (norms kept) and undone by its inverse, for head
// dims that are powers of two and that are not (24 = 3 runs of 8, 96, 80).
TEST(Attention, HadamardRotationIsTheDenseOrthogonalMatrix) {
  std::mt19937 rng(3);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  for (int hd : {8, 16, 64, 128, 24, 96, 80}) {
    const int p = hd & -hd;
    // Column j of the rotation is the rotation of unit vector e_j.
    std::vector<std::vector<float>> cols(static_cast<size_t>(hd));
    for (int j = 0; j < hd; ++j) {
      cols[j].assign(static_cast<size_t>(hd), 0.0f);
      cols[j][j] = 1.0f;
      kv_hadamard_rotate(cols[j].data(), hd);
    }
    for (int j = 0; j < hd; ++j) {
      const float sign = cols[j][j - j % p] > 0 ? 1.0f : -1.0f;  // D_j, from H's first row of the run
      for (int i = 0; i < hd; ++i) {
        const bool same_run = i / p == j / p;
        const float h = same_run ? ((std::popcount(static_cast<unsigned>((i % p) & (j % p))) % 2) ? -1.0f : 1.0f) : 0.0f;
        ASSERT_NEAR(cols[j][i], sign * h / std::sqrt(static_cast<float>(p)), 1e-6f) << "hd " << hd << " (" << i << ", " << j << ")";
      }
    }
    std::vector<float> x(static_cast<size_t>(hd));
    for (float& e : x) e = n01(rng);
    std::vector<float> y = x;
    kv_hadamard_rotate(y.data(), hd);
    double nx = 0, ny = 0;
    for (int i = 0; i < hd; ++i) {
      nx += double{x[i]} * x[i];
      ny += double{y[i]} * y[i];
    }
    EXPECT_NEAR(ny, nx, 1e-5 * nx) << hd;
    kv_hadamard_rotate_inverse(y.data(), hd);
    for (int i = 0; i < hd; ++i) EXPECT_NEAR(y[i], x[i], 1e-5f) << hd << " " << i;
  }
}

// A quantized cache's keys turned by rotate_keys (a bounded cache moving
// kept keys) read back as the keys turned in f32 and stored again, and
// within the quantization's error of the exact rotation.
TEST(Attention, RotateKeysOnAQuantizedCache) {
  std::mt19937 rng(12);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  const int hd = 64, bs = 16, n = 20, half = 32;
  for (DType type : {DType::kQ8_0, DType::kQ4_0}) {
    for (bool hadamard : {false, true}) {
      KvLayerView kv;
      kv.type = type;
      kv.block_size = bs;
      kv.n_kv_heads = 1;
      kv.head_dim = hd;
      kv.hadamard = hadamard;
      std::vector<uint8_t> kb(kv.block_bytes() * 2), vb(kb.size()), kb2(kb.size()), vb2(kb.size());
      kv.k = kb.data();
      kv.v = vb.data();
      std::vector<float> k(static_cast<size_t>(n * hd)), v(k.size()), c(static_cast<size_t>(n * half)), sn(c.size());
      for (float& x : k) x = n01(rng);
      for (float& x : v) x = n01(rng);
      for (size_t i = 0; i < c.size(); ++i) {
        const float a = n01(rng);
        c[i] = std::cos(a);
        sn[i] = std::sin(a);
      }
      std::vector<int64_t> slots(n);
      std::iota(slots.begin(), slots.end(), int64_t{0});
      store_kv(kv, k.data(), v.data(), hd, slots.data(), n, Isa::kScalar);
      std::vector<float> before(k.size()), vbefore(k.size());
      gather_kv(kv, slots.data(), n, before.data(), vbefore.data(), hd);
      rotate_keys(kv, slots.data(), n, c.data(), sn.data(), half, true);
      // The same through f32: rotate the read keys, store them in a second cache.
      std::vector<float> turned = before;
      for (int t = 0; t < n; ++t) {
        for (int i = 0; i < half; ++i) {
          const float x0 = before[t * hd + i], x1 = before[t * hd + i + half];
          turned[t * hd + i] = x0 * c[t * half + i] - x1 * sn[t * half + i];
          turned[t * hd + i + half] = x0 * sn[t * half + i] + x1 * c[t * half + i];
        }
      }
      KvLayerView kv2 = kv;
      kv2.k = kb2.data();
      kv2.v = vb2.data();
      store_kv(kv2, turned.data(), vbefore.data(), hd, slots.data(), n, Isa::kScalar);
      if (!hadamard) {
        EXPECT_TRUE(kb == kb2) << dtype_name(type);
      }
      std::vector<float> after(k.size()), vafter(k.size()), want(k.size()), wv(k.size());
      gather_kv(kv, slots.data(), n, after.data(), vafter.data(), hd);
      gather_kv(kv2, slots.data(), n, want.data(), wv.data(), hd);
      EXPECT_TRUE(vafter == vbefore) << "V is not touched";
      const float tol = type == DType::kQ8_0 ? 0.05f : 0.8f;  // a few steps of the codes (|k| < 5)
      for (size_t i = 0; i < k.size(); ++i) {
        if (!hadamard) {
          ASSERT_EQ(after[i], want[i]) << i;
        }
        ASSERT_NEAR(after[i], turned[i], tol) << dtype_name(type) << " hadamard " << hadamard << " " << i;
      }
    }
  }
}

// Layouts a quantized cache cannot hold are refused with a clear error.
TEST(Attention, QuantizedCacheLayoutChecks) {
  EXPECT_NO_THROW(check_kv_layout(DType::kQ8_0, 16, 64));
  EXPECT_NO_THROW(check_kv_layout(DType::kQ4_0, 16, 8, true));
  EXPECT_THROW(check_kv_layout(DType::kQ4_0, 15, 64), Error);
  EXPECT_THROW(check_kv_layout(DType::kQ8_0, 16, 63), Error);
  EXPECT_THROW(check_kv_layout(DType::kQ8_0, 512, 64), Error);
  EXPECT_THROW(check_kv_layout(DType::kF16, 16, 64, true), Error);
  EXPECT_THROW(check_kv_layout(DType::kQ4_K, 16, 64), Error);
  EXPECT_EQ(kv_tile_bytes(DType::kQ8_0, 16, 64), 16u * 64 + 2 * 16 * 2);
  EXPECT_EQ(kv_tile_bytes(DType::kQ4_0, 16, 128), 16u * 64 + 2 * 16 * 4);
  EXPECT_EQ(kv_tile_bytes(DType::kQ4_0, 16, 8), 16u * 4 + 2 * 16);
}

}  // namespace
}  // namespace tessera::kernels
