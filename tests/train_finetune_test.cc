// LoRA fine-tuning (train/finetune.h) on stories260K with tinyshakespeare:
// a few steps lower the training and the held-out loss; the same seed gives
// the same adapter bytes on 1 and 2 threads; the adapter written as
// llama.cpp's GGUF loads back (adapters::load_lora) and gives, through the
// engine, the logits of the adapter trained in memory; text too short for
// one window is a clear error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "adapters/lora_gguf.h"
#include "adapters/soft_prompt_file.h"
#include "core/error.h"
#include "engine/engine.h"
#include "engine/sequence_runner.h"
#include "train/finetune.h"
#include "util/test_util.h"

namespace tessera {
namespace {

constexpr const char* kShakespeare = "data/tinyshakespeare_input.txt";

struct Data {
  std::vector<std::vector<int32_t>> train, val;
};

Data shakespeare(int64_t ctx) {
  const std::string text = testing::read_file(testing::shared_path(kShakespeare));
  const Tokenizer& tok = *testing::stories260k().tok;
  return {train::text_windows(tok.encode(text.substr(0, 40000), true), ctx),
          train::text_windows(tok.encode(text.substr(text.size() - 8000), true), ctx)};
}

train::TrainOptions small_options() {
  train::TrainOptions o;
  o.batch = 4;
  o.ctx = 64;
  o.steps = 12;
  o.adamw.lr = 5e-3f;
  return o;
}

TEST(TrainFinetune, StepsLowerTheTrainingAndHeldOutLoss) {
  TESSERA_REQUIRE_SHARED(kShakespeare);
  const auto& base = testing::stories260k();
  const train::LoraTrainModel m(*base.lm.file);
  const train::TrainOptions o = small_options();
  const Data d = shakespeare(o.ctx);
  LoraAdapter a = train::init_lora(m.config(), o.rank, o.alpha, o.targets, o.seed);
  ThreadPool pool(2);
  const double before = train::mean_loss(m, d.val, nullptr, pool);
  EXPECT_NEAR(train::mean_loss(m, d.val, &a, pool), before, 1e-6) << "B starts at zero: the base model";
  std::vector<double> losses;
  train::train_lora(m, d.train, a, o, pool, [&](const train::TrainReport& r) { losses.push_back(r.loss); });
  ASSERT_EQ(losses.size(), 12u);
  EXPECT_LT(losses[9] + losses[10] + losses[11], losses[0] + losses[1] + losses[2]);
  const double after = train::mean_loss(m, d.val, &a, pool);
  EXPECT_LT(after, before - 0.2) << "held-out loss " << before << " -> " << after;
}

TEST(TrainFinetune, OneSeedOneAdapterOnAnyThreadCount) {
  TESSERA_REQUIRE_SHARED(kShakespeare);
  const train::LoraTrainModel m(*testing::stories260k().lm.file);
  train::TrainOptions o = small_options();
  o.steps = 3;
  const Data d = shakespeare(o.ctx);
  std::vector<LoraAdapter> got;
  for (int threads : {1, 2}) {
    LoraAdapter a = train::init_lora(m.config(), o.rank, o.alpha, o.targets, o.seed);
    ThreadPool pool(threads);
    train::train_lora(m, d.train, a, o, pool, nullptr);
    got.push_back(std::move(a));
  }
  for (size_t il = 0; il < got[0].layers.size(); ++il) {
    for (int t = 0; t < kNumLoraTargets; ++t) {
      EXPECT_EQ(got[0].layers[il][static_cast<size_t>(t)].a, got[1].layers[il][static_cast<size_t>(t)].a);
      EXPECT_EQ(got[0].layers[il][static_cast<size_t>(t)].b, got[1].layers[il][static_cast<size_t>(t)].b);
    }
  }
}

TEST(TrainFinetune, TheWrittenAdapterLoadsAndGivesTheTrainedLogits) {
  TESSERA_REQUIRE_SHARED(kShakespeare);
  const auto& base = testing::stories260k();
  const train::LoraTrainModel m(*base.lm.file);
  train::TrainOptions o = small_options();
  o.steps = 4;
  o.targets = (1u << static_cast<int>(LoraTarget::kQ)) | (1u << static_cast<int>(LoraTarget::kV)) |
              (1u << static_cast<int>(LoraTarget::kDown));
  const Data d = shakespeare(o.ctx);
  LoraAdapter a = train::init_lora(m.config(), 4, 8.0f, o.targets, 7);
  ThreadPool pool(2);
  train::train_lora(m, d.train, a, o, pool, nullptr);
  const std::string path = testing::temp_path("trained-lora.gguf");
  adapters::write_lora_gguf(a, m.config().arch, path);
  const auto loaded = adapters::load_lora(path, base.lm.model->config());
  EXPECT_EQ(loaded->alpha, 8.0f);
  EXPECT_EQ(loaded->get(0, LoraTarget::kK), nullptr);
  ASSERT_NE(loaded->get(2, LoraTarget::kDown), nullptr);
  const std::vector<int32_t>& tokens = d.val[0];
  const std::vector<float> want = m.logits(tokens, &a);
  engine::SequenceRunner r(*base.lm.model, {.kv_type = DType::kF32, .lora = loaded.get()}, pool);
  const std::span<const float> got = r.append(tokens, true);
  ASSERT_EQ(got.size(), want.size());
  double diff = 0, moved = 0;
  const std::vector<float> plain = m.logits(tokens, nullptr);
  for (size_t i = 0; i < want.size(); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(got[i]) - want[i]));
    moved = std::max(moved, std::fabs(static_cast<double>(want[i]) - plain[i]));
  }
  EXPECT_LT(diff, 1e-4);
  EXPECT_GT(moved, 0.05) << "four steps moved the logits";
}

