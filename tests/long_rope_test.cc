// Phi-3's LongRoPE regimes (model/model.h LongRopeMode). As transformers
// computes them: a sequence longer than the original context turns every
// position with the long factors; a decode that grows past it is computed
// again in the long regime (transformers' generate drops its cache there).
// Each decode row must equal the last row of one pass over the tokens up to
// it, bit for bit (the kernels are batch invariant); the engine's requests
// (chunked prefill, batching, prefix caching) must get the tokens of a run
// alone, and never share blocks across regimes. The rows against the
// independent numpy reference: tests/scripts/numpy_reference.sh.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/sequence_runner.h"
#include "model/model.h"
#include "model/synthetic.h"
#include "util/test_util.h"

namespace tessera::engine {
namespace {

constexpr int64_t kOrig = 16;  // the original context of the test model

const LoadedModel& phi3() {
  static const LoadedModel lm = [] {
    SyntheticModelSpec s = preset_spec("tiny");
    s.arch = "phi3";
    s.n_vocab = 256;
    s.n_ctx = 256;
    s.rope_scaling = "longrope";
    s.rope_orig_ctx = kOrig;
    s.seed = 7;
    const std::string path = testing::temp_path("long-rope-phi3.gguf");
    write_synthetic_model(s, path, 1);
    return load_model(path);
  }();
  return lm;
}

std::vector<int32_t> tokens(int n, int salt = 0) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(3 + (i * 41 + salt * 13) % 250);
  return t;
}

// The last row of one pass over `toks` from an empty cache.
std::vector<float> last_row(const std::vector<int32_t>& toks, LongRopeMode mode, int64_t n_ctx) {
  ThreadPool pool(1);
  SequenceRunner r(*phi3().model, {.n_ctx = n_ctx, .kv_type = DType::kF32, .long_rope = mode}, pool);
  const auto row = r.append(toks);
  return {row.begin(), row.end()};
}

TEST(LongRope, ModelDeclaresItsOriginalContext) { EXPECT_EQ(phi3().model->long_rope_after(), kOrig); }

TEST(LongRope, DecodeCrossingEqualsOnePassInTheLongRegime) {
  const Model& m = *phi3().model;
  const std::vector<int32_t> toks = tokens(30);
  ThreadPool pool(1);
  SequenceRunner r(m, {.n_ctx = 64, .kv_type = DType::kF32, .max_batch_tokens = 5}, pool);
  r.append(std::span(toks).first(6));
  const std::vector<float> short_row = last_row(std::vector<int32_t>(toks.begin(), toks.begin() + kOrig),
                                                LongRopeMode::kSequence, 64);
  const std::vector<float> long_row = last_row(std::vector<int32_t>(toks.begin(), toks.begin() + kOrig + 1),
                                               LongRopeMode::kSequence, 64);
  for (size_t t = 6; t < toks.size(); ++t) {
    const auto row = r.append(std::span(toks).subspan(t, 1));
    const std::vector<int32_t> upto(toks.begin(), toks.begin() + static_cast<int64_t>(t) + 1);
    const std::vector<float> want = last_row(upto, LongRopeMode::kSequence, 64);
    ASSERT_TRUE(std::equal(row.begin(), row.end(), want.begin())) << "row " << t;
    if (static_cast<int64_t>(t) == kOrig - 1) {
      EXPECT_TRUE(std::equal(row.begin(), row.end(), short_row.begin()));
    }
    if (static_cast<int64_t>(t) == kOrig) {
      EXPECT_TRUE(std::equal(row.begin(), row.end(), long_row.begin()));
    }
  }
}

TEST(LongRope, ContextModeTurnsEverySequenceLongWhenTheContextIsLonger) {
  const std::vector<int32_t> toks = tokens(8);
  // llama.cpp's choice: a context of 64 > 16 turns even 8 tokens long; a
  // context of 16 keeps them short, which is the sequence regime of 8 tokens.
  const std::vector<float> ctx_long = last_row(toks, LongRopeMode::kContext, 64);
  const std::vector<float> ctx_short = last_row(toks, LongRopeMode::kContext, kOrig);
  const std::vector<float> seq = last_row(toks, LongRopeMode::kSequence, 64);
  EXPECT_EQ(ctx_short, seq);
  EXPECT_NE(ctx_long, seq);
  // The long regime of 8 tokens is the first 8 rows of a long sequence.
  ThreadPool pool(1);
  SequenceRunner r(*phi3().model, {.n_ctx = 64, .kv_type = DType::kF32}, pool);
  const std::vector<int32_t> longer = tokens(24);
  const auto rows = r.append(longer, /*all_logits=*/true);
  const int64_t V = phi3().model->config().n_vocab;
  const std::vector<float> row7(rows.begin() + 7 * V, rows.begin() + 8 * V);
  EXPECT_EQ(ctx_long, row7);
}

TEST(LongRope, CrossingAfterLoadedKvIsAClearError) {
  const Model& m = *phi3().model;
  ThreadPool pool(1);
  SequenceRunner a(m, {.n_ctx = 64, .kv_type = DType::kF32}, pool);
  a.append(tokens(8));
  const DenseKv kv = a.export_kv(0, 8);
  SequenceRunner b(m, {.n_ctx = 64, .kv_type = DType::kF32}, pool);
  b.load(kv);
  EXPECT_THROW(
      {
        try {
          b.append(tokens(12));
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("original context (16 tokens)"), std::string::npos) << e.what();
          throw;
        }
      },
      Error);
}

