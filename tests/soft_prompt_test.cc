// Soft prompts (adapters/soft_prompt.h, adapters/soft_prompt_file.h) on the
// real stories260K model. The independent reference: a soft prompt whose
// rows are the model's own embeddings of some tokens must give exactly what
// those tokens give as an ordinary prompt prefix (same input rows, so the
// same logits bit for bit). Then mixed batches, prefix-cache keying, the
// file formats and their errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <set>

#include "adapters/soft_prompt_file.h"
#include "core/error.h"
#include "core/fp16.h"
#include "engine/engine.h"
#include "kernels/quant.h"
#include "format/gguf.h"
#include "format/gguf_writer.h"
#include "model/synthetic.h"
#include "util/test_util.h"

namespace tessera {
namespace {

// The model's input embeddings of `ids` (its table's rows), as a soft prompt.
std::shared_ptr<const SoftPrompt> embeddings_of(const std::vector<int32_t>& ids,
                                                const LoadedModel& lm = testing::stories260k().lm) {
  const gguf::TensorInfo& t = lm.file->tensor("token_embd.weight");
  auto sp = std::make_shared<SoftPrompt>();
  sp->name = "embeddings";
  sp->n_embd = t.ne[0];
  sp->n_virtual = static_cast<int64_t>(ids.size());
  sp->embd.resize(ids.size() * static_cast<size_t>(sp->n_embd));
  const size_t rb = row_bytes(t.type, sp->n_embd);
  for (size_t i = 0; i < ids.size(); ++i) {
    kernels::dequantize_row(t.type, t.data + static_cast<size_t>(ids[i]) * rb, sp->embd.data() + i * sp->n_embd,
                            sp->n_embd);
  }
  return sp;
}

std::shared_ptr<const SoftPrompt> random_soft_prompt(int64_t n_virtual, uint32_t seed) {
  const ModelConfig& c = testing::stories260k().lm.model->config();
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  auto sp = std::make_shared<SoftPrompt>();
  sp->name = "random-" + std::to_string(seed);
  sp->n_embd = c.n_embd;
  sp->n_virtual = n_virtual;
  sp->embd.resize(static_cast<size_t>(n_virtual * c.n_embd));
  for (float& v : sp->embd) v = n(rng);
  return sp;
}

engine::EngineConfig config() {
  engine::EngineConfig c;
  c.max_model_len = 512;
  c.kv_type = DType::kF32;
  c.threads = 2;
  return c;
}

using testing::greedy;

struct RunResult {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  int64_t prompt_tokens = 0;
};

using Job = std::tuple<std::vector<int32_t>, std::shared_ptr<const LoraAdapter>, std::shared_ptr<const SoftPrompt>>;

// Every job in one engine; checks nothing leaks.
std::vector<RunResult> run(const std::vector<Job>& jobs, int32_t n = 32, const Model* model = nullptr,
                           bool logprobs = false) {
  const testing::LoadedWithTokenizer& base = testing::stories260k();
  engine::Engine e(model != nullptr ? *model : *base.lm.model, model != nullptr ? nullptr : base.tok.get(), config());
  engine::SamplingParams p = greedy(n);
  p.logprobs = logprobs;
  std::vector<engine::RequestId> ids;
  for (const auto& [prompt, lora, sp] : jobs) ids.push_back(e.add_request(prompt, p, {}, {lora, sp}));
  std::map<engine::RequestId, RunResult> out;
  while (e.has_unfinished()) {
    for (const engine::RequestOutput& o : e.step()) {
      RunResult& r = out[o.id];
      r.tokens.insert(r.tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
      r.logprobs.insert(r.logprobs.end(), o.logprobs.begin(), o.logprobs.end());
      r.prompt_tokens = o.num_prompt_tokens;
    }
  }
  EXPECT_EQ(e.stats().kv_blocks_used, 0);
  std::vector<RunResult> r;
  for (engine::RequestId id : ids) r.push_back(out[id]);
  return r;
}

TEST(SoftPrompt, EmbeddingsOfTokensEqualThoseTokensAsAPrefix) {
  const testing::LoadedWithTokenizer& base = testing::stories260k();
  const std::vector<int32_t> prefix = base.tok->encode("Once upon a time, there was a dragon", true, true);
  const std::vector<int32_t> rest = base.tok->encode(" who lived in a cave.", false, false);
  std::vector<int32_t> whole = prefix;
  whole.insert(whole.end(), rest.begin(), rest.end());
  const auto sp = embeddings_of(prefix);
  const std::vector<RunResult> r = run({{whole, nullptr, nullptr}, {rest, nullptr, sp}});
  ASSERT_EQ(r[0].tokens.size(), 32u);
  EXPECT_EQ(r[1].tokens, r[0].tokens);
  EXPECT_EQ(r[1].logprobs, r[0].logprobs) << "the same input rows give the same logits, bit for bit";
  EXPECT_EQ(r[1].prompt_tokens, r[0].prompt_tokens) << "virtual tokens occupy context and are counted";
  // A soft prompt changes what follows, through its rows (not the
  // placeholder ids its virtual tokens carry).
  EXPECT_NE(run({{rest, nullptr, nullptr}})[0].tokens, r[0].tokens);
  std::vector<int32_t> placeholders(prefix.size(), kSoftPromptPlaceholder);
  placeholders.insert(placeholders.end(), rest.begin(), rest.end());
  EXPECT_NE(run({{placeholders, nullptr, nullptr}})[0].tokens, r[0].tokens);
}

// Gemma multiplies its input embeddings by sqrt(n_embd). Hugging Face does
// it to inputs_embeds (Gemma2Model.forward: hidden_states = inputs_embeds *
// normalizer), where prompt tuning's virtual tokens are too; so a soft prompt
// of table rows must again equal those tokens, which holds only if its rows
// are scaled as the tokens' are.
TEST(SoftPrompt, GemmaScalesSoftPromptRowsAsItsTokenRows) {
  for (const char* arch : {"gemma2", "gemma3"}) {
    SyntheticModelSpec spec = preset_spec("tiny");
    spec.arch = arch;
    spec.type = DType::kF32;
    spec.n_vocab = 96;
    spec.seed = 5;
    const std::string path = testing::temp_path(std::string(arch) + "-soft.gguf");
    write_synthetic_model(spec, path, 1);
    const LoadedModel lm = load_model(path);
    const std::vector<int32_t> prefix = {1, 17, 33, 40, 5, 9, 77, 60};
    const std::vector<int32_t> rest = {12, 50, 3, 8, 91};
    std::vector<int32_t> whole = prefix;
    whole.insert(whole.end(), rest.begin(), rest.end());
    const std::vector<RunResult> r =
        run({{whole, nullptr, nullptr}, {rest, nullptr, embeddings_of(prefix, lm)}}, 16, lm.model.get(), true);
    ASSERT_EQ(r[0].logprobs.size(), 16u) << arch;
    EXPECT_EQ(r[1].tokens, r[0].tokens) << arch;
    EXPECT_EQ(r[1].logprobs, r[0].logprobs) << arch << ": the same input rows give the same logits, bit for bit";
  }
}

TEST(SoftPrompt, MixedBatchGivesEachRequestItsOwnTokens) {
  // Three soft prompts (and none), two prompts, with and without a LoRA
  // adapter, in one engine: each request's tokens equal running it alone.
  // The same prompt under different soft prompts would share prefix-cache
  // blocks (same placeholder ids) if the soft prompt did not key the cache.
  const testing::LoadedWithTokenizer& base = testing::stories260k();
  const ModelConfig& cfg = base.lm.model->config();
  auto lora = std::make_shared<LoraAdapter>();
  lora->layers.resize(static_cast<size_t>(cfg.n_layer));
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 0.3f);
  for (auto& layer : lora->layers) {
    LoraPair& p = layer[static_cast<size_t>(LoraTarget::kV)];
    p.rank = 4;
    p.in = cfg.n_embd;
    p.out = cfg.kv_dim();
    p.scale = 1.0f;
    p.a.resize(static_cast<size_t>(p.rank * p.in));
    p.b.resize(static_cast<size_t>(p.rank * p.out));
    for (float& v : p.a) v = nd(rng);
    for (float& v : p.b) v = nd(rng);
  }
  const std::vector<std::shared_ptr<const SoftPrompt>> sps = {nullptr, random_soft_prompt(3, 1),
                                                              random_soft_prompt(8, 2), random_soft_prompt(21, 3)};
  const std::vector<std::vector<int32_t>> prompts = {base.tok->encode("Tom had a red ball.", true, true),
                                                     base.tok->encode("Once upon a time", true, true)};
  std::vector<Job> jobs;
  for (const auto& prompt : prompts) {
    for (const auto& sp : sps) {
      jobs.emplace_back(prompt, nullptr, sp);
      jobs.emplace_back(prompt, lora, sp);
    }
  }
  const std::vector<RunResult> together = run(jobs);
  std::set<std::vector<int32_t>> distinct;
  for (size_t i = 0; i < jobs.size(); ++i) {
    EXPECT_EQ(together[i].tokens, run({jobs[i]})[0].tokens) << "request " << i;
    distinct.insert(together[i].tokens);
    const auto& sp = std::get<2>(jobs[i]);
    EXPECT_EQ(together[i].prompt_tokens,
              static_cast<int64_t>(std::get<0>(jobs[i]).size()) + (sp ? sp->n_virtual : 0));
  }
  EXPECT_GE(distinct.size(), jobs.size() - 2) << "soft prompts and the adapter must change the outputs";
}

TEST(SoftPrompt, ThePrefixCacheServesOnlyTheSameSoftPrompt) {
  const testing::LoadedWithTokenizer& base = testing::stories260k();
  engine::EngineConfig c = config();
  engine::Engine e(*base.lm.model, base.tok.get(), c);
  const std::vector<int32_t> prompt = base.tok->encode(
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her dog.",
      true, true);
  auto one = [&](const std::shared_ptr<const SoftPrompt>& sp) {
    e.add_request(prompt, greedy(16), {}, {nullptr, sp});
    std::vector<int32_t> out;
    while (e.has_unfinished()) {
      for (const engine::RequestOutput& o : e.step()) out.insert(out.end(), o.new_tokens.begin(), o.new_tokens.end());
    }
    return out;
  };
  const auto a = random_soft_prompt(20, 11), b = random_soft_prompt(20, 12);
  const std::vector<int32_t> first = one(a);
  const int64_t hits0 = e.stats().prefix_hit_tokens_total;
  EXPECT_EQ(one(b), run({{prompt, nullptr, b}}, 16)[0].tokens);
  EXPECT_EQ(e.stats().prefix_hit_tokens_total, hits0) << "another soft prompt's blocks were served";
  EXPECT_EQ(one(a), first);
  EXPECT_GT(e.stats().prefix_hit_tokens_total, hits0) << "the same soft prompt's blocks are reused";
  EXPECT_EQ(e.stats().kv_blocks_used, 0);
}

TEST(SoftPrompt, SampledGroupsForkWithTheirSoftPrompt) {
  // n = 3 samples of a seeded request: each sample equals the same sample
  // index run with the same seed (the forked children keep the soft prompt).
  const testing::LoadedWithTokenizer& base = testing::stories260k();
  const auto sp = random_soft_prompt(5, 21);
  const std::vector<int32_t> prompt = base.tok->encode("The cat", true, true);
  auto sample = [&](int32_t n) {
    engine::Engine e(*base.lm.model, base.tok.get(), config());
    engine::SamplingParams p;
    p.temperature = 0.8f;
    p.max_tokens = 20;
    p.ignore_eos = true;
    p.n = n;
    p.seed = 1234;
    e.add_request(prompt, p, {}, {nullptr, sp});
    std::map<int32_t, std::vector<int32_t>> out;
    while (e.has_unfinished()) {
      for (const engine::RequestOutput& o : e.step()) {
        out[o.index].insert(out[o.index].end(), o.new_tokens.begin(), o.new_tokens.end());
      }
    }
    EXPECT_EQ(e.stats().kv_blocks_used, 0);
    return out;
  };
  const auto three = sample(3), one = sample(1);
  ASSERT_EQ(three.size(), 3u);
  EXPECT_EQ(three.at(0), one.at(0));
  EXPECT_NE(three.at(1), three.at(2));
}

// --- files ---

std::string npy(const std::string& descr, const std::string& shape, const void* data, size_t bytes,
                bool fortran = false) {
  return adapters::npy_bytes(descr, shape, data, bytes, fortran);
}

TEST(SoftPromptFile, NpyAndGgufLoadTheSameRows) {
  const ModelConfig& cfg = testing::stories260k().lm.model->config();
  const auto sp = random_soft_prompt(6, 5);
  const std::string shape = "(6, " + std::to_string(cfg.n_embd) + ")";
  const std::string f32 = testing::temp_path("sp32.npy");
  testing::write_file(f32, npy("<f4", shape, sp->embd.data(), sp->bytes()));
  const auto a = adapters::load_soft_prompt(f32, cfg);
  EXPECT_EQ(a->n_virtual, 6);
  EXPECT_EQ(a->n_embd, cfg.n_embd);
  EXPECT_EQ(a->embd, sp->embd);

  std::vector<fp16_t> half(sp->embd.size());
  for (size_t i = 0; i < half.size(); ++i) half[i] = f32_to_fp16(sp->embd[i]);
  const std::string f16 = testing::temp_path("sp16.npy");
  testing::write_file(f16, npy("<f2", shape, half.data(), half.size() * 2));
  const auto b = adapters::load_soft_prompt(f16, cfg);
  ASSERT_EQ(b->embd.size(), sp->embd.size());
  for (size_t i = 0; i < half.size(); ++i) EXPECT_EQ(b->embd[i], fp16_to_f32(half[i]));

  gguf::Writer w;
  w.set_string("general.type", "soft_prompt");
  w.add_tensor("soft_prompt", DType::kF32, {cfg.n_embd, 6},
               [&](uint8_t* out, size_t n) { std::memcpy(out, sp->embd.data(), n); });
  const std::string g = testing::temp_path("sp.gguf");
  w.write(g);
  EXPECT_EQ(adapters::load_soft_prompt(g, cfg)->embd, sp->embd);
}

void expect_error(const std::string& path, const std::string& what) {
  const ModelConfig& cfg = testing::stories260k().lm.model->config();
  try {
    adapters::load_soft_prompt(path, cfg);
    ADD_FAILURE() << path << ": no error; expected one containing '" << what << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

TEST(SoftPromptFile, BadFilesGetClearErrors) {
  const ModelConfig& cfg = testing::stories260k().lm.model->config();
  const int64_t E = cfg.n_embd;
  std::vector<float> rows(static_cast<size_t>(4 * E), 0.25f);
  auto write = [&](const std::string& name, const std::string& bytes) {
    const std::string p = testing::temp_path(name);
    testing::write_file(p, bytes);
    return p;
  };
  const std::string shape = "(4, " + std::to_string(E) + ")";
  expect_error(write("w.npy", npy("<f4", "(4, 7)", rows.data(), 4 * 7 * 4)), "this model's embeddings have");
  expect_error(write("1d.npy", npy("<f4", "(12,)", rows.data(), 48)), "not 2-D");
  expect_error(write("f.npy", npy("<f4", shape, rows.data(), rows.size() * 4, true)), "Fortran");
  expect_error(write("d.npy", npy("<f8", shape, rows.data(), rows.size() * 4)), "not supported");
  expect_error(write("be.npy", npy(">f4", shape, rows.data(), rows.size() * 4)), "not supported");
  expect_error(write("t.npy", npy("<f4", shape, rows.data(), rows.size() * 4 - 8)), "bytes of data");
  expect_error(write("h.npy", std::string("\x93NUMPY\x01\x00\xff\x7f{", 11)), "truncated");
  expect_error(write("x.bin", "hello world"), "neither magic");
  rows[5] = std::nanf("");
  expect_error(write("nan.npy", npy("<f4", shape, rows.data(), rows.size() * 4)), "holds nan");
  // A GGUF with two tensors and none named soft_prompt; a 3-D one.
  gguf::Writer w2;
  for (const char* n : {"a", "b"}) {
    w2.add_tensor(n, DType::kF32, {E, 1}, [](uint8_t* out, size_t n) { std::memset(out, 0, n); });
  }
  const std::string two = testing::temp_path("two.gguf");
  w2.write(two);
  expect_error(two, "one named 'soft_prompt'");
  gguf::Writer w3;
  w3.add_tensor("soft_prompt", DType::kF32, {E, 2, 2}, [](uint8_t* out, size_t n) { std::memset(out, 0, n); });
  const std::string three = testing::temp_path("three.gguf");
  w3.write(three);
  expect_error(three, "not 2-D");
  // The engine refuses a soft prompt of another width.
  const testing::LoadedWithTokenizer& base = testing::stories260k();
  engine::Engine e(*base.lm.model, base.tok.get(), config());
  auto narrow = std::make_shared<SoftPrompt>();
  narrow->n_embd = E - 1;
  narrow->n_virtual = 1;
  narrow->embd.resize(static_cast<size_t>(E - 1));
  EXPECT_THROW(e.add_request(std::vector<int32_t>{1, 2}, greedy(4), {}, {nullptr, narrow}), Error);
}

}  // namespace
}  // namespace tessera
