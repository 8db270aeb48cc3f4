// Prompt Cache modules on stories260K: imported K/V equal computed K/V where
// the two must agree, positions follow the schema, cached states are kept
// apart from plain prompts, and bad imports are rejected.
#include <gtest/gtest.h>

#include <algorithm>
#include <list>
#include <random>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/prompt_cache.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "util/test_util.h"

namespace tessera::engine {
namespace {

const char* kSchema = R"({"name": "stories", "modules": [
  {"name": "lily", "text": "Lily was a little girl who loved to play in the park with her dog."},
  {"name": "ben", "text": "Ben was a boy who liked to build big towers with his blocks."},
  {"name": "moral", "text": "They learned that sharing makes everyone happy."}
]})";

struct Fixture : ::testing::Test {
  LoadedModel lm = load_model(testing::stories260k_path());
  std::unique_ptr<Tokenizer> tok = Tokenizer::from_gguf(*lm.file);
  ThreadPool pool{2};
  PromptSchema schema = PromptSchema::parse(kSchema, *tok);

  EngineConfig config() {
    EngineConfig c;
    c.max_model_len = 512;
    c.threads = 2;
    c.kv_type = DType::kF32;
    c.seed = 3;
    return c;
  }
  SamplingParams greedy() {
    SamplingParams p;
    p.temperature = 0.0f;
    p.max_tokens = 24;
    p.ignore_eos = true;
    p.logprobs = true;
    return p;
  }
  std::pair<std::vector<int32_t>, std::vector<float>> run(Engine& e, RequestId id) {
    std::vector<int32_t> toks;
    std::vector<float> lps;
    while (e.has_unfinished()) {
      for (const RequestOutput& o : e.step()) {
        if (o.id != id) continue;
        toks.insert(toks.end(), o.new_tokens.begin(), o.new_tokens.end());
        lps.insert(lps.end(), o.logprobs.begin(), o.logprobs.end());
      }
    }
    return {toks, lps};
  }
};

TEST_F(Fixture, SchemaPositionsAreFixedAndContiguous) {
  ASSERT_EQ(schema.modules.size(), 3u);
  EXPECT_EQ(schema.modules[0].start_pos, 1);
  EXPECT_EQ(schema.modules[1].start_pos, 1 + static_cast<int32_t>(schema.modules[0].tokens.size()));
  EXPECT_EQ(schema.end_pos, schema.modules[2].start_pos + static_cast<int32_t>(schema.modules[2].tokens.size()));
  PromptCache pc(*lm.model, *tok, schema, DType::kF32, pool);
  const auto free = tok->encode(" One day,", false);
  const PromptLayout l = pc.compose({"lily", "moral"}, free);
  ASSERT_EQ(l.tokens.size(), l.positions.size());
  EXPECT_EQ(l.positions[0], 0);
  EXPECT_EQ(l.positions[1], 1);
  // "moral" keeps its schema positions although "ben" is skipped.
  const size_t moral_at = 1 + schema.modules[0].tokens.size();
  EXPECT_EQ(l.positions[moral_at], schema.modules[2].start_pos);
  EXPECT_EQ(l.positions.back(), schema.end_pos + static_cast<int32_t>(free.size()) - 1);
  EXPECT_EQ(l.preloaded->n_tokens, static_cast<int64_t>(moral_at + schema.modules[2].tokens.size()));
}

TEST_F(Fixture, FirstModuleAloneEqualsFullComputationBitwise) {
  // A single module right after BOS sees exactly what a full computation
  // sees, so importing its K/V must give bit-identical outputs.
  PromptCache pc(*lm.model, *tok, schema, DType::kF32, pool);
  const auto free = tok->encode(" One day, she", false);
  PromptLayout layout = pc.compose({"lily"}, free);
  const std::vector<int32_t> plain = layout.tokens;
  EngineConfig cfg = config();
  cfg.enable_prefix_caching = false;
  Engine a(*lm.model, tok.get(), cfg);
  const auto full = run(a, a.add_request(plain, greedy()));
  Engine b(*lm.model, tok.get(), cfg);
  const auto cached = run(b, b.add_request(layout, greedy()));
  EXPECT_EQ(cached.first, full.first);
  EXPECT_EQ(cached.second, full.second);
}

TEST_F(Fixture, CompositionBlocksAreSharedOnlyBetweenEqualImports) {
  PromptCache pc(*lm.model, *tok, schema, DType::kF32, pool);
  Engine e(*lm.model, tok.get(), config());
  const auto free = tok->encode(" The end.", false);
  run(e, e.add_request(pc.compose({"lily", "ben", "moral"}, free), greedy()));
  const int64_t hits0 = e.stats().prefix_hit_tokens_total;
  EXPECT_EQ(hits0, 0);
  // The same import again: its full blocks come from the prefix cache.
  run(e, e.add_request(pc.compose({"lily", "ben", "moral"}, free), greedy()));
  const int64_t hits1 = e.stats().prefix_hit_tokens_total;
  EXPECT_GE(hits1, 32);
  // The same tokens as a plain prompt must not reuse states computed with
  // modules apart (their K/V differ).
  run(e, e.add_request(pc.compose({"lily", "ben", "moral"}, free).tokens, greedy()));
  EXPECT_EQ(e.stats().prefix_hit_tokens_total, hits1);
}