using testing::greedy;

struct Greedy {
  std::vector<int32_t> tokens;
  std::vector<double> logprobs;  // of each chosen token
};

Greedy greedy_alone(const std::vector<int32_t>& prompt, int n) {
  ThreadPool pool(1);
  SequenceRunner ref(*phi3().model, {.n_ctx = 128, .kv_type = DType::kF32}, pool);
  std::span<const float> logits = ref.append(prompt);
  Greedy g;
  for (int i = 0; i < n; ++i) {
    const auto best = std::max_element(logits.begin(), logits.end());
    double z = 0.0;
    for (float l : logits) z += std::exp(static_cast<double>(l) - *best);
    g.tokens.push_back(static_cast<int32_t>(best - logits.begin()));
    g.logprobs.push_back(-std::log(z));
    logits = ref.append(std::span(&g.tokens.back(), 1));
  }
  return g;
}

SamplingParams greedy_logprobs(int n) {
  SamplingParams p = greedy(n);
  p.logprobs = true;
  return p;
}

EngineConfig engine_config() {
  EngineConfig c;
  c.max_model_len = 128;
  c.threads = 2;
  c.kv_type = DType::kF32;
  c.block_size = 4;
  c.max_num_batched_tokens = 7;  // chunked prefill across the original context, beside decodes
  return c;
}

std::map<RequestId, Greedy> run(Engine& e) {
  std::map<RequestId, Greedy> got;
  while (e.has_unfinished()) {
    for (const RequestOutput& o : e.step()) {
      Greedy& g = got[o.id];
      g.tokens.insert(g.tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
      g.logprobs.insert(g.logprobs.end(), o.logprobs.begin(), o.logprobs.end());
    }
  }
  return got;
}

// Tokens equal, and each chosen token's logprob (the logits, which greedy
// tokens of a random model hide) to float rounding.
void expect_same(const Greedy& got, const Greedy& want, const std::string& what) {
  EXPECT_EQ(got.tokens, want.tokens) << what;
  ASSERT_EQ(got.logprobs.size(), want.logprobs.size()) << what;
  for (size_t i = 0; i < want.logprobs.size(); ++i) {
    EXPECT_NEAR(got.logprobs[i], want.logprobs[i], 1e-5) << what << ", token " << i;
  }
}

// Prompts shorter than the original context that cross it while decoding,
// and longer ones that start past it (in chunks), batched together.
TEST(LongRope, EngineRequestsGetTheTokensOfARunAlone) {
  Engine e(*phi3().model, nullptr, engine_config());
  std::map<RequestId, std::vector<int32_t>> want;
  for (int i = 0; i < 4; ++i) {
    const std::vector<int32_t> p = tokens(5 + 6 * i, i);  // 5, 11, 17, 23 tokens
    want[e.add_request(p, greedy_logprobs(20))] = p;
  }
  const auto got = run(e);
  for (const auto& [id, p] : want) expect_same(got.at(id), greedy_alone(p, 20), fmt::format("prompt of {}", p.size()));
  EXPECT_EQ(e.stats().long_rope_restarts_total, 2) << "the prompts of 5 and 11 tokens cross while decoding";
}

// A prompt's blocks computed in the short regime are not the long regime's:
// a longer prompt with the same first blocks computes them again, and a
// second copy of it finds its own.
TEST(LongRope, PrefixCacheKeepsTheRegimesApart) {
  Engine e(*phi3().model, nullptr, engine_config());
  const std::vector<int32_t> short_prompt = tokens(12);
  std::vector<int32_t> long_prompt = tokens(24);
  std::copy(short_prompt.begin(), short_prompt.end(), long_prompt.begin());
  e.add_request(short_prompt, greedy_logprobs(2));
  run(e);
  EXPECT_EQ(e.stats().prefix_hit_tokens_total, 0);
  const RequestId b = e.add_request(long_prompt, greedy_logprobs(8));
  expect_same(run(e).at(b), greedy_alone(long_prompt, 8), "the long prompt");
  EXPECT_EQ(e.stats().prefix_hit_tokens_total, 0) << "the long prompt took short-regime blocks";
  const RequestId c = e.add_request(long_prompt, greedy_logprobs(8));
  expect_same(run(e).at(c), greedy_alone(long_prompt, 8), "the long prompt again");
  EXPECT_GT(e.stats().prefix_hit_tokens_total, 0) << "the second long prompt found nothing of the first";
}

}  // namespace
}  // namespace tessera::engine
