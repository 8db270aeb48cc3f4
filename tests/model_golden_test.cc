// The real stories260K model against its golden greedy output (256 tokens
// from BOS, produced by an independent implementation and cross-checked with
// llama.cpp and the llama2.c model card), for every ISA and thread count.
#include <nlohmann/json.hpp>

#include <algorithm>

#include "core/cpu.h"
#include "engine/sequence_runner.h"
#include "model/model.h"
#include "util/test_util.h"

namespace tessera {
namespace {

std::vector<int32_t> golden_ids() {
  const auto j = nlohmann::json::parse(
      testing::read_file(testing::shared_path("models/stories260K/stories260K_greedy256_expected.json")));
  return j.at("generated_ids").get<std::vector<int32_t>>();
}

int32_t argmax(std::span<const float> v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

std::vector<int32_t> greedy_from_bos(const Model& m, int n_steps, Isa isa, ThreadPool& pool, DType kv_type) {
  engine::SequenceRunner runner(m, {.n_ctx = 512, .block_size = 16, .kv_type = kv_type}, pool);
  runner.state().ctx.isa = isa;
  std::vector<int32_t> out;
  int32_t tok = 1;  // BOS
  for (int i = 0; i < n_steps; ++i) {
    const int32_t ids[1] = {tok};
    tok = argmax(runner.append(ids));
    out.push_back(tok);
  }
  return out;
}

class GoldenTest : public ::testing::TestWithParam<std::tuple<Isa, int>> {};

TEST_P(GoldenTest, GreedyFromBosMatches256GoldenTokens) {
  TESSERA_REQUIRE_SHARED("models/stories260K/stories260K.gguf");
  const auto [isa, threads] = GetParam();
  if (!isa_supported(isa)) GTEST_SKIP() << "CPU lacks " << isa_name(isa);
  const LoadedModel lm = load_model(testing::stories260k_path());
  ThreadPool pool(threads);
  const std::vector<int32_t> expected = golden_ids();
  ASSERT_EQ(expected.size(), 256u);
  EXPECT_EQ(greedy_from_bos(*lm.model, 256, isa, pool, DType::kF32), expected);
}

INSTANTIATE_TEST_SUITE_P(AllIsas, GoldenTest,
                         ::testing::Combine(::testing::Values(Isa::kScalar, Isa::kAvx2, Isa::kAvx512),
                                            ::testing::Values(1, 2, 3)),
                         [](const auto& info) {
                           return std::string(isa_name(std::get<0>(info.param))) + "_t" +
                                  std::to_string(std::get<1>(info.param));
                         });

TEST(Golden, HalfPrecisionKvCacheKeepsGreedyOutput) {
  // F16/BF16 KV round the keys and values; on this model the greedy argmax
  // margins are wide enough that the first 64 tokens must not change.
  const LoadedModel lm = load_model(testing::stories260k_path());
  ThreadPool pool(2);
  const std::vector<int32_t> expected = golden_ids();
  const std::vector<int32_t> head(expected.begin(), expected.begin() + 64);
  EXPECT_EQ(greedy_from_bos(*lm.model, 64, active_isa(), pool, DType::kF16), head);
}

TEST(Golden, ChunkedPrefillGivesSameLogitsAsTokenByToken) {
  const LoadedModel lm = load_model(testing::stories260k_path());
  ThreadPool pool(2);
  std::vector<int32_t> prompt = {1};
  const auto ids = golden_ids();
  prompt.insert(prompt.end(), ids.begin(), ids.begin() + 99);  // 100 tokens
  engine::SequenceRunner one(*lm.model, {.n_ctx = 512, .max_batch_tokens = 1}, pool);
  engine::SequenceRunner many(*lm.model, {.n_ctx = 512, .max_batch_tokens = 37}, pool);
  std::span<const float> a, b;
  for (int32_t t : prompt) a = one.append(std::span<const int32_t>(&t, 1));
  std::vector<float> la(a.begin(), a.end());
  b = many.append(prompt);
  ASSERT_EQ(la.size(), b.size());
  // Same arithmetic per row (batch invariance), so the logits are identical.
  for (size_t i = 0; i < la.size(); ++i) ASSERT_EQ(la[i], b[i]) << "logit " << i;
}

}  // namespace
}  // namespace tessera
