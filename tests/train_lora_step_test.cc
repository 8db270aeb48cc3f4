// A LoRA training step on stories260K with its real Shakespeare adapter
// (train/lora_step.h): the training forward gives the engine's logits, and
// the loss and every gradient of the adapter's A and B equal PyTorch's
// autograd in float64 (tests/reference/torch_lora_step.py, Debian's
// python3-torch, written from the model's definition) within 1e-4 of each
// tensor's largest gradient.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "adapters/lora_gguf.h"
#include "engine/sequence_runner.h"
#include "quant/quantize_model.h"
#include "util/test_util.h"
#include "train/finetune.h"
#include "train/lora_step.h"

namespace tessera {
namespace {

constexpr const char* kAdapter = "models/stories260K/lora-shakespeare.gguf";

std::vector<int32_t> sample_tokens() {
  return testing::stories260k().tok->encode("Once upon a time, there was a king who loved his daughter. He", true);
}

TEST(TrainLoraStep, ForwardGivesTheEnginesLogits) {
  TESSERA_REQUIRE_SHARED(kAdapter);
  const auto& base = testing::stories260k();
  const train::LoraTrainModel m(*base.lm.file);
  const auto adapter = adapters::load_lora(testing::shared_path(kAdapter), base.lm.model->config());
  const std::vector<int32_t> tokens = sample_tokens();
  ThreadPool pool(1);
  for (const LoraAdapter* a : {static_cast<const LoraAdapter*>(nullptr), adapter.get()}) {
    engine::SequenceRunner r(*base.lm.model, {.kv_type = DType::kF32, .lora = a}, pool);
    const std::span<const float> want = r.append(tokens, true);
    const std::vector<float> got = m.logits(tokens, a);
    ASSERT_EQ(got.size(), want.size());
    double diff = 0;
    for (size_t i = 0; i < got.size(); ++i) diff = std::max(diff, std::fabs(static_cast<double>(got[i]) - want[i]));
    EXPECT_LT(diff, 1e-4) << (a ? "with the adapter" : "base");
  }
}

// The loss and gradients of a step over the base model in `path` equal
// PyTorch's on the same file (dequantized exactly by gguf_ref.py).
void expect_step_equals_pytorch(const std::string& path, const gguf::File& file, const std::string& label) {
  const auto& base = testing::stories260k();
  const train::LoraTrainModel m(file);
  const std::string adapter_path = testing::shared_path(kAdapter);
  const auto adapter = adapters::load_lora(adapter_path, base.lm.model->config());
  const std::vector<int32_t> tokens = sample_tokens();
  LoraAdapter grads;
  const double loss = m.loss_and_grads(tokens, *adapter, &grads);

  std::string list;
  for (int32_t t : tokens) list += (list.empty() ? "" : ",") + std::to_string(t);
  const std::string out = testing::temp_path("torch_lora_step.bin");
  const std::string cmd = std::string("/usr/bin/python3 ") + TESSERA_SOURCE_DIR + "/tests/reference/torch_lora_step.py " +
                          path + " " + adapter_path + " " + list + " " + out;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const std::string bytes = testing::read_file(out);
  std::vector<double> ref(bytes.size() / 8);
  std::memcpy(ref.data(), bytes.data(), ref.size() * 8);
  ASSERT_GE(ref.size(), 1u);
  EXPECT_NEAR(loss, ref[0], 1e-4 * ref[0]) << label;
  // The loader folds alpha / rank into A (A' = s A): dL/dA' = dL/dA / s.
  const double s = adapter->alpha / 8.0;
  size_t at = 1, tensors = 0;
  auto compare = [&](const std::vector<float>& got, double factor, const std::string& what) {
    ASSERT_LE(at + got.size(), ref.size()) << what;
    double big = 0;
    for (size_t i = 0; i < got.size(); ++i) big = std::max(big, std::fabs(ref[at + i]));
    ASSERT_GT(big, 0.0) << what << ": PyTorch's gradient is zero";
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_NEAR(got[i] * factor, ref[at + i], 1e-4 * big) << what << " element " << i;
    }
    at += got.size();
    ++tensors;
  };
  for (size_t il = 0; il < adapter->layers.size(); ++il) {
    for (int t = 0; t < kNumLoraTargets; ++t) {
      if (adapter->layers[il][static_cast<size_t>(t)].rank == 0) continue;
      const LoraPair& g = grads.layers[il][static_cast<size_t>(t)];
      const std::string what = label + " layer " + std::to_string(il) + " target " + std::to_string(t);
      compare(g.a, s, what + " A");
      compare(g.b, 1.0, what + " B");
    }
  }
  EXPECT_EQ(at, ref.size());
  EXPECT_EQ(tensors, 2u * 5 * 7);
  std::printf("%s: loss %.6f (PyTorch %.6f), %zu gradient tensors compared\n", label.c_str(), loss, ref[0], tensors);
}

bool have_torch() { return std::system("/usr/bin/python3 -c 'import torch' 2>/dev/null") == 0; }

TEST(TrainLoraStep, LossAndGradientsEqualPyTorchs) {
  TESSERA_REQUIRE_SHARED(kAdapter);
  ASSERT_TRUE(have_torch()) << "no python3-torch under /usr/bin/python3 (scripts/setup installs it)";
  expect_step_equals_pytorch(testing::stories260k_path(), *testing::stories260k().lm.file, "F32 base");
}

// QLoRA: the same over a Q4_0 base (ffn_down, 172 wide, kept F32 as
// llama.cpp's quantizer would): PyTorch trains on the dequantized weights.
TEST(TrainLoraStep, QLoraOverAQ4_0BaseEqualsPyTorchs) {
  TESSERA_REQUIRE_SHARED(kAdapter);
  ASSERT_TRUE(have_torch()) << "no python3-torch under /usr/bin/python3 (scripts/setup installs it)";
  const auto& base = testing::stories260k();
  quant::QuantizeOptions q;
  q.type = DType::kQ4_0;
  for (int64_t l = 0; l < base.lm.model->config().n_layer; ++l) {
    q.keep.emplace_back("blk." + std::to_string(l) + ".ffn_down.weight", DType::kF32);
  }
  const std::string path = testing::temp_path("qlora-base-q4_0.gguf");
  ThreadPool pool(1);
  quant::quantize_model(*base.lm.file, path, q, nullptr, pool);
  const LoadedModel qm = load_model(path);
  expect_step_equals_pytorch(path, *qm.file, "Q4_0 base");
}

// Prompt tuning's gradient: the loss after 4 soft-prompt rows and its
// gradient with respect to those rows equal PyTorch's (the rows written by
// train::write_soft_prompt_npy, read back by numpy).
TEST(TrainLoraStep, SoftPromptGradientEqualsPyTorchs) {
  ASSERT_TRUE(have_torch()) << "no python3-torch under /usr/bin/python3 (scripts/setup installs it)";
  const auto& base = testing::stories260k();
  const train::LoraTrainModel m(*base.lm.file);
  std::vector<float> prompt = train::init_prompt(m, 4, 3);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] += 0.01f * static_cast<float>(i % 7) - 0.03f;
  const std::string npy = testing::temp_path("prompt.npy");
  train::write_soft_prompt_npy(prompt, m.config().n_embd, npy);
  const std::vector<int32_t> tokens = sample_tokens();
  std::vector<float> grad;
  const double loss = m.prompt_loss_and_grads(tokens, prompt, &grad);
  std::string list;
  for (int32_t t : tokens) list += (list.empty() ? "" : ",") + std::to_string(t);
  const std::string out = testing::temp_path("torch_prompt_step.bin");
  const std::string cmd = std::string("/usr/bin/python3 ") + TESSERA_SOURCE_DIR + "/tests/reference/torch_lora_step.py " +
                          testing::stories260k_path() + " - " + list + " " + out + " " + npy;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const std::string bytes = testing::read_file(out);
  std::vector<double> ref(bytes.size() / 8);
  std::memcpy(ref.data(), bytes.data(), ref.size() * 8);
  ASSERT_EQ(ref.size(), 1 + prompt.size());
  EXPECT_NEAR(loss, ref[0], 1e-4 * ref[0]);
  double big = 0;
  for (size_t i = 1; i < ref.size(); ++i) big = std::max(big, std::fabs(ref[i]));
  ASSERT_GT(big, 0.0);
  for (size_t i = 0; i < grad.size(); ++i) ASSERT_NEAR(grad[i], ref[1 + i], 1e-4 * big) << "element " << i;
}

}  // namespace
}  // namespace tessera
