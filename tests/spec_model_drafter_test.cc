// Model drafters (spec/model_drafter.h): a second model (`draft`) and the
// target with layers skipped (`layers`). The drafter's proposals are checked
// against an independent greedy decode (SequenceRunner, one token at a
// time), its rollback against a fresh drafter given the same tokens, and
// the engine end to end on the real draft/target pair (stories1M verified
// with stories260K drafts): greedy outputs bit-identical, single, batched and
// under preemption.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/sequence_runner.h"
#include "model/synthetic.h"
#include "spec/model_drafter.h"
#include "util/test_util.h"

namespace tessera {
namespace {

constexpr const char* kStories1M = "models/stories1M/stories1M.gguf";

const LoadedModel& stories1m() {
  static const LoadedModel m = load_model(testing::shared_path(kStories1M));
  return m;
}

// The greedy continuation of `tokens`, one token per forward pass.
std::vector<int32_t> greedy_continuation(const Model& m, const std::vector<int32_t>& tokens, int n,
                                         const std::vector<uint8_t>& skip = {}) {
  ThreadPool pool(1);
  engine::SequenceRunner r(m, {.kv_type = DType::kF16}, pool);
  std::span<const float> logits = r.append(tokens);
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin()));
    if (!skip.empty()) break;  // (only the first token is comparable: the runner cannot skip layers)
    logits = r.append(std::span(&out.back(), 1));
  }
  return out;
}

std::vector<int32_t> propose(spec::Drafter& d, uint64_t id, const std::vector<int32_t>& tokens, int32_t k) {
  std::vector<int32_t> out = {-1};
  const spec::DraftQuery q{id, tokens, 0, k, &out};
  d.propose(std::span(&q, 1));
  return out;
}

spec::ModelDrafterOptions options(int64_t capacity = 4096, int64_t max_batch_tokens = 512) {
  return {.capacity_tokens = capacity, .block_size = 16, .kv_type = DType::kF16, .max_batch_tokens = max_batch_tokens,
          .skip_layers = {}};
}

TEST(ModelDrafter, ProposesTheDraftModelsGreedyContinuation) {
  TESSERA_REQUIRE_SHARED("models/stories260K/stories260K.gguf");
  const testing::LoadedWithTokenizer& l = testing::stories260k();
  ThreadPool pool(2);
  auto d = spec::make_model_drafter(*l.lm.model, options(), pool);
  EXPECT_STREQ(d->name(), "draft");
  EXPECT_TRUE(d->costly());
  std::vector<int32_t> t = l.tok->encode("Once upon a time, there was a little girl", true);
  const std::vector<int32_t> want = greedy_continuation(*l.lm.model, t, 8);
  EXPECT_EQ(d->uncomputed_tokens(1, t), static_cast<int64_t>(t.size()));  // a prompt it has not read
  EXPECT_EQ(propose(*d, 1, t, 8), want);
  // The target accepted three, then chose another token: the drafter rolls
  // back to the common prefix and continues from the real tokens.
  t.insert(t.end(), want.begin(), want.begin() + 3);
  t.push_back(want[3] == 5 ? 6 : 5);
  EXPECT_EQ(d->uncomputed_tokens(1, t), 1);  // only the target's own token
  EXPECT_EQ(propose(*d, 1, t, 5), greedy_continuation(*l.lm.model, t, 5));
  // All accepted (no rollback), and a shorter request.
  const std::vector<int32_t> next = greedy_continuation(*l.lm.model, t, 6);
  std::vector<int32_t> t2 = t;
  t2.insert(t2.end(), next.begin(), next.begin() + 5);
  EXPECT_EQ(propose(*d, 1, t2, 2), greedy_continuation(*l.lm.model, t2, 2));
  EXPECT_TRUE(propose(*d, 1, t2, 0).empty());
  d->release(1);
  EXPECT_EQ(d->uncomputed_tokens(1, t2), static_cast<int64_t>(t2.size()));
  d->release(1);  // twice, or unknown: nothing
}

