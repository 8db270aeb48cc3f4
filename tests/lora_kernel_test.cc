// The LoRA delta kernels (kernels/lora_delta.h) against the scalar
// reference, for every ISA this CPU has, on shapes that are not multiples of
// any vector width (in, out, rank from 1), 1..9 tokens (every tile and
// tail), strides wider than the rows and scattered token rows. Float sums
// run in another order there, so the bound is the classic one for a sum of
// n products: |got - ref| <= 2 (n + 2) eps sum |terms| (both sides within
// (n + 1) eps of the exact value), which still catches a lost or doubled
// term of any weight. A token's result must moreover be bit-identical
// whatever the other tokens of its call (the engine's batch invariance).
// Then apply_lora() on a ForwardBatch of mixed, shared and missing adapters
// against a plain double-precision loop.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "core/cpu.h"
#include "kernels/lora_delta.h"
#include "adapters/lora.h"

namespace tessera {
namespace {

using kernels::lora_expand;
using kernels::lora_shrink;

constexpr double kEps = 0x1p-24;

std::vector<float> random_floats(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = g(rng);
  return v;
}

// (in or out, rank) pairs: around the vector widths 8 and 16, 110m-like,
// multiples of 512 (expand packs B from 2 tokens: one panel, several, a
// partial last one) and a rank too large to pack.
struct LoraShape {
  int64_t width, rank;
};
const LoraShape kLoraShapes[] = {{1, 1},   {3, 2},    {7, 3},     {8, 5},    {9, 7},    {15, 8},
                                 {16, 9},  {17, 4},   {31, 13},   {33, 16},  {65, 17},  {100, 31},
                                 {129, 1}, {257, 64}, {768, 16},  {773, 128}, {512, 3}, {1024, 16},
                                 {1536, 13}, {20, 600}};
// 1..9 covers every token tile and tail; 16 and more packs B at any width.
const int64_t kLoraTokenCounts[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 19};

class LoraKernelTest : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (!isa_supported(GetParam())) GTEST_SKIP() << "this CPU cannot run " << isa_name(GetParam());
  }
};

// One kernel call's operand shapes: `width` is in (shrink) or out (expand);
// the x or y matrix has n_rows rows `stride` (> width) apart, and token i
// is row(i): i, or a shuffled pick of 2n + 3 rows.
struct LoraCase {
  int64_t width, rank, n;
  std::vector<int32_t> rows;  // empty: contiguous
  int64_t n_rows, stride;
  const int32_t* row_ptr() const { return rows.empty() ? nullptr : rows.data(); }
  int64_t row(int64_t i) const { return rows.empty() ? i : rows[static_cast<size_t>(i)]; }
  std::string what() const {
    return "width " + std::to_string(width) + " rank " + std::to_string(rank) + " n " + std::to_string(n) +
           (rows.empty() ? "" : " scattered");
  }
};

