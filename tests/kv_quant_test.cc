// Quantized KV caches (--kv-type q8_0 | q4_0, --kv-hadamard) on the real
// models: perplexity against the f16 cache (issue 36's bounds: q8_0 within
// 0.5%; q4_0 with the Hadamard rotation within 3% where the heads are wide
// enough, and always better than without it), a bounded cache whose kept keys
// are turned (rotate_keys through quantized blocks), and the memory a block
// takes. The kernels' own tests are in attention_test.cc; the engine's
// (batch invariance, prefix caching) in engine_test.cc.
#include <gtest/gtest.h>

#include "core/error.h"
#include "eval/perplexity.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "util/test_util.h"

namespace tessera::engine {
namespace {

struct KvRun {
  DType type;
  bool hadamard = false;
};

// Perplexity at context 128 over the first 30 000 bytes of the TinyStories
// validation text (every chunk), or over the first 6 000 as one stream under
// `policy`.
double ppl_of(const LoadedModel& lm, const Tokenizer& tok, KvRun kv, const kv::KvPolicy& policy = {}) {
  const std::string text = testing::read_file(testing::shared_path("data/tinystories_val_prefix.txt"))
                               .substr(0, policy.bounded() ? 6000 : 30000);
  const auto tokens = tok.encode(text, /*add_special=*/true);
  ThreadPool pool(2);
  PerplexityOptions opt;
  opt.n_ctx = 128;
  opt.kv_type = kv.type;
  opt.kv_hadamard = kv.hadamard;
  opt.kv_policy = policy;
  const PerplexityResult r =
      policy.bounded() ? perplexity_stream(*lm.model, tokens, opt, pool) : perplexity(*lm.model, tok, tokens, opt, pool);
  EXPECT_GT(r.n_scored, 1000);
  return r.ppl;
}

TEST(KvQuant, Stories1MPerplexityNearTheF16Cache) {
  TESSERA_REQUIRE_SHARED("models/stories1M/stories1M.gguf");
  const LoadedModel lm = load_model(testing::shared_path("models/stories1M/stories1M.gguf"));
  const auto tok = Tokenizer::from_gguf(*lm.file);
  const double f16 = ppl_of(lm, *tok, {DType::kF16});
  const double q8 = ppl_of(lm, *tok, {DType::kQ8_0});
  const double q4 = ppl_of(lm, *tok, {DType::kQ4_0});
  const double q4h = ppl_of(lm, *tok, {DType::kQ4_0, true});
  EXPECT_LT(std::abs(q8 / f16 - 1.0), 0.005) << q8 << " vs " << f16;
  EXPECT_LT(q4h / f16, 1.03) << q4h << " vs " << f16;
  EXPECT_LT(q4h, q4) << "the rotation lowers the 4-bit cache's error";
  EXPECT_GT(q4 / f16, 1.002) << "4 bits cost something: the test can tell caches apart";
}

// stories260K's heads are 8 wide: one 4-bit scale per key head, and K's
// features differ in scale by 5x (docs/RESULTS.md, "KV cache types"). q8_0 stays within
// 0.5%; q4_0 does not stay within 3% even rotated, but the rotation helps.
TEST(KvQuant, Stories260KPerplexityNearTheF16Cache) {
  const LoadedModel lm = load_model(testing::stories260k_path());
  const auto tok = Tokenizer::from_gguf(*lm.file);
  const double f16 = ppl_of(lm, *tok, {DType::kF16});
  EXPECT_LT(std::abs(ppl_of(lm, *tok, {DType::kQ8_0}) / f16 - 1.0), 0.005);
  EXPECT_LT(std::abs(ppl_of(lm, *tok, {DType::kQ8_0, true}) / f16 - 1.0), 0.005);
  EXPECT_LT(ppl_of(lm, *tok, {DType::kQ4_0, true}), ppl_of(lm, *tok, {DType::kQ4_0}));
}

// StreamingLLM's sink policy turns every kept key to its new position
// (rotate_keys): through a quantized cache the keys are read, turned in f32
// and quantized again; the stream's perplexity stays near the f16 cache's.
TEST(KvQuant, BoundedCacheTurnsQuantizedKeys) {
  const LoadedModel lm = load_model(testing::stories260k_path());
  const auto tok = Tokenizer::from_gguf(*lm.file);
  kv::KvPolicy sink{kv::KvPolicyKind::kSink, 96, 4};
  const double f16 = ppl_of(lm, *tok, {DType::kF16}, sink);
  EXPECT_LT(std::abs(ppl_of(lm, *tok, {DType::kQ8_0}, sink) / f16 - 1.0), 0.01);
  EXPECT_LT(std::abs(ppl_of(lm, *tok, {DType::kQ8_0, true}, sink) / f16 - 1.0), 0.01);
}

// A block of a q8_0 cache takes 1 byte per value and an fp16 scale per 32
// (or per head when the head is narrower): stories1M's heads of 16 give
// (16 + 2) / 32 of f16's bytes; q4_0 (8 + 2) / 32.
TEST(KvQuant, BlocksTakeTheirBytes) {
  TESSERA_REQUIRE_SHARED("models/stories1M/stories1M.gguf");
  const LoadedModel lm = load_model(testing::shared_path("models/stories1M/stories1M.gguf"));
  const ModelConfig& c = lm.model->config();
  ASSERT_EQ(c.head_dim, 16);
  const size_t f16 = KvCache::bytes_per_block(c, 16, DType::kF16);
  EXPECT_EQ(KvCache::bytes_per_block(c, 16, DType::kQ8_0) * 32, f16 * 18);
  EXPECT_EQ(KvCache::bytes_per_block(c, 16, DType::kQ4_0) * 32, f16 * 10);
  EXPECT_GT(KvCache::blocks_for_memory(c, 16, DType::kQ8_0, 1 << 20),
            KvCache::blocks_for_memory(c, 16, DType::kF16, 1 << 20) * 17 / 10);
  EXPECT_THROW(KvCache odd(c, KvCacheShape{8, 15, DType::kQ4_0}), Error);
  EXPECT_THROW(KvCache rotated_float(c, KvCacheShape{8, 16, DType::kBF16, true}), Error);
}

}  // namespace
}  // namespace tessera::engine