// Prompt tuning: a few steps of 8 virtual rows lower the held-out loss; the
// .npy written loads as the soft prompt `serve` and `generate` take, and the
// engine's greedy tokens with it are the training model's.
TEST(TrainFinetune, PromptTuningLowersTheHeldOutLossAndServes) {
  TESSERA_REQUIRE_SHARED(kShakespeare);
  const auto& base = testing::stories260k();
  const train::LoraTrainModel m(*base.lm.file);
  train::TrainOptions o = small_options();
  o.adamw.lr = 0.05f;
  const Data d = shakespeare(o.ctx);
  std::vector<float> prompt = train::init_prompt(m, 8, 5);
  ThreadPool pool(2);
  const double before = train::mean_loss(m, d.val, nullptr, pool, &prompt);
  train::train_prompt(m, d.train, prompt, o, pool, nullptr);
  const double after = train::mean_loss(m, d.val, nullptr, pool, &prompt);
  EXPECT_LT(after, before - 0.1) << "held-out loss with the prompt " << before << " -> " << after;
  EXPECT_LT(after, train::mean_loss(m, d.val, nullptr, pool)) << "better than no prompt";

  const std::string path = testing::temp_path("trained-prompt.npy");
  train::write_soft_prompt_npy(prompt, m.config().n_embd, path);
  const auto sp = adapters::load_soft_prompt(path, base.lm.model->config());
  ASSERT_EQ(sp->n_virtual, 8);
  EXPECT_EQ(sp->embd, prompt);
  // Greedy through the engine with the soft prompt, and by the training
  // model's argmax one token at a time.
  const std::vector<int32_t> start = base.tok->encode("The king", true);
  engine::EngineConfig c;
  c.max_model_len = 256;
  c.kv_type = DType::kF32;
  engine::Engine e(*base.lm.model, base.tok.get(), c);
  e.add_request(start, testing::greedy(12), {}, engine::RequestAdapters(nullptr, sp));
  std::vector<int32_t> got;
  while (e.has_unfinished()) {
    for (const engine::RequestOutput& r : e.step()) got.insert(got.end(), r.new_tokens.begin(), r.new_tokens.end());
  }
  std::vector<int32_t> seq = start, want;
  const int64_t V = m.config().n_vocab;
  for (int i = 0; i < 12; ++i) {
    const std::vector<float> logits = m.logits(seq, nullptr, &prompt);
    const float* last = logits.data() + logits.size() - static_cast<size_t>(V);
    want.push_back(static_cast<int32_t>(std::max_element(last, last + V) - last));
    seq.push_back(want.back());
  }
  EXPECT_EQ(got, want);
}

TEST(TrainFinetune, TooLittleTextIsAClearError) {
  const std::vector<int32_t> few = {1, 2, 3};
  try {
    train::text_windows(few, 8);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fewer than one window"), std::string::npos) << e.what();
  }
  EXPECT_THROW(train::text_windows({}, 8), Error);
}

}  // namespace
}  // namespace tessera