TEST(ModelDrafter, KeepsNoStateThatAFreshDrafterWouldNotHave) {
  // Three sequences evolve with random acceptance, rejection and edits; at
  // every step one long-lived drafter (batched, chunked catch-up) proposes
  // exactly what a fresh drafter does for each sequence alone.
  TESSERA_REQUIRE_SHARED("models/stories260K/stories260K.gguf");
  const testing::LoadedWithTokenizer& l = testing::stories260k();
  ThreadPool pool(2);
  auto live = spec::make_model_drafter(*l.lm.model, options(4096, 7), pool);
  std::mt19937 rng(7);
  std::vector<std::vector<int32_t>> seqs = {l.tok->encode("Tom had a red ball.", true),
                                            l.tok->encode("One day, a big bird", true),
                                            l.tok->encode("The cat sat on the mat. The dog", true)};
  for (int step = 0; step < 12; ++step) {
    std::vector<std::vector<int32_t>> outs(seqs.size());
    std::vector<spec::DraftQuery> qs;
    for (size_t i = 0; i < seqs.size(); ++i) {
      qs.push_back({i + 10, seqs[i], 0, static_cast<int32_t>(1 + rng() % 6), &outs[i]});
    }
    live->propose(qs);
    for (size_t i = 0; i < seqs.size(); ++i) {
      auto fresh = spec::make_model_drafter(*l.lm.model, options(), pool);
      ASSERT_EQ(outs[i], propose(*fresh, 1, seqs[i], qs[i].max_tokens)) << "step " << step << " seq " << i;
      // The target takes a random prefix of the draft, then its own token.
      const size_t take = rng() % (outs[i].size() + 1);
      seqs[i].insert(seqs[i].end(), outs[i].begin(), outs[i].begin() + static_cast<std::ptrdiff_t>(take));
      seqs[i].push_back(static_cast<int32_t>(3 + rng() % 400));
      if (rng() % 5 == 0) seqs[i].resize(seqs[i].size() - 3);  // a rewind deeper than the last draft
    }
  }
}

TEST(ModelDrafter, AShortPoolDropsIdleSequencesThenDraftsLess) {
  TESSERA_REQUIRE_SHARED("models/stories260K/stories260K.gguf");
  const testing::LoadedWithTokenizer& l = testing::stories260k();
  ThreadPool pool(1);
  auto d = spec::make_model_drafter(*l.lm.model, options(/*capacity=*/48), pool);  // 3 blocks of 16
  const std::vector<int32_t> a = l.tok->encode("Tom had a red ball. He liked to play with it every day.", true);
  const std::vector<int32_t> want = greedy_continuation(*l.lm.model, a, 4);
  EXPECT_EQ(propose(*d, 1, a, 4), want);
  // Sequence 2 needs the blocks sequence 1 holds: 1 is not asking, so it goes.
  EXPECT_EQ(propose(*d, 2, a, 4), want);
  // Both at once cannot fit: one drafts, the other gets nothing (no crash,
  // no partial garbage), and both come back when there is room.
  std::vector<int32_t> o1, o2;
  const spec::DraftQuery qs[] = {{1, a, 0, 4, &o1}, {2, a, 0, 4, &o2}};
  d->propose(qs);
  EXPECT_TRUE((o1 == want && o2.empty()) || (o2 == want && o1.empty()) || (o1.empty() && o2.empty()));
  d->release(1);
  EXPECT_EQ(propose(*d, 2, a, 4), want);
  // Longer than the whole pool: nothing.
  std::vector<int32_t> longer(60, 5);
  EXPECT_TRUE(propose(*d, 3, longer, 4).empty());
}

TEST(ModelDrafter, SkippedLayersChangeTheModelAndParseFromLists) {
  TESSERA_REQUIRE_SHARED(kStories1M);
  const Model& m = *stories1m().model;
  const int64_t L = m.config().n_layer;
  ASSERT_EQ(L, 5);
  EXPECT_EQ(spec::parse_layer_list("1-2", L), (std::vector<uint8_t>{0, 1, 1, 0, 0}));
  EXPECT_EQ(spec::parse_layer_list("0,3-4", L), (std::vector<uint8_t>{1, 0, 0, 1, 1}));
  EXPECT_EQ(spec::parse_layer_list("1,3", L)[3], 1);
  EXPECT_THROW(spec::parse_layer_list("0-" + std::to_string(L - 1), L), Error);  // every layer
  EXPECT_THROW(spec::parse_layer_list(std::to_string(L), L), Error);            // out of range
  EXPECT_THROW(spec::parse_layer_list("2-1", L), Error);
  EXPECT_THROW(spec::parse_layer_list("x", L), Error);
  EXPECT_THROW(spec::parse_layer_list("1,,2", L), Error);
  // A drafter skipping layers proposes what that smaller network computes:
  // different from the full model's on some prompt, and deterministic.
  ThreadPool pool(1);
  spec::ModelDrafterOptions o = options();
  o.skip_layers = spec::parse_layer_list("1-2", L);
  auto layers = spec::make_model_drafter(m, o, pool);
  EXPECT_STREQ(layers->name(), "layers");
  auto full = spec::make_model_drafter(m, options(), pool);
  const testing::LoadedWithTokenizer& l = testing::stories260k();  // same tokenizer
  int differ = 0;
  for (const char* p : {"Once upon a time", "Tom had a red ball.", "The sun was", "Lily and her mom went"}) {
    const std::vector<int32_t> t = l.tok->encode(p, true);
    const std::vector<int32_t> a = propose(*layers, 1, t, 6);
    EXPECT_EQ(propose(*full, 1, t, 6), greedy_continuation(m, t, 6));
    auto again = spec::make_model_drafter(m, o, pool);
    EXPECT_EQ(propose(*again, 1, t, 6), a);
    differ += a != greedy_continuation(m, t, 6);
    layers->release(1);
    full->release(1);
  }
  EXPECT_GT(differ, 0) << "skipping two of five layers must change some greedy continuation";
  o.skip_layers.resize(static_cast<size_t>(L + 1));
  EXPECT_THROW(spec::make_model_drafter(m, o, pool), Error);
}