TEST_F(Fixture, ModulesDoNotSeeEachOther) {
  // With two modules the imported states differ from one pass over the same
  // text (the second module did not attend to the first): outputs may
  // differ, but the engine must run it and produce the requested tokens.
  PromptCache pc(*lm.model, *tok, schema, DType::kF32, pool);
  Engine e(*lm.model, tok.get(), config());
  const auto out = run(e, e.add_request(pc.compose({"lily", "ben"}, tok->encode(" They", false)), greedy()));
  EXPECT_EQ(out.first.size(), 24u);
  EXPECT_EQ(e.stats().kv_blocks_used, 0);
}

// Each module subset a request imports is composed once into its own copy of
// K/V; a schema of m modules has 2^m of them. They are kept within a byte
// budget, least recently used evicted first, and an evicted one is rebuilt
// identically. The test drives random subsets and keeps its own LRU model:
// a subset the model holds must be served without a build, any other must
// be built.
TEST_F(Fixture, CompositionsStayWithinTheirBudgetLeastRecentlyUsedFirst) {
  const auto free = tok->encode(" x", false);
  std::vector<std::vector<std::string>> subsets;
  for (int mask = 0; mask < 8; ++mask) {
    std::vector<std::string> names;
    for (int i = 0; i < 3; ++i) {
      if (mask & (1 << i)) names.push_back(schema.modules[static_cast<size_t>(i)].name);
    }
    subsets.push_back(names);
  }
  // The reference: every composition, built by a cache that keeps them all.
  PromptCache all(*lm.model, *tok, schema, DType::kF32, pool, {.compositions_bytes = size_t{1} << 40});
  std::vector<std::shared_ptr<const DenseKv>> want;
  size_t total = 0, largest = 0;
  for (const auto& s : subsets) {
    want.push_back(all.compose(s, free).preloaded);
    total += want.back()->bytes();
    largest = std::max(largest, want.back()->bytes());
  }
  EXPECT_EQ(all.composition_stats().bytes, total);
  EXPECT_EQ(all.composition_stats().compositions, 8);

  const size_t budget = largest * 2 + largest / 2;
  ASSERT_LT(budget, total);
  PromptCache pc(*lm.model, *tok, schema, DType::kF32, pool, {.compositions_bytes = budget});
  std::list<size_t> model;  // subset indices, most recent first
  size_t model_bytes = 0;
  int64_t builds = 0, evictions = 0;
  std::mt19937 rng(7);
  for (int step = 0; step < 400; ++step) {
    const size_t i = rng() % subsets.size();
    const PromptLayout l = pc.compose(subsets[i], free);
    auto it = std::find(model.begin(), model.end(), i);
    if (it != model.end()) {
      model.erase(it);
    } else {
      ++builds;
      while (model_bytes + want[i]->bytes() > budget) {
        model_bytes -= want[model.back()]->bytes();
        model.pop_back();
        ++evictions;
      }
      model_bytes += want[i]->bytes();
    }
    model.push_front(i);
    const PromptCache::CompositionStats st = pc.composition_stats();
    ASSERT_LE(st.bytes, budget);
    ASSERT_EQ(st.builds_total, builds) << "step " << step << ": subset " << i;
    ASSERT_EQ(st.evictions_total, evictions) << "step " << step;
    ASSERT_EQ(st.bytes, model_bytes);
    ASSERT_EQ(st.compositions, static_cast<int64_t>(model.size()));
    // Kept or rebuilt, the same states.
    ASSERT_EQ(l.preloaded->n_tokens, want[i]->n_tokens);
    ASSERT_EQ(l.preloaded->k, want[i]->k);
    ASSERT_EQ(l.preloaded->v, want[i]->v);
  }
  EXPECT_GT(evictions, 0);
  // A composition larger than the whole budget is served, not kept.
  PromptCache tiny(*lm.model, *tok, schema, DType::kF32, pool, {.compositions_bytes = want[0]->bytes()});
  const PromptLayout big = tiny.compose(subsets[7], free);
  EXPECT_EQ(big.preloaded->k, want[7]->k);
  EXPECT_EQ(tiny.composition_stats().compositions, 0);
  EXPECT_EQ(tiny.composition_stats().bytes, 0u);
}

TEST_F(Fixture, BadImportsAreRejected) {
  PromptCache pc(*lm.model, *tok, schema, DType::kF32, pool);
  const auto free = tok->encode(" x", false);
  EXPECT_THROW(pc.compose({"nope"}, free), tessera::Error);
  EXPECT_THROW(pc.compose({"moral", "lily"}, free), tessera::Error);
  EXPECT_THROW(pc.compose({"lily", "lily"}, free), tessera::Error);
  EXPECT_THROW(pc.compose({"lily"}, {}), tessera::Error);
  EXPECT_THROW(PromptSchema::parse("{\"modules\": []}", *tok), tessera::Error);
  EXPECT_THROW(PromptSchema::parse("not json", *tok), tessera::Error);
  EXPECT_THROW(PromptSchema::parse(R"({"modules": [{"name": "a", "text": "x"}, {"name": "a", "text": "y"}]})", *tok),
               tessera::Error);
}

}  // namespace
}  // namespace tessera::engine
