// Quantized KV caches (--kv-type q8_0 | q4_0, --kv-hadamard) on the real
// models: perplexity against the f16 cache (issue 36's bounds: q8_0 within
// 0.5%; q4_0 with the Hadamard rotation within 3% where the heads are wide
// enough, and always better than without it), a bounded cache whose kept keys
// are turned (rotate_keys through quantized blocks), and the memory a block
// takes; key centering (a file's key means subtracted by a quantized cache).
// The kernels' own tests are in attention_test.cc; the engine's
// (batch invariance, prefix caching) in engine_test.cc.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "core/error.h"
#include "eval/perplexity.h"
#include "format/gguf.h"
#include "format/gguf_writer.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "model/synthetic.h"
#include "model/weights.h"
#include "quant/calibration.h"
#include "quant/key_mean.h"
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

// stories260K's heads are 8 wide: one 4-bit scale per key head, set by the
// large constant its keys carry in the low-frequency rotary pairs
// (docs/RESULTS.md, "KV cache types"; centering below). q8_0 stays within
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

// `in` copied to `out` with `tessera.kv.key_mean` = `means` (layer after layer).
void write_with_key_mean(const std::string& in, const std::string& out, const std::vector<float>& means) {
  const gguf::File f = gguf::File::open(in);
  gguf::Writer w;
  for (const auto& [k, v] : f.metadata()) w.set_value(k, v);
  w.set_f32s(kKeyMeanKey, means);
  for (const gguf::TensorInfo& t : f.tensors()) {
    w.add_tensor(t.name, t.type, std::vector<int64_t>(t.ne, t.ne + t.n_dims),
                 [&t](uint8_t* o, size_t n) { std::memcpy(o, t.data, n); });
  }
  w.write(out);
}

// stories260K with its key means calibrated on the built-in text (as
// `tessera quantize --center-keys` does).
std::string centered_stories260k() {
  const std::string in = testing::stories260k_path(), out = testing::temp_path("stories260k.centered.gguf");
  const LoadedModel lm = load_model(in);
  const auto tok = Tokenizer::from_gguf(*lm.file);
  ThreadPool pool(2);
  const auto calib = tok->encode(std::string(quant::default_calibration_text()), /*add_special=*/false);
  write_with_key_mean(in, out, quant::flatten_key_means(quant::key_means(*lm.model, calib, 128, tok->bos_id(), pool)));
  return out;
}

// Key centering (quant/key_mean.h): stories260K's keys carry a constant of
// 13-19 in their low-frequency pairs; less it, one 4-bit step per head of 8
// resolves the rest. Float caches ignore the means (same perplexity, bit for
// bit); q8_0 stays within 0.5%; q4_0 with the rotation goes from x1.52 to
// about x1.07 of the f16 cache (issue 36 asks 3%: docs/RESULTS.md).
TEST(KvQuant, CenteredKeysCutTheLossOfA4BitCache) {
  const LoadedModel plain = load_model(testing::stories260k_path()), centered = load_model(centered_stories260k());
  const auto tok = Tokenizer::from_gguf(*plain.file);
  const double f16 = ppl_of(plain, *tok, {DType::kF16});
  EXPECT_EQ(ppl_of(centered, *tok, {DType::kF16}), f16);
  EXPECT_LT(std::abs(ppl_of(centered, *tok, {DType::kQ8_0}) / f16 - 1.0), 0.005);
  const double q4h = ppl_of(plain, *tok, {DType::kQ4_0, true}), q4hc = ppl_of(centered, *tok, {DType::kQ4_0, true});
  std::printf("stories260K q4_0+Hadamard: x%.4f, centered keys x%.4f\n", q4h / f16, q4hc / f16);
  EXPECT_LT(q4hc / f16 - 1.0, 0.25 * (q4h / f16 - 1.0));
  EXPECT_LT(q4hc / f16, 1.10);
}