// fn(case) for every shape, token count and row layout, until a fatal failure.
template <class Fn>
void for_each_lora_case(std::mt19937& rng, Fn fn) {
  for (const LoraShape& s : kLoraShapes) {
    for (int64_t n : kLoraTokenCounts) {
      for (bool scatter : {false, true}) {
        LoraCase c{s.width, s.rank, n, {}, n, s.width + 1 + static_cast<int64_t>(rng() % 9)};
        if (scatter) {
          c.n_rows = 2 * n + 3;
          c.rows.resize(static_cast<size_t>(c.n_rows));
          for (size_t i = 0; i < c.rows.size(); ++i) c.rows[i] = static_cast<int32_t>(i);
          std::shuffle(c.rows.begin(), c.rows.end(), rng);
          c.rows.resize(static_cast<size_t>(n));
        }
        fn(c);
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
  }
}

TEST_P(LoraKernelTest, ShrinkMatchesReference) {
  std::mt19937 rng(11);
  for_each_lora_case(rng, [&](const LoraCase& c) {
    const int64_t in = c.width, rank = c.rank;
    const std::vector<float> a = random_floats(static_cast<size_t>(rank * in), rng);
    const std::vector<float> x = random_floats(static_cast<size_t>(c.n_rows * c.stride), rng);
    const float scale = 0.75f;
    std::vector<float> got(static_cast<size_t>(c.n * rank), -1.0f), ref = got;
    lora_shrink(a.data(), rank, in, scale, x.data(), c.stride, c.row_ptr(), c.n, got.data(), GetParam());
    lora_shrink(a.data(), rank, in, scale, x.data(), c.stride, c.row_ptr(), c.n, ref.data(), Isa::kScalar);
    for (int64_t i = 0; i < c.n; ++i) {
      const float* xr = x.data() + c.row(i) * c.stride;
      for (int64_t k = 0; k < rank; ++k) {
        double mag = 0;
        for (int64_t j = 0; j < in; ++j) mag += std::fabs(static_cast<double>(a[k * in + j]) * xr[j]);
        const size_t at = static_cast<size_t>(i * rank + k);
        ASSERT_NEAR(got[at], ref[at], 2 * (in + 2) * kEps * scale * mag + 1e-30)
            << c.what() << " token " << i << " k " << k;
      }
    }
  });
}

TEST_P(LoraKernelTest, ExpandMatchesReferenceAndWritesOnlyItsRows) {
  std::mt19937 rng(12);
  for_each_lora_case(rng, [&](const LoraCase& c) {
    const int64_t out = c.width, rank = c.rank;
    const std::vector<float> b = random_floats(static_cast<size_t>(rank * out), rng);
    const std::vector<float> ax = random_floats(static_cast<size_t>(c.n * rank), rng);
    const std::vector<float> y0 = random_floats(static_cast<size_t>(c.n_rows * c.stride), rng);
    std::vector<float> got = y0, ref = y0;
    lora_expand(b.data(), rank, out, ax.data(), got.data(), c.stride, c.row_ptr(), c.n, GetParam());
    lora_expand(b.data(), rank, out, ax.data(), ref.data(), c.stride, c.row_ptr(), c.n, Isa::kScalar);
    std::vector<bool> written(got.size(), false);
    for (int64_t i = 0; i < c.n; ++i) {
      for (int64_t o = 0; o < out; ++o) {
        const size_t at = static_cast<size_t>(c.row(i) * c.stride + o);
        written[at] = true;
        double mag = std::fabs(y0[at]);
        for (int64_t k = 0; k < rank; ++k) mag += std::fabs(static_cast<double>(ax[i * rank + k]) * b[k * out + o]);
        ASSERT_NEAR(got[at], ref[at], 2 * (rank + 2) * kEps * mag + 1e-30) << c.what() << " token " << i << " o " << o;
      }
    }
    for (size_t at = 0; at < got.size(); ++at) {
      if (!written[at]) {
        ASSERT_EQ(std::memcmp(&got[at], &y0[at], 4), 0) << c.what() << ": wrote outside its rows at " << at;
      }
    }
  });
}

// Each token of a call of n gets the bits it gets alone: whichever tile
// (1..4 tokens) and position it falls into, B packed or not.
TEST_P(LoraKernelTest, TokensDoNotDependOnTheirCall) {
  std::mt19937 rng(13);
  for (const LoraShape& s : {LoraShape{37, 11}, LoraShape{768, 16}, LoraShape{100, 128}, LoraShape{1024, 5}}) {
    const int64_t w = s.width, rank = s.rank, n = 19;
    const std::vector<float> a = random_floats(static_cast<size_t>(rank * w), rng);
    const std::vector<float> b = random_floats(static_cast<size_t>(rank * w), rng);
    const std::vector<float> x = random_floats(static_cast<size_t>(n * w), rng);
    const std::vector<float> y0 = random_floats(static_cast<size_t>(n * w), rng);
    for (int64_t m = 1; m <= n; ++m) {
      std::vector<float> ax(static_cast<size_t>(m * rank)), y = y0;
      lora_shrink(a.data(), rank, w, 0.5f, x.data(), w, nullptr, m, ax.data(), GetParam());
      lora_expand(b.data(), rank, w, ax.data(), y.data(), w, nullptr, m, GetParam());
      for (int64_t i = 0; i < m; ++i) {
        std::vector<float> ax1(static_cast<size_t>(rank)), y1(y0.begin() + i * w, y0.begin() + (i + 1) * w);
        lora_shrink(a.data(), rank, w, 0.5f, x.data() + i * w, w, nullptr, 1, ax1.data(), GetParam());
        lora_expand(b.data(), rank, w, ax1.data(), y1.data(), w, nullptr, 1, GetParam());
        ASSERT_EQ(std::memcmp(ax1.data(), ax.data() + i * rank, static_cast<size_t>(rank) * 4), 0)
            << "shrink: token " << i << " of " << m << " (width " << w << ", rank " << rank << ")";
        ASSERT_EQ(std::memcmp(y1.data(), y.data() + i * w, static_cast<size_t>(w) * 4), 0)
            << "expand: token " << i << " of " << m << " (width " << w << ", rank " << rank << ")";
      }
    }
  }
}

// Weights kept in F16 or Q8_0 (--lora-type): a kernel reads them as the
// floats they stand for, so on every ISA it gives the bits of the same
// kernel over their F32 values (unpacked), for every tile, tail and packed
// panel of B. Q8_0 rows are whole blocks of 32.
TEST_P(LoraKernelTest, CompactWeightsGiveTheBitsOfTheirFloatValues) {
  using kernels::LoraWeightType;
  std::mt19937 rng(14);
  const LoraShape any[] = {{1, 1}, {7, 3}, {17, 4}, {33, 16}, {100, 31}, {768, 16}, {773, 9}, {1024, 16}};
  const LoraShape blocks[] = {{32, 1}, {64, 7}, {96, 16}, {160, 600}, {512, 3}, {768, 16}, {1024, 16}, {2048, 9}};
  for (LoraWeightType type : {LoraWeightType::kF16, LoraWeightType::kQ8_0}) {
    for (const LoraShape& s : type == LoraWeightType::kF16 ? std::span<const LoraShape>(any) : std::span<const LoraShape>(blocks)) {
      const int64_t w = s.width, rank = s.rank, row_bytes = kernels::lora_row_bytes(type, w);
      const std::vector<float> src = random_floats(static_cast<size_t>(rank * w), rng);
      std::vector<uint8_t> packed(static_cast<size_t>(rank * row_bytes));
      std::vector<float> values(src.size());
      for (int64_t k = 0; k < rank; ++k) {
        kernels::lora_pack_row(type, src.data() + k * w, w, packed.data() + k * row_bytes);
        kernels::lora_unpack_row(type, packed.data() + k * row_bytes, w, values.data() + k * w);
        // The stored values are the row's, rounded: F16 to 2^-11 relative,
        // Q8_0 to half a step of its block's scale (amax / 127) and that
        // scale's own rounding.
        for (int64_t j = 0; j < w; ++j) {
          const float x = src[k * w + j], v = values[k * w + j];
          float bound = std::max(std::fabs(x) * 0x1p-11f, 0x1p-25f);  // half an ulp; subnormal below 2^-14
          if (type == LoraWeightType::kQ8_0) {
            float amax = 0;
            for (int64_t i = j / 32 * 32; i < j / 32 * 32 + 32; ++i) amax = std::max(amax, std::fabs(src[k * w + i]));
            // Rounded by d = amax / 127, then d itself to fp16: |q| <= 127 times 2^-11 d more.
            bound = amax / 127 * 0.5f + amax * 0x1p-11f * 1.001f;
          }
          ASSERT_LE(std::fabs(v - x), bound) << kernels::lora_weight_type_name(type) << " width " << w << " k " << k;
        }
      }
      for (int64_t n : {1, 2, 3, 4, 5, 9, 16, 19}) {
        const std::vector<float> x = random_floats(static_cast<size_t>(n * w), rng);
        const std::vector<float> y0 = random_floats(static_cast<size_t>(n * w), rng);
        for (Isa isa : {GetParam(), Isa::kScalar}) {
          std::vector<float> ax(static_cast<size_t>(n * rank)), ax_f(ax.size());
          lora_shrink(packed.data(), rank, w, 0.5f, x.data(), w, nullptr, n, ax.data(), isa, type);
          lora_shrink(values.data(), rank, w, 0.5f, x.data(), w, nullptr, n, ax_f.data(), isa);
          ASSERT_EQ(std::memcmp(ax.data(), ax_f.data(), ax.size() * 4), 0)
              << "shrink " << kernels::lora_weight_type_name(type) << " " << isa_name(isa) << " width " << w << " rank "
              << rank << " n " << n;
          std::vector<float> y = y0, y_f = y0;
          lora_expand(packed.data(), rank, w, ax.data(), y.data(), w, nullptr, n, isa, type);
          lora_expand(values.data(), rank, w, ax.data(), y_f.data(), w, nullptr, n, isa);
          ASSERT_EQ(std::memcmp(y.data(), y_f.data(), y.size() * 4), 0)
              << "expand " << kernels::lora_weight_type_name(type) << " " << isa_name(isa) << " width " << w << " rank "
              << rank << " n " << n;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Isas, LoraKernelTest, ::testing::Values(Isa::kScalar, Isa::kAvx2, Isa::kAvx512),
                         [](const ::testing::TestParamInfo<Isa>& i) { return std::string(isa_name(i.param)); });

TEST(LoraKernel, BadShapesAreRefused) {
  float v[4] = {};
  EXPECT_ANY_THROW(lora_shrink(v, 0, 2, 1.0f, v, 2, nullptr, 1, v, Isa::kScalar));
  EXPECT_ANY_THROW(lora_shrink(v, 1, 3, 1.0f, v, 2, nullptr, 2, v, Isa::kScalar));  // rows overlap
  EXPECT_ANY_THROW(lora_expand(v, 1, 0, v, v, 2, nullptr, 1, Isa::kScalar));
  EXPECT_ANY_THROW(lora_expand(v, 1, 3, v, v, 2, nullptr, 2, Isa::kScalar));
  // Q8_0 rows are whole blocks of 32.
  EXPECT_ANY_THROW(lora_shrink(v, 1, 48, 1.0f, v, 48, nullptr, 1, v, Isa::kScalar, kernels::LoraWeightType::kQ8_0));
  EXPECT_ANY_THROW(lora_expand(v, 1, 40, v, v, 40, nullptr, 1, Isa::kScalar, kernels::LoraWeightType::kQ8_0));
}

// ---- apply_lora on a batch ---------------------------------------------------

// One layer, pairs for kQ (in 24, out 23) and kDown (in 41, out 24) only.
std::unique_ptr<LoraAdapter> lora_test_adapter(int64_t rank, uint32_t seed) {
  std::mt19937 rng(seed);
  auto ad = std::make_unique<LoraAdapter>();
  ad->layers.resize(1);
  auto fill = [&](LoraTarget t, int64_t in, int64_t out, float scale) {
    LoraPair& p = ad->layers[0][static_cast<size_t>(t)];
    p.rank = rank;
    p.in = in;
    p.out = out;
    p.scale = scale;
    p.a = random_floats(static_cast<size_t>(rank * in), rng);
    p.b = random_floats(static_cast<size_t>(rank * out), rng);
  };
  fill(LoraTarget::kQ, 24, 23, 1.0f);
  fill(LoraTarget::kDown, 41, 24, 0.25f);
  return ad;
}

TEST(LoraKernel, ApplyLoraOnABatchOfMixedAdapters) {
  const auto a1 = lora_test_adapter(3, 21), a2 = lora_test_adapter(16, 22), a3 = lora_test_adapter(1, 23);
  LoraAdapter no_down = *lora_test_adapter(5, 24);
  no_down.layers[0][static_cast<size_t>(LoraTarget::kDown)] = LoraPair{};
  // Sequences: prefill segments and decode tokens, adapters shared, absent
  // (null) and without a pair for the target.
  struct Seq {
    int32_t q_len;
    const LoraAdapter* lora;
  };
  const Seq seqs[] = {{7, a1.get()}, {1, nullptr}, {1, a2.get()}, {5, a2.get()}, {1, a1.get()}, {1, &no_down},
                      {13, a3.get()}, {1, a2.get()}, {0, a1.get()}, {2, nullptr}, {1, a3.get()}, {9, a1.get()}};
  ForwardBatch batch;
  int32_t t = 0;
  for (const Seq& s : seqs) {
    batch.seqs.push_back({t, s.q_len, s.q_len, nullptr});
    batch.seq_lora.push_back(s.lora);
    t += s.q_len;
  }
  const int64_t T = t, x_stride = 43, y_stride = 29;
  std::mt19937 rng(25);
  const std::vector<float> x = random_floats(static_cast<size_t>(T * x_stride), rng);
  const std::vector<float> y0 = random_floats(static_cast<size_t>(T * y_stride), rng);
  kernels::KernelContext serial;
  serial.isa = active_isa();
  ThreadPool pool(3);
  kernels::KernelContext parallel = serial;
  parallel.pool = &pool;
  parallel.force_parallel = true;
  for (LoraTarget target : {LoraTarget::kQ, LoraTarget::kDown, LoraTarget::kUp}) {
    std::vector<float> y = y0;
    apply_lora(batch, 0, target, x.data(), x_stride, y.data(), y_stride, serial);
    // Spread over a pool, the same bits.
    std::vector<float> yp = y0;
    apply_lora(batch, 0, target, x.data(), x_stride, yp.data(), y_stride, parallel);
    ASSERT_EQ(std::memcmp(yp.data(), y.data(), y.size() * 4), 0) << "target " << static_cast<int>(target);
    std::vector<float> want = y0;
    std::vector<bool> touched(want.size(), false);
    std::vector<double> mag(want.size());
    for (size_t i = 0; i < want.size(); ++i) mag[i] = std::fabs(want[i]);
    for (size_t s = 0; s < batch.seqs.size(); ++s) {
      const LoraPair* p = batch.seq_lora[s] != nullptr ? batch.seq_lora[s]->get(0, target) : nullptr;
      if (p == nullptr) continue;
      for (int32_t tok = batch.seqs[s].q_begin; tok < batch.seqs[s].q_begin + batch.seqs[s].q_len; ++tok) {
        const float* xt = x.data() + tok * x_stride;
        std::vector<double> ax(static_cast<size_t>(p->rank)), ax_mag(ax.size());
        for (int64_t k = 0; k < p->rank; ++k) {
          for (int64_t j = 0; j < p->in; ++j) {
            ax[k] += static_cast<double>(p->a[k * p->in + j]) * xt[j] * p->scale;
            ax_mag[k] += std::fabs(static_cast<double>(p->a[k * p->in + j]) * xt[j] * p->scale);
          }
        }
        for (int64_t o = 0; o < p->out; ++o) {
          double d = 0;
          const size_t at = static_cast<size_t>(tok * y_stride + o);
          for (int64_t k = 0; k < p->rank; ++k) {
            d += p->b[k * p->out + o] * ax[k];
            mag[at] += std::fabs(p->b[k * p->out + o] * ax_mag[k]);
          }
          want[at] = static_cast<float>(want[at] + d);
          touched[at] = true;
        }
      }
    }
    for (size_t i = 0; i < y.size(); ++i) {
      if (!touched[i]) {
        ASSERT_EQ(std::memcmp(&y[i], &y0[i], 4), 0) << "target " << static_cast<int>(target) << " element " << i;
      } else {
        ASSERT_NEAR(y[i], want[i], 2 * (41 + 16 + 4) * kEps * mag[i]) << "target " << static_cast<int>(target)
                                                                       << " element " << i;
      }
    }
    // Each sequence alone in its own batch gets the same bits.
    for (size_t s = 0; s < batch.seqs.size(); ++s) {
      ForwardBatch one;
      one.seqs = {batch.seqs[s]};
      one.seq_lora = {batch.seq_lora[s]};
      std::vector<float> y1 = y0;
      apply_lora(one, 0, target, x.data(), x_stride, y1.data(), y_stride, serial);
      const size_t begin = static_cast<size_t>(batch.seqs[s].q_begin * y_stride);
      const size_t len = static_cast<size_t>(batch.seqs[s].q_len * y_stride);
      ASSERT_EQ(std::memcmp(y1.data() + begin, y.data() + begin, len * 4), 0) << "sequence " << s;
    }
  }
}

// An adapter kept in F16 or Q8_0 (store_lora) applies, on a batch, the
// bits of the same adapter unpacked to F32; a pair whose rows are not whole
// blocks of 32 falls back to F16; parts for --tp cut the stored rows as
// packing the F32 part would.
TEST(LoraKernel, StoredAdaptersApplyTheirFloatValues) {
  using kernels::LoraWeightType;
  for (LoraWeightType type : {LoraWeightType::kF16, LoraWeightType::kQ8_0}) {
    auto make = [](uint32_t seed) {
      auto ad = lora_test_adapter(4, seed);
      // A pair of whole blocks too: kUp, in 64 and out 96.
      std::mt19937 rng(seed + 100);
      LoraPair& p = ad->layers[0][static_cast<size_t>(LoraTarget::kUp)];
      p.rank = 6;
      p.in = 64;
      p.out = 96;
      p.scale = 0.5f;
      p.a = random_floats(6 * 64, rng);
      p.b = random_floats(6 * 96, rng);
      return ad;
    };
    const auto f32 = make(31);
    LoraAdapter stored = *f32;
    store_lora(stored, type);
    const LoraAdapter values = unpacked_lora(stored);
    const LoraPair& up = stored.layers[0][static_cast<size_t>(LoraTarget::kUp)];
    const LoraPair& q = stored.layers[0][static_cast<size_t>(LoraTarget::kQ)];
    EXPECT_EQ(up.type, type);
    EXPECT_EQ(q.type, LoraWeightType::kF16) << "in 24 is not whole blocks of 32";
    EXPECT_TRUE(up.a.empty() && up.b.empty());
    EXPECT_LT(stored.bytes(), f32->bytes() * (type == LoraWeightType::kQ8_0 ? 0.42 : 0.51));
    ForwardBatch batch;
    batch.seqs = {{0, 3, 3, nullptr}, {3, 1, 1, nullptr}, {4, 17, 17, nullptr}};
    batch.seq_lora = {&stored, &stored, &stored};
    ForwardBatch ref = batch;
    ref.seq_lora = {&values, &values, &values};
    const int64_t T = 21, stride = 97;
    std::mt19937 rng(32);
    const std::vector<float> x = random_floats(static_cast<size_t>(T * stride), rng);
    const std::vector<float> y0 = random_floats(static_cast<size_t>(T * stride), rng);
    kernels::KernelContext ctx;
    ctx.isa = active_isa();
    for (LoraTarget target : {LoraTarget::kQ, LoraTarget::kDown, LoraTarget::kUp}) {
      std::vector<float> y = y0, want = y0;
      apply_lora(batch, 0, target, x.data(), stride, y.data(), stride, ctx);
      apply_lora(ref, 0, target, x.data(), stride, want.data(), stride, ctx);
      ASSERT_EQ(std::memcmp(y.data(), want.data(), y.size() * 4), 0) << kernels::lora_weight_type_name(type);
      EXPECT_NE(std::memcmp(y.data(), y0.data(), y.size() * 4), 0);
    }
    // Parts: kUp is split by output rows (B's columns, 96 / 3 = 32 each).
    auto up_only = [](LoraAdapter a) {
      a.layers[0][static_cast<size_t>(LoraTarget::kQ)] = LoraPair{};     // 23 rows do not split in 3
      a.layers[0][static_cast<size_t>(LoraTarget::kDown)] = LoraPair{};  // nor 41 columns
      return a;
    };
    for (int r = 0; r < 3; ++r) {
      LoraAdapter want = lora_part(up_only(*f32), r, 3);
      store_lora(want, type);
      const LoraAdapter got = lora_part(up_only(stored), r, 3);
      const LoraPair& g = got.layers[0][static_cast<size_t>(LoraTarget::kUp)];
      const LoraPair& w = want.layers[0][static_cast<size_t>(LoraTarget::kUp)];
      EXPECT_EQ(g.type, type);
      EXPECT_EQ(g.out, 32);
      EXPECT_EQ(g.a_packed, w.a_packed);
      EXPECT_EQ(g.b_packed, w.b_packed) << "rank " << r;
    }
  }
}

}  // namespace
}  // namespace tessera