TEST(ModelDrafter, ChoosesLayersFromMeasuredAgreement) {
  TESSERA_REQUIRE_SHARED(kStories1M);
  const Model& m = *stories1m().model;
  const testing::LoadedWithTokenizer& l = testing::stories260k();
  ThreadPool pool(2);
  const std::vector<int32_t> text = l.tok->encode(spec::kLayerProbeText, true);
  const spec::LayerChoice c = spec::choose_layers_to_skip(m, pool, text);
  EXPECT_GT(c.acceptance, 0.0);
  EXPECT_LT(c.acceptance, 1.0) << "agreement on real text is measured, not a degenerate loop";
  if (c.skip.empty()) {
    EXPECT_LE(c.predicted_speedup, 1.0);
    return;
  }
  EXPECT_EQ(static_cast<int64_t>(c.skip.size()), m.config().n_layer);
  EXPECT_EQ(c.skip.front(), 0) << "the first and last layers stay";
  EXPECT_EQ(c.skip.back(), 0);
  EXPECT_GT(c.predicted_speedup, 1.0);
  // Too short a text to measure: no choice.
  EXPECT_TRUE(spec::choose_layers_to_skip(m, pool, std::span(text.data(), 4)).skip.empty());
}

TEST(ModelDrafter, MeasuresAgreementAsGreedyDecodingWouldSeeIt) {
  // Teacher-forced agreement in one pass per model against an independent
  // path: each model's argmax after every prefix, one token at a time.
  TESSERA_REQUIRE_SHARED(kStories1M);
  const Model& target = *stories1m().model;
  const testing::LoadedWithTokenizer& l = testing::stories260k();
  ThreadPool pool(2);
  std::vector<int32_t> text = l.tok->encode(spec::kLayerProbeText, true);
  text.resize(60);
  auto one_at_a_time = [&](const Model& m) {
    engine::SequenceRunner r(m, {.kv_type = DType::kF32}, pool);
    std::vector<int32_t> picks;
    for (const int32_t t : text) {
      std::span<const float> logits = r.append(std::span(&t, 1));
      picks.push_back(static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin()));
    }
    return picks;
  };
  const std::vector<int32_t> a = one_at_a_time(target), b = one_at_a_time(*l.lm.model);
  int64_t agree = 0;
  for (size_t i = 0; i < a.size(); ++i) agree += a[i] == b[i];
  EXPECT_DOUBLE_EQ(spec::measure_agreement(target, *l.lm.model, {}, pool, text), static_cast<double>(agree) / 60.0);
  EXPECT_GT(agree, 0);
  EXPECT_LT(agree, 60);
  EXPECT_DOUBLE_EQ(spec::measure_agreement(target, target, {}, pool, text), 1.0);
  // Skipping layers changes the draft: agreement below 1 on real text.
  EXPECT_LT(spec::measure_agreement(target, target, {0, 0, 1, 0, 0}, pool, text), 1.0);
}

// ---- the engine: stories1M verified with stories260K drafts ----

engine::EngineConfig config(spec::Method method, int kv_blocks = 0) {
  engine::EngineConfig c;
  c.max_model_len = 256;  // stories1M's training context
  c.threads = 2;
  c.kv_type = DType::kF32;
  c.seed = 42;
  c.num_kv_blocks = kv_blocks;
  c.spec_method = method;
  c.spec_k = 5;
  c.spec_adaptive = false;  // every proposal verified: the most drafts
  c.spec_draft_model = testing::stories260k().lm.model.get();
  c.spec_skip_layers = {0, 0, 1, 0, 0};
  return c;
}

