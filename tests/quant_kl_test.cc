// tessera perplexity --kl-base / --kl (eval/kl_divergence.h):
//  * the report of rows of base log-probabilities against logits equals an
//    independent numpy computation (tests/reference/quant_ref.py kl);
//  * saved through the base file (log-probabilities stored in 16 bits), the
//    divergence of a quantized stories260K equals the one computed from
//    both models' full-precision logits;
//  * a model against its own base: zero divergence, same argmax everywhere;
//  * a base from other tokens, another context or a truncated file is an
//    error, never a wrong number.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "eval/kl_divergence.h"
#include "engine/sampler.h"
#include "engine/sequence_runner.h"
#include "format/gguf.h"
#include "quant/quantize_model.h"
#include "util/test_util.h"

namespace tessera::engine {
namespace {

template <class T>
void append(std::string& s, const T* p, size_t n) {
  s.append(reinterpret_cast<const char*>(p), n * sizeof(T));
}

TEST(KlDivergence, ReportMatchesNumpy) {
  const int64_t n = 300, V = 97;
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  std::vector<float> base(static_cast<size_t>(n * V)), logits(base.size());
  std::vector<int64_t> next(static_cast<size_t>(n));
  std::vector<KlRow> rows;
  for (int64_t r = 0; r < n; ++r) {
    float* b = base.data() + r * V;
    float* l = logits.data() + r * V;
    // Rows from near-identical to far apart, so the percentiles spread.
    const float noise = 0.01f * static_cast<float>(r % 50);
    for (int64_t i = 0; i < V; ++i) {
      b[i] = nd(rng);
      l[i] = b[i] + noise * nd(rng) + 3.0f;  // shifted: logits need not be normalised
    }
    const float lse = log_sum_exp(std::span<const float>(b, static_cast<size_t>(V)));
    for (int64_t i = 0; i < V; ++i) b[i] -= lse;
    next[static_cast<size_t>(r)] = static_cast<int64_t>(rng() % V);
    rows.push_back(kl_row(std::span<const float>(b, V), std::span<const float>(l, V),
                          static_cast<int32_t>(next[static_cast<size_t>(r)])));
  }
  const KlResult k = summarize_kl(rows);

  std::string in;
  const int64_t head[2] = {n, V};
  append(in, head, 2);
  append(in, base.data(), base.size());
  append(in, logits.data(), logits.size());
  append(in, next.data(), next.size());
  const std::string src = testing::temp_path("kl_in"), dst = testing::temp_path("kl_out");
  testing::write_file(src, in);
  const std::string cmd =
      std::string("/usr/bin/python3 ") + TESSERA_SOURCE_DIR + "/tests/reference/quant_ref.py kl " + src + " " + dst;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const nlohmann::json ref = nlohmann::json::parse(testing::read_file(dst));

  // Both sides in float64 from the same float32 inputs: they differ by
  // summation order only.
  const auto near = [](double a, double b) { return std::fabs(a - b) <= 1e-9 * std::max(1.0, std::fabs(b)); };
  EXPECT_TRUE(near(k.ppl, ref["ppl"])) << k.ppl << " vs " << ref["ppl"];
  EXPECT_TRUE(near(k.ppl_base, ref["ppl_base"])) << k.ppl_base << " vs " << ref["ppl_base"];
  EXPECT_TRUE(near(k.mean_ln_ratio, ref["mean_ln_ratio"]));
  EXPECT_TRUE(near(k.ln_ratio_error, ref["ln_ratio_error"]));
  EXPECT_TRUE(near(k.kld_mean, ref["kld_mean"])) << k.kld_mean << " vs " << ref["kld_mean"];
  EXPECT_TRUE(near(k.kld_error, ref["kld_error"]));
  EXPECT_TRUE(near(k.kld_max, ref["kld_max"]));
  EXPECT_TRUE(near(k.kld_min, ref["kld_min"]));
  ASSERT_EQ(k.kld_quantiles.size(), ref["kld_quantiles"].size());
  for (size_t i = 0; i < k.kld_quantiles.size(); ++i) {
    EXPECT_TRUE(near(k.kld_quantiles[i], ref["kld_quantiles"][i])) << "quantile " << i;
  }
  EXPECT_EQ(k.same_top, ref["same_top"].get<double>());
  EXPECT_TRUE(near(k.rms_dp, ref["rms_dp"]));
  EXPECT_GT(k.kld_quantiles[0], k.kld_quantiles[4]);  // the rows do spread
  EXPECT_LT(k.same_top, 1.0);
  EXPECT_GT(k.same_top, 0.3);
}

struct Eval {
  std::vector<int32_t> tokens;
  PerplexityOptions opt;
};

Eval eval_text(const Tokenizer& tok, int64_t chunks) {
  Eval e;
  const std::string text = testing::read_file(testing::shared_path("data/tinystories_val_prefix.txt")).substr(0, 100000);
  e.tokens = tok.encode(text, /*add_special=*/true);
  e.opt.n_ctx = 128;
  e.opt.max_chunks = chunks;
  e.opt.kv_type = DType::kF32;
  return e;
}

TEST(KlDivergence, AModelAgainstItsOwnBaseIsZero) {
  TESSERA_REQUIRE_SHARED("data/tinystories_val_prefix.txt");
  const auto& m = testing::stories260k();
  const Eval e = eval_text(*m.tok, 4);
  ThreadPool pool(2);
  const std::string base = testing::temp_path("self.klbase");
  const PerplexityResult p = save_kl_base(*m.lm.model, *m.tok, e.tokens, e.opt, pool, base);
  const PerplexityResult plain = perplexity(*m.lm.model, *m.tok, e.tokens, e.opt, pool);
  EXPECT_EQ(p.ppl, plain.ppl);  // saving the base does not change the evaluation
  const KlResult k = kl_divergence(*m.lm.model, *m.tok, e.tokens, e.opt, pool, base);
  EXPECT_EQ(k.n_rows, 4 * 63);
  // The stored log-probabilities are rounded to 1/65535 of each row's
  // range (~25 nats here: steps of 4e-4); what is left of the divergence is
  // that rounding, far below any quantized model's (0.001 for Q8_0).
  EXPECT_LT(std::fabs(k.kld_mean), 2e-6);
  EXPECT_LT(k.kld_max, 2e-5);
  EXPECT_EQ(k.same_top, 1.0);
  // perplexity() takes each row's log-sum-exp in float (an ulp of ~5 is
  // 5e-7), kl_divergence() in double.
  EXPECT_NEAR(k.ppl, plain.ppl, 1e-6 * plain.ppl);
  EXPECT_NEAR(k.ppl_base, plain.ppl, 1e-5 * plain.ppl);  // base ln p(next) stored exactly in f32
  EXPECT_NEAR(k.ppl_ratio, 1.0, 1e-5);
}

TEST(KlDivergence, StoredBaseGivesTheDivergenceOfFullPrecisionLogits) {
  TESSERA_REQUIRE_SHARED("data/tinystories_val_prefix.txt");
  const auto& m = testing::stories260k();
  const Eval e = eval_text(*m.tok, 3);
  ThreadPool pool(2);
  const std::string qpath = testing::temp_path("kl_q4.gguf");
  quant::QuantizeOptions qo;
  qo.type = DType::kQ4_0;
  quant::quantize_model(*m.lm.file, qpath, qo, nullptr, pool);
  const LoadedModel q = load_model(qpath);
  const std::string base = testing::temp_path("kl_q4.klbase");
  save_kl_base(*m.lm.model, *m.tok, e.tokens, e.opt, pool, base);
  const KlResult k = kl_divergence(*q.model, *m.tok, e.tokens, e.opt, pool, base);

  // Directly: both models' logits chunk by chunk, base normalised in double.
  const int64_t V = m.lm.model->config().n_vocab, n_ctx = 128;
  SequenceRunner rb(*m.lm.model, {.n_ctx = n_ctx, .kv_type = DType::kF32}, pool);
  SequenceRunner rq(*q.model, {.n_ctx = n_ctx, .kv_type = DType::kF32}, pool);
  std::vector<KlRow> rows;
  for (int64_t c = 0; c < 3; ++c) {
    std::vector<int32_t> chunk(e.tokens.begin() + c * n_ctx, e.tokens.begin() + (c + 1) * n_ctx);
    chunk[0] = m.tok->bos_id();
    rb.reset();
    rq.reset();
    const std::span<const float> sb = rb.append(chunk, true);
    const std::vector<float> lb(sb.begin(), sb.end());
    const std::span<const float> lq = rq.append(chunk, true);
    for (int64_t j = n_ctx / 2; j < n_ctx - 1; ++j) {
      std::vector<float> b(lb.begin() + j * V, lb.begin() + (j + 1) * V);
      double mx = b[0], s = 0.0;
      for (float v : b) mx = std::max<double>(mx, v);
      for (float v : b) s += std::exp(v - mx);
      for (float& v : b) v = static_cast<float>(v - (mx + std::log(s)));
      rows.push_back(kl_row(b, lq.subspan(static_cast<size_t>(j * V), static_cast<size_t>(V)),
                            e.tokens[static_cast<size_t>(c * n_ctx + j + 1)]));
    }
  }
  const KlResult d = summarize_kl(rows);
  ASSERT_EQ(k.n_rows, d.n_rows);
  EXPECT_GT(d.kld_mean, 1e-3);  // Q4_0 does move the distribution
  // 16-bit storage moves each log-probability by at most half a step
  // (range / 131070, ~2e-4 nats), so each row's divergence by at most that.
  EXPECT_NEAR(k.kld_mean, d.kld_mean, 2e-4);
  EXPECT_NEAR(k.kld_max, d.kld_max, 2e-4);
  EXPECT_EQ(k.same_top, d.same_top);
  EXPECT_NEAR(k.ppl, d.ppl, 1e-9 * d.ppl);
  EXPECT_NEAR(k.ppl_base, d.ppl_base, 1e-5 * d.ppl_base);
}

TEST(KlDivergence, MismatchedOrDamagedBasesAreErrors) {
  TESSERA_REQUIRE_SHARED("data/tinystories_val_prefix.txt");
  const auto& m = testing::stories260k();
  const Eval e = eval_text(*m.tok, 2);
  ThreadPool pool(1);
  const std::string base = testing::temp_path("mismatch.klbase");
  save_kl_base(*m.lm.model, *m.tok, e.tokens, e.opt, pool, base);
  // Other tokens.
  std::vector<int32_t> other = e.tokens;
  other[5] = other[5] == 100 ? 101 : 100;
  EXPECT_THROW(kl_divergence(*m.lm.model, *m.tok, other, e.opt, pool, base), Error);
  // Another context.
  PerplexityOptions o2 = e.opt;
  o2.n_ctx = 64;
  EXPECT_THROW(kl_divergence(*m.lm.model, *m.tok, e.tokens, o2, pool, base), Error);
  // Truncated, and not a base file at all.
  const std::string bytes = testing::read_file(base);
  const std::string cut = testing::temp_path("cut.klbase");
  testing::write_file(cut, bytes.substr(0, bytes.size() - 7));
  EXPECT_THROW(kl_divergence(*m.lm.model, *m.tok, e.tokens, e.opt, pool, cut), Error);
  testing::write_file(cut, bytes.substr(0, 20));
  EXPECT_THROW(kl_divergence(*m.lm.model, *m.tok, e.tokens, e.opt, pool, cut), Error);
  testing::write_file(cut, "hello");
  EXPECT_THROW(kl_divergence(*m.lm.model, *m.tok, e.tokens, e.opt, pool, cut), Error);
  EXPECT_THROW(kl_divergence(*m.lm.model, *m.tok, e.tokens, e.opt, pool, testing::temp_path("absent")), Error);
}

}  // namespace
}  // namespace tessera::engine