// A bounded cache turns its kept keys (rotate_keys): centered keys get their
// means back before the turn and lose them after.
TEST(KvQuant, BoundedCacheTurnsCenteredKeys) {
  const LoadedModel plain = load_model(testing::stories260k_path()), centered = load_model(centered_stories260k());
  const auto tok = Tokenizer::from_gguf(*plain.file);
  kv::KvPolicy sink{kv::KvPolicyKind::kSink, 96, 4};
  const double f16 = ppl_of(plain, *tok, {DType::kF16}, sink);
  EXPECT_LT(std::abs(ppl_of(centered, *tok, {DType::kQ8_0}, sink) / f16 - 1.0), 0.005);
  EXPECT_LT(std::abs(ppl_of(centered, *tok, {DType::kQ8_0, true}, sink) / f16 - 1.0), 0.005);
}

// Reading a centered cache back (Prompt Cache modules, the KV store's
// export) gives the keys as they went in: the means are added back.
TEST(KvQuant, CenteredCacheReadsBackItsKeys) {
  ModelConfig c;
  c.n_layer = 2, c.n_head = 4, c.n_head_kv = 2, c.head_dim = 8;
  std::mt19937 rng(7);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<std::vector<float>> mean(2, std::vector<float>(16));
  for (auto& m : mean) {
    for (float& v : m) v = 20.0f * n(rng);
  }
  KvCache cache(c, KvCacheShape{4, 16, DType::kQ8_0, true, mean});
  DenseKv in;
  in.n_layer = 2, in.n_tokens = 5, in.kv_dim = 16;
  for (int64_t l = 0; l < 2; ++l) {
    for (int64_t t = 0; t < 5; ++t) {
      for (int64_t j = 0; j < 16; ++j) in.k.push_back(mean[l][j] + n(rng)), in.v.push_back(n(rng));
    }
  }
  const std::vector<int64_t> slots = {16, 17, 18, 19, 20};
  cache.write(in, 0, 5, slots);
  const DenseKv out = cache.read(slots);
  ASSERT_EQ(out.k.size(), in.k.size());
  for (size_t i = 0; i < in.k.size(); ++i) {
    // q8_0 of the centered key (|k - mean| < 5): a step of at most 5 / 127.
    EXPECT_NEAR(out.k[i], in.k[i], 0.03) << i;
  }
}

TEST(KvQuant, KeyMeansInAFileAreChecked) {
  const std::string in = testing::stories260k_path();
  const ModelConfig c = load_model(in).model->config();
  const std::string short_file = testing::temp_path("key-mean-short.gguf"), nan_file = testing::temp_path("key-mean-nan.gguf");
  write_with_key_mean(in, short_file, std::vector<float>(static_cast<size_t>(c.n_layer * c.kv_dim() - 1)));
  std::vector<float> nan(static_cast<size_t>(c.n_layer * c.kv_dim()));
  nan[3] = NAN;
  write_with_key_mean(in, nan_file, nan);
  for (const std::string& f : {short_file, nan_file}) {
    try {
      load_model(f);
      ADD_FAILURE() << f << " loaded";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kCorruptFile) << e.what();
      EXPECT_NE(std::string(e.what()).find(kKeyMeanKey), std::string::npos) << e.what();
    }
  }
  // Soft-capped scores are not shift-invariant: gemma2 refuses the key.
  SyntheticModelSpec s = preset_spec("tiny");
  s.arch = "gemma2";
  s.n_vocab = 64;
  const std::string g = testing::temp_path("key-mean-gemma2.gguf"), gk = testing::temp_path("key-mean-gemma2k.gguf");
  write_synthetic_model(s, g, 1);
  write_with_key_mean(g, gk, std::vector<float>(static_cast<size_t>(s.n_layer * s.n_head_kv * (s.n_embd / s.n_head))));
  try {
    load_model(gk);
    ADD_FAILURE() << "gemma2 took key means";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("soft-capping"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessera::engine