struct Outcome {
  std::map<engine::RequestId, std::vector<int32_t>> tokens;
  std::map<engine::RequestId, std::vector<float>> logprobs;
  engine::EngineStats stats;
};

Outcome run(const std::vector<std::string>& prompts, const engine::EngineConfig& c) {
  const Tokenizer& tok = *testing::stories260k().tok;
  engine::Engine e(*stories1m().model, &tok, c);
  engine::SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = 90;
  p.ignore_eos = true;
  p.logprobs = true;
  for (const std::string& s : prompts) e.add_request(s, p);
  Outcome r;
  for (int guard = 0; e.has_unfinished() && guard < 100000; ++guard) {
    for (const engine::RequestOutput& o : e.step()) {
      r.tokens[o.id].insert(r.tokens[o.id].end(), o.new_tokens.begin(), o.new_tokens.end());
      r.logprobs[o.id].insert(r.logprobs[o.id].end(), o.logprobs.begin(), o.logprobs.end());
    }
  }
  r.stats = e.stats();
  EXPECT_EQ(r.stats.kv_blocks_used, 0);
  return r;
}

const std::vector<std::string> kPrompts = {"Once upon a time, there was a little girl named Lily.", "Tom had a red ball.",
                                           "One day, a big bird", "The cat sat on the mat. The dog sat on the"};

TEST(SpeculativeEngine, GreedyOutputsAreBitIdenticalWithADraftModel) {
  TESSERA_REQUIRE_SHARED(kStories1M);
  for (const int kv_blocks : {0, 14}) {  // 14 blocks of 16: preemption with four sequences
    for (const size_t n : {size_t{1}, kPrompts.size()}) {
      const std::vector<std::string> prompts(kPrompts.begin(), kPrompts.begin() + static_cast<std::ptrdiff_t>(n));
      const Outcome a = run(prompts, config(spec::Method::kNone, kv_blocks));
      const Outcome b = run(prompts, config(spec::Method::kDraft, kv_blocks));
      EXPECT_EQ(a.tokens, b.tokens) << "kv blocks " << kv_blocks << ", " << n << " requests";
      EXPECT_EQ(a.logprobs, b.logprobs);
      EXPECT_GT(b.stats.spec_accepted_tokens_total, 40) << "the drafts must be exercised";
      EXPECT_GT(b.stats.spec_drafted_tokens_total, b.stats.spec_accepted_tokens_total) << "and rejections too";
      EXPECT_LT(b.stats.steps_total, a.stats.steps_total);
      if (kv_blocks > 0 && n > 1) {
        EXPECT_GT(b.stats.preemptions_total, 0);
      }
    }
  }
}

TEST(SpeculativeEngine, GreedyOutputsAreBitIdenticalWithSkippedLayers) {
  TESSERA_REQUIRE_SHARED(kStories1M);
  const Outcome a = run(kPrompts, config(spec::Method::kNone));
  const Outcome b = run(kPrompts, config(spec::Method::kLayers));
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.logprobs, b.logprobs);
  EXPECT_GT(b.stats.spec_accepted_tokens_total, 20);
  // The adaptive policy with its chosen layers (or none, with a warning).
  engine::EngineConfig c = config(spec::Method::kLayers);
  c.spec_skip_layers.clear();
  c.spec_adaptive = true;
  const Outcome d = run(kPrompts, c);
  EXPECT_EQ(a.tokens, d.tokens);
}

TEST(SpeculativeEngine, ADraftModelMustBeGivenAndShareTheVocabulary) {
  TESSERA_REQUIRE_SHARED(kStories1M);
  engine::EngineConfig c = config(spec::Method::kDraft);
  c.spec_draft_model = nullptr;
  EXPECT_THROW(engine::Engine(*stories1m().model, nullptr, c), Error);
  // A random model with another vocabulary size.
  SyntheticModelSpec s = preset_spec("tiny");
  s.n_vocab = 300;
  const std::string path = testing::temp_path("other-vocab.gguf");
  write_synthetic_model(s, path, 1);
  const LoadedModel other = load_model(path);
  c.spec_draft_model = other.model.get();
  try {
    engine::Engine e(*stories1m().model, nullptr, c);
    ADD_FAILURE() << "a draft model of another vocabulary was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("vocabulary"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessera
