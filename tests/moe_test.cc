// Mixtures of experts (Mixtral, Qwen2-MoE, Qwen3-MoE): expert-grouped
// execution reads each chosen expert's weights once per step, the engine's
// continuous batching gives each request the tokens it gets alone, and bad
// MoE files get one-line errors. Logits against the independent numpy
// reference: tests/scripts/numpy_reference.sh.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <numeric>

#include "adapters/lora_gguf.h"
#include "core/error.h"
#include "engine/engine.h"
#include "engine/sequence_runner.h"
#include "format/gguf.h"
#include "format/gguf_writer.h"
#include "model/model.h"
#include "model/synthetic.h"
#include "server/metrics.h"
#include "util/test_util.h"

#include <nlohmann/json.hpp>

namespace tessera::engine {
namespace {

std::string moe_model(const std::string& arch, int64_t n_expert, int64_t n_used, const std::string& name) {
  SyntheticModelSpec s = preset_spec("tiny");
  s.arch = arch;
  s.n_vocab = 256;
  s.n_expert = n_expert;
  s.n_expert_used = n_used;
  if (arch != "mixtral") s.n_ff_exp = 64;
  if (arch == "gpt-oss") s.sliding_window = 8;  // shorter than the prompts: the even layers' window cuts
  s.seed = 11;
  const std::string path = testing::temp_path(name + ".gguf");
  write_synthetic_model(s, path, 1);
  return path;
}

// Per layer: the sum over experts of a [n_layer * n_expert] counter.
std::vector<int64_t> per_layer(const std::vector<int64_t>& v, int64_t n_expert) {
  std::vector<int64_t> out(v.size() / static_cast<size_t>(n_expert), 0);
  for (size_t i = 0; i < v.size(); ++i) out[i / static_cast<size_t>(n_expert)] += v[i];
  return out;
}

TEST(Moe, EachChosenExpertIsReadOncePerStep) {
  const LoadedModel lm = load_model(moe_model("mixtral", 8, 2, "moe-grouped"));
  ASSERT_TRUE(lm.model->config().moe());
  ThreadPool pool(2);
  SequenceRunner r(*lm.model, {.n_ctx = 256}, pool);
  std::vector<int32_t> prompt(48);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>(3 + (i * 37) % 250);
  r.append(prompt);  // one forward pass over 48 tokens
  const ForwardState& s = r.state();
  const int64_t NE = 8, L = lm.model->config().n_layer;
  ASSERT_EQ(static_cast<int64_t>(s.expert_passes.size()), L * NE);
  for (int64_t il = 0; il < L; ++il) {
    int64_t tokens = 0, used = 0;
    for (int64_t e = 0; e < NE; ++e) {
      // One pass over an expert's weights in the step, whatever its tokens.
      EXPECT_EQ(s.expert_passes[il * NE + e], s.expert_tokens[il * NE + e] > 0 ? 1 : 0) << "layer " << il;
      tokens += s.expert_tokens[il * NE + e];
      used += s.expert_passes[il * NE + e];
    }
    EXPECT_EQ(tokens, 48 * 2) << "every token goes to 2 experts";
    EXPECT_GT(used, 2) << "48 tokens all routed to the same 2 experts: the router is degenerate";
  }
  // A decode step: one token, its 2 experts read once each.
  const std::vector<int64_t> passes_before = per_layer(s.expert_passes, NE);
  const int32_t next = 42;
  r.append(std::span(&next, 1));
  const std::vector<int64_t> passes_after = per_layer(r.state().expert_passes, NE);
  for (int64_t il = 0; il < L; ++il) EXPECT_EQ(passes_after[il] - passes_before[il], 2) << "layer " << il;
}

// The per-token baseline (TESSERA_MOE_PER_TOKEN=1) computes the same sums
// in the same order, so the two executions give the same bits; the grouped
// one reads fewer expert weights.
TEST(Moe, GroupedAndPerTokenExecutionGiveTheSameLogits) {
  for (const char* arch : {"qwen2moe", "gpt-oss"}) {  // gpt-oss: the expert biases in both
  SCOPED_TRACE(arch);
  const std::string path = moe_model(arch, 8, 2, std::string("moe-modes-") + arch);
  std::vector<int32_t> prompt(40);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>(5 + (i * 29) % 240);
  std::vector<float> logits[2];
  int64_t passes[2] = {0, 0};
  for (int per_token : {0, 1}) {
    setenv("TESSERA_MOE_PER_TOKEN", per_token ? "1" : "0", 1);
    const LoadedModel lm = load_model(path);
    ThreadPool pool(2);
    SequenceRunner r(*lm.model, {.n_ctx = 128}, pool);
    const std::span<const float> l = r.append(prompt, /*all_logits=*/true);
    logits[per_token].assign(l.begin(), l.end());
    passes[per_token] = std::accumulate(r.state().expert_passes.begin(), r.state().expert_passes.end(), int64_t{0});
  }
  unsetenv("TESSERA_MOE_PER_TOKEN");
  EXPECT_EQ(logits[0], logits[1]);
  EXPECT_EQ(passes[1], 40 * 2 * 2) << "per token: k passes per token and layer";
  EXPECT_LE(passes[0], 8 * 2) << "grouped: at most one pass per expert and layer";
  }
}

TEST(Moe, BytesPerTokenCountTheChosenExpertsOnly) {
  const LoadedModel k1 = load_model(moe_model("qwen3moe", 8, 1, "moe-k1"));
  const LoadedModel k4 = load_model(moe_model("qwen3moe", 8, 4, "moe-k4"));
  const int64_t E = 64, F = 64, L = 2;
  const size_t expert_bytes = 3 * static_cast<size_t>(E * F) * sizeof(float);  // gate, up, down in F32
  EXPECT_EQ(k4.model->bytes_per_token() - k1.model->bytes_per_token(), 3 * expert_bytes * L);
  EXPECT_EQ(k4.model->matmul_work().per_token - k1.model->matmul_work().per_token, 3 * 3 * E * F * L);
}

using testing::greedy;

// Greedy tokens of a prompt run alone, without the scheduler.
std::vector<int32_t> greedy_alone(const Model& model, const std::vector<int32_t>& prompt, int n) {
  ThreadPool pool(1);
  SequenceRunner ref(model, {.n_ctx = 256}, pool);
  std::span<const float> logits = ref.append(prompt);
  std::vector<int32_t> seq;
  for (int i = 0; i < n; ++i) {
    seq.push_back(static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin()));
    logits = ref.append(std::span(&seq.back(), 1));
  }
  return seq;
}

// Continuous batching mixes requests' tokens in one step, so experts see
// rows of several requests at once: each request still gets the tokens it
// gets alone.
TEST(Moe, BatchedRequestsGetTheTokensTheyGetAlone) {
  for (const char* arch : {"mixtral", "qwen2moe", "qwen3moe", "gpt-oss"}) {
    const LoadedModel lm = load_model(moe_model(arch, 8, 2, std::string("moe-engine-") + arch));
    std::vector<std::vector<int32_t>> prompts;
    for (int i = 0; i < 5; ++i) {
      std::vector<int32_t> p;
      for (int j = 0; j < 9 + 7 * i; ++j) p.push_back(3 + (i * 53 + j * 31) % 250);
      prompts.push_back(p);
    }
    EngineConfig c;
    c.max_model_len = 256;
    c.threads = 2;
    c.kv_type = DType::kF32;
    c.max_num_batched_tokens = 24;  // chunked prefill beside decodes
    Engine e(*lm.model, nullptr, c);
    std::map<RequestId, std::vector<int32_t>> want;
    for (const auto& p : prompts) want[e.add_request(p, greedy(20))] = p;
    std::map<RequestId, std::vector<int32_t>> got;
    while (e.has_unfinished()) {
      for (const RequestOutput& o : e.step()) got[o.id].insert(got[o.id].end(), o.new_tokens.begin(), o.new_tokens.end());
    }
    // Expert load in the engine's stats and in /metrics: every layer saw
    // the same tokens, k experts each.
    const EngineStats st = e.stats();
    ASSERT_EQ(st.expert_tokens_total.size(), static_cast<size_t>(lm.model->config().n_layer * 8)) << arch;
    const std::vector<int64_t> load = per_layer(st.expert_tokens_total, 8);
    EXPECT_GT(load[0], 0);
    EXPECT_EQ(load[0] % 2, 0);
    for (int64_t l : load) EXPECT_EQ(l, load[0]) << arch;
    const std::string metrics = server::Metrics().render(&st, 0, nullptr);
    EXPECT_NE(metrics.find("tessera_moe_expert_tokens_total{layer=\"1\",expert=\"7\"} "), std::string::npos);
    for (const auto& [id, p] : want) EXPECT_EQ(got[id], greedy_alone(*lm.model, p, 20)) << arch << " request " << id;
  }
}

// Prefix caching and speculative decoding (n-gram drafts, every proposal
// verified) on a mixture: requests sharing a prefix, with repetition to
// draft from, get the tokens they get alone; drafts were verified and the
// prefix was served from the cache.
TEST(Moe, PrefixCachingAndSpeculativeDecodingGiveTheTokensOfARunAlone) {
  const LoadedModel lm = load_model(moe_model("qwen2moe", 8, 2, "moe-spec"));
  std::vector<int32_t> prefix;
  for (int i = 0; i < 40; ++i) prefix.push_back(3 + (i % 7) * 31);  // repeats: n-gram drafts match
  EngineConfig c;
  c.max_model_len = 256;
  c.threads = 2;
  c.kv_type = DType::kF32;
  c.block_size = 8;
  c.enable_prefix_caching = true;
  c.spec_method = spec::Method::kNgram;
  c.spec_adaptive = false;
  Engine e(*lm.model, nullptr, c);
  for (int r = 0; r < 3; ++r) {  // one after another, so later ones hit the cache
    std::vector<int32_t> p = prefix;
    p.push_back(100 + r);
    const RequestId id = e.add_request(p, greedy(24));
    std::vector<int32_t> got;
    while (e.has_unfinished()) {
      for (const RequestOutput& o : e.step()) {
        if (o.id == id) got.insert(got.end(), o.new_tokens.begin(), o.new_tokens.end());
      }
    }
    EXPECT_EQ(got, greedy_alone(*lm.model, p, 24)) << "request " << r;
  }
  EXPECT_GT(e.stats().prefix_hit_tokens_total, 0);
  EXPECT_GT(e.stats().spec_drafted_tokens_total, 0);
}

// A llama.cpp-style LoRA adapter GGUF with one rank-4 pair on blk.0.<target>.
std::string adapter(const std::string& target, int64_t in, int64_t out) {
  gguf::Writer w;
  w.set_string("general.type", "adapter");
  w.set_string("adapter.type", "lora");
  w.set_string("general.architecture", "llama");
  w.set_f32("adapter.lora.alpha", 4.0f);
  auto fill = [](uint8_t* o, size_t n) {
    for (size_t i = 0; i + 4 <= n; i += 4) {
      const float v = 0.05f * static_cast<float>((i / 4) % 7) - 0.15f;
      std::memcpy(o + i, &v, 4);
    }
  };
  w.add_tensor("blk.0." + target + ".weight.lora_a", DType::kF32, {in, 4}, fill);
  w.add_tensor("blk.0." + target + ".weight.lora_b", DType::kF32, {4, out}, fill);
  const std::string path = testing::temp_path("moe-lora-" + target + ".gguf");
  w.write(path);
  return path;
}

// Adapters on the attention of a mixture work; on its FFN (which a mixture
// does not have as such) they are refused by name, never silently ignored.
TEST(Moe, LoraOnAttentionWorksOnExpertsIsRefused) {
  const LoadedModel lm = load_model(moe_model("mixtral", 8, 2, "moe-lora-base"));
  const ModelConfig& c = lm.model->config();
  const auto q = adapters::load_lora(adapter("attn_q", c.n_embd, c.q_dim()), c);
  ThreadPool pool(1);
  const std::vector<int32_t> prompt{5, 9, 77, 120, 3};
  SequenceRunner plain(*lm.model, {.n_ctx = 64}, pool);
  SequenceRunner adapted(*lm.model, {.n_ctx = 64, .lora = q.get()}, pool);
  const std::span<const float> a = plain.append(prompt), b = adapted.append(prompt);
  EXPECT_FALSE(std::equal(a.begin(), a.end(), b.begin())) << "the adapter on attn_q changed nothing";
  try {
    adapters::load_lora(adapter("ffn_gate", c.n_embd, c.n_ff), c);
    ADD_FAILURE() << "an adapter on ffn_gate of a mixture loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string_view(e.what()).find("adapts 'ffn_gate', which this mixture of experts does not have"),
              std::string_view::npos) << e.what();
  }
}

// ---- bad files -------------------------------------------------------------

// The mixtral file with one key set or one tensor reshaped (or truncated).
std::string edited(const std::string& name, const std::string& key, uint32_t value, const std::string& tensor = "",
                   std::vector<int64_t> ne = {}) {
  const gguf::File src = gguf::File::open(moe_model("mixtral", 8, 2, "moe-base"));
  gguf::Writer w;
  for (const auto& [k, v] : src.metadata()) w.set_value(k, v);
  if (!key.empty()) {
    gguf::Value v;
    v.type = gguf::ValueType::kU32;
    v.u = value;
    w.set_value(key, v);
  }
  for (const gguf::TensorInfo& t : src.tensors()) {
    std::vector<int64_t> shape(t.ne, t.ne + t.n_dims);
    if (t.name == tensor) shape = ne;
    w.add_tensor(t.name, t.type, shape, [&t](uint8_t* out, size_t n) { std::memcpy(out, t.data, std::min(n, t.n_bytes)); });
  }
  const std::string path = testing::temp_path(name + ".gguf");
  w.write(path);
  return path;
}

// A copy of a file without one metadata key or tensor.
std::string without(const std::string& from, const std::string& name, const std::string& out) {
  const gguf::File src = gguf::File::open(from);
  gguf::Writer w;
  for (const auto& [k, v] : src.metadata()) {
    if (k != name) w.set_value(k, v);
  }
  for (const gguf::TensorInfo& t : src.tensors()) {
    if (t.name == name) continue;
    w.add_tensor(t.name, t.type, std::vector<int64_t>(t.ne, t.ne + t.n_dims),
                 [&t](uint8_t* out, size_t n) { std::memcpy(out, t.data, n); });
  }
  const std::string path = testing::temp_path(out + ".gguf");
  w.write(path);
  return path;
}

using testing::expect_load_error;

TEST(Moe, BadFilesGetOneLineErrors) {
  expect_load_error(edited("moe-count0", "llama.expert_count", 0), "'llama.expert_count' = 0 is out of range");
  expect_load_error(edited("moe-used9", "llama.expert_used_count", 9),
                    "'llama.expert_used_count' = 9 is out of range (1..8)");
  expect_load_error(edited("moe-used0", "llama.expert_used_count", 0),
                    "'llama.expert_used_count' = 0 is out of range (1..8)");
  expect_load_error(edited("moe-router", "", 0, "blk.0.ffn_gate_inp.weight", {64, 7}),
                    "tensor 'blk.0.ffn_gate_inp.weight' has shape [64, 7], expected [64, 8]");
  expect_load_error(edited("moe-experts7", "", 0, "blk.1.ffn_up_exps.weight", {64, 128, 7}),
                    "tensor 'blk.1.ffn_up_exps.weight' has shape [64, 128, 7], expected [64, 128, 8]");
  expect_load_error(edited("moe-experts2d", "", 0, "blk.0.ffn_down_exps.weight", {128, 512}),
                    "tensor 'blk.0.ffn_down_exps.weight' has shape [128, 512], expected [128, 64, 8]");
  // More experts than the tensors hold: the first stacked tensor is named.
  expect_load_error(edited("moe-count9", "llama.expert_count", 9),
                    "tensor 'blk.0.ffn_gate_inp.weight' has shape [64, 8], expected [64, 9]");
  // A file cut inside the experts' data.
  const std::string whole = moe_model("mixtral", 8, 2, "moe-base");
  const std::string cut = testing::temp_path("moe-truncated.gguf");
  std::filesystem::copy_file(whole, cut, std::filesystem::copy_options::overwrite_existing);
  std::filesystem::resize_file(cut, std::filesystem::file_size(whole) - 4096);
  expect_load_error(cut, "extends past the end of the file");
  // Qwen MoE architectures are mixtures or nothing.
  {
    const gguf::File src = gguf::File::open(moe_model("qwen3moe", 8, 2, "moe-q3"));
    gguf::Writer w;
    for (const auto& [k, v] : src.metadata()) {
      if (k != "qwen3moe.expert_count") w.set_value(k, v);
    }
    for (const gguf::TensorInfo& t : src.tensors()) {
      w.add_tensor(t.name, t.type, std::vector<int64_t>(t.ne, t.ne + t.n_dims),
                   [&t](uint8_t* out, size_t n) { std::memcpy(out, t.data, n); });
    }
    const std::string path = testing::temp_path("moe-q3-nocount.gguf");
    w.write(path);
    expect_load_error(path, "'qwen3moe.expert_count' is missing (qwen3moe is a mixture of experts)");
  }
  // gpt-oss without one of its own tensors or its window.
  const std::string oss = moe_model("gpt-oss", 8, 2, "moe-oss");
  expect_load_error(without(oss, "blk.1.attn_sinks.weight", "moe-oss-nosinks"), "missing tensor 'blk.1.attn_sinks.weight'");
  expect_load_error(without(oss, "blk.0.ffn_down_exps.bias", "moe-oss-nobias"), "missing tensor 'blk.0.ffn_down_exps.bias'");
  expect_load_error(without(oss, "gpt-oss.attention.sliding_window", "moe-oss-nowindow"),
                    "gpt-oss needs 'gpt-oss.attention.sliding_window' > 0");
}

// The trained mixture (models/stories-moe): llama.cpp's greedy tokens
// (tests/reference/llamacpp_stories_moe.json). Its F16 matrices are
// multiplied by llama.cpp with activations rounded to F16 (relative 2^-11
// per product), so, as for the F16 files of tests/scripts/llamacpp_greedy.sh,
// the tokens are checked and the logit differences only reported.
TEST(Moe, TrainedMixtureFollowsLlamaCppGreedy) {
  const nlohmann::json ref =
      nlohmann::json::parse(testing::read_file(std::string(TESSERA_SOURCE_DIR) + "/tests/reference/llamacpp_stories_moe.json"));
  const LoadedModel lm = load_model(std::string(TESSERA_SOURCE_DIR) + "/models/stories-moe/stories-moe-8x.gguf");
  const std::vector<int32_t> prompt = ref["prompt"].get<std::vector<int32_t>>();
  const std::vector<int32_t> want = ref["tokens"].get<std::vector<int32_t>>();
  ThreadPool pool(2);
  SequenceRunner r(*lm.model, {.n_ctx = 256, .kv_type = DType::kF32}, pool);
  std::span<const float> logits = r.append(prompt);
  double worst = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    const int32_t top = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    ASSERT_EQ(top, want[i]) << "token " << i;
    for (const auto& pair : ref["logit_diffs"][i]) {
      const double d = logits[pair[0].get<int32_t>()] - logits[top];
      worst = std::max(worst, std::abs(d - pair[1].get<double>()));
    }
    logits = r.append(std::span(&want[i], 1));
  }
  RecordProperty("worst_logit_diff_vs_llamacpp", std::to_string(worst));
}

}  // namespace
}  // namespace tessera::engine
