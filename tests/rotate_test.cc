// QuaRot's offline rotation (quant/rotate.h): computational invariance (the
// rotated F32 model gives the original's logits within float rounding) on
// every architecture it takes (mixtures included), the run-time rotation of ffn_down's input
// being what makes the file correct, refusals that name the reason, and
// the point of it: activations quantized to int8 lose less.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/sequence_runner.h"
#include "eval/perplexity.h"
#include "format/gguf.h"
#include "format/gguf_writer.h"
#include "model/model.h"
#include "model/synthetic.h"
#include "model/weights.h"
#include "tokenizer/tokenizer.h"
#include "quant/rotate.h"
#include "util/test_util.h"

namespace tessera {
namespace {

std::vector<float> logits_of(const std::string& path, int32_t n_vocab_ids) {
  const LoadedModel lm = load_model(path);
  ThreadPool pool(1);
  engine::SequenceRunner r(*lm.model, {.n_ctx = 64}, pool);
  std::vector<int32_t> ids;
  for (int32_t i = 0; i < 24; ++i) ids.push_back(1 + (i * 37) % (n_vocab_ids - 1));
  const std::span<const float> l = r.append(ids, /*all_logits=*/true);
  return std::vector<float>(l.begin(), l.end());
}

// max |a - b| over the logits' RMS.
double relative_gap(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double ss = 0.0, mx = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    ss += static_cast<double>(a[i]) * a[i];
    mx = std::max(mx, std::fabs(static_cast<double>(a[i]) - b[i]));
  }
  return mx / std::sqrt(ss / static_cast<double>(a.size()));
}

std::string random_model(const std::string& arch, int64_t n_ff, bool tied) {
  SyntheticModelSpec s = preset_spec("tiny");
  s.arch = arch;
  s.n_vocab = 128;
  s.n_ff = n_ff;
  s.tied_output = tied;
  s.seed = 3;
  const std::string path = testing::temp_path(arch + "-" + std::to_string(n_ff) + (tied ? "-tied" : "") + ".gguf");
  write_synthetic_model(s, path, 1);
  return path;
}

std::string rotated(const std::string& in, bool online_ffn, const std::string& tag = "") {
  const std::string out = in + tag + (online_ffn ? ".rot.gguf" : ".rot-plain.gguf");
  quant::RotateOptions o;
  o.online_ffn = online_ffn;
  quant::rotate_model(gguf::File::open(in), o, out);
  return out;
}

TEST(Rotate, EveryPreNormArchitectureKeepsItsLogits) {
  // n_ff 96 = 3 x 32 and 80 = 5 x 16: the run-time rotation mixes runs; 128 does not.
  struct Case { const char* arch; int64_t n_ff; bool tied; };
  for (const Case c : {Case{"llama", 128, false}, Case{"llama", 96, true}, Case{"qwen2", 96, false},
                       Case{"qwen3", 80, false}, Case{"phi3", 128, false}}) {
    SCOPED_TRACE(std::string(c.arch) + " n_ff " + std::to_string(c.n_ff));
    const std::string in = random_model(c.arch, c.n_ff, c.tied);
    const std::vector<float> want = logits_of(in, 128);
    for (bool online : {true, false}) {
      const std::string out = rotated(in, online);
      const gguf::File f = gguf::File::open(out);
      EXPECT_EQ(f.has(kFfnRotationKey), online);
      // The weights did change: the embedding's first row is not the input's.
      EXPECT_NE(0, std::memcmp(f.tensor("token_embd.weight").data, gguf::File::open(in).tensor("token_embd.weight").data, 64));
      EXPECT_LT(relative_gap(want, logits_of(out, 128)), 2e-5) << (online ? "online" : "plain");
    }
  }
}

// `path` copied with metadata key `key` set to `value`, or without it.
std::string with_key(const std::string& path, const char* key, std::optional<uint32_t> value) {
  const gguf::File f = gguf::File::open(path);
  gguf::Writer w;
  for (const auto& [k, v] : f.metadata()) {
    if (k != key) w.set_value(k, v);
  }
  if (value) w.set_u32(key, *value);
  for (const gguf::TensorInfo& t : f.tensors()) {
    w.add_tensor(t.name, t.type, std::vector<int64_t>(t.ne, t.ne + t.n_dims),
                 [&t](uint8_t* o, size_t n) { std::memcpy(o, t.data, n); });
  }
  const std::string out = path + (value ? ".with.gguf" : ".without.gguf");
  w.write(out);
  return out;
}

TEST(Rotate, TheRunTimeRotationIsWhatKeepsTheFfn) {
  // The same file without its key (ffn_down expects a rotated input it no
  // longer gets) computes something else.
  const std::string in = random_model("llama", 96, false);
  const std::string keyless = with_key(rotated(in, true, ".keyless"), kFfnRotationKey, std::nullopt);
  EXPECT_GT(relative_gap(logits_of(in, 128), logits_of(keyless, 128)), 1e-2);
}

TEST(Rotate, Stories260KKeepsItsLogits) {
  const std::string in = testing::stories260k_path();
  const std::string out = testing::temp_path("stories260k.rot.gguf");
  quant::rotate_model(gguf::File::open(in), {}, out);
  EXPECT_LT(relative_gap(logits_of(in, 512), logits_of(out, 512)), 2e-5);
}

TEST(Rotate, GemmaKeepsItsLogitsWithItsPostNormsRotatedAtRunTime) {
  // A post-norm (scaled RMSNorm of a block's output) does not commute with
  // R: it stays, and its output is rotated at run time. Without the key
  // the same file computes something else.
  for (const char* arch : {"gemma2", "gemma3"}) {
    SCOPED_TRACE(arch);
    const std::string in = random_model(arch, 96, true);
    const std::vector<float> want = logits_of(in, 128);
    for (bool online : {true, false}) {
      const std::string out = rotated(in, online);
      const gguf::File f = gguf::File::open(out);
      EXPECT_TRUE(f.has(kPostNormRotationKey));
      EXPECT_NE(f.find_tensor("output.weight"), nullptr);  // the tied output, untied
      EXPECT_LT(relative_gap(want, logits_of(out, 128)), 2e-5) << (online ? "online" : "plain");
      if (online) continue;
      const std::string keyless = with_key(out, kPostNormRotationKey, std::nullopt);
      if (std::string(arch) == "gemma2") {
        EXPECT_THROW(load_model(keyless), Error);  // gemma2 reads no output matrix: the untied one is refused
      } else {
        EXPECT_GT(relative_gap(want, logits_of(keyless, 128)), 1e-2);
      }
    }
  }
}

TEST(Rotate, RefusesWhatItCannotDo) {
  // The post-norm key on a model without post-norms would never be applied.
  const std::string llama = with_key(rotated(random_model("llama", 128, false), false, ".pn"), kPostNormRotationKey, 7);
  try {
    load_model(llama);
    ADD_FAILURE() << "a llama took a post-norm rotation";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no post-norms"), std::string::npos) << e.what();
  }
  quant::RotateOptions o;
  o.seed = uint64_t{1} << 40;  // the file's keys are 32-bit
  EXPECT_THROW(quant::rotate_model(gguf::File::open(random_model("llama", 128, false)), o, testing::temp_path("big-seed.gguf")),
               Error);
}

TEST(Rotate, MixturesKeepTheirLogits) {
  // The router and every expert read the rotated stream; the experts' down
  // matrices (and gpt-oss's output biases) write it. No run-time rotation:
  // a mixture's file never carries the key, asked for or not.
  for (const char* arch : {"mixtral", "qwen2moe", "qwen3moe", "gpt-oss"}) {
    SCOPED_TRACE(arch);
    const std::string in = random_model(arch, 128, false);
    const std::vector<float> want = logits_of(in, 128);
    const std::string out = rotated(in, true);
    const gguf::File f = gguf::File::open(out);
    EXPECT_FALSE(f.has(kFfnRotationKey));
    EXPECT_NE(0, std::memcmp(f.tensor("blk.0.ffn_down_exps.weight").data,
                             gguf::File::open(in).tensor("blk.0.ffn_down_exps.weight").data, 64));
    EXPECT_LT(relative_gap(want, logits_of(out, 128)), 2e-5);
  }
}

// Perplexity on the first `bytes` of the TinyStories text at ctx 128, the
// model's matrices quantized to W8A8 at load when `w8a8`.
double ppl_of(const std::string& path, bool w8a8, int64_t bytes) {
  if (w8a8) setenv("TESSERA_W8A8", "1", 1);
  const LoadedModel lm = load_model(path);
  unsetenv("TESSERA_W8A8");
  const auto tok = Tokenizer::from_gguf(*lm.file);
  const std::string text = testing::read_file(testing::shared_path("data/tinystories_val_prefix.txt")).substr(0, bytes);
  ThreadPool pool(2);
  engine::PerplexityOptions opt;
  opt.n_ctx = 128;
  opt.kv_type = DType::kF32;
  return engine::perplexity(*lm.model, *tok, tok->encode(text, /*add_special=*/true), opt, pool).ppl;
}

TEST(Rotate, Int8ActivationsLoseLessOnTheRotatedStories1M) {
  // W8A8 (int8 weights per channel, int8 activations per token) of the
  // model as it is, and of the rotated model: the rotated one's
  // activations have no outlier features, so rounding them costs less.
  TESSERA_REQUIRE_SHARED("models/stories1M/stories1M.gguf");
  const std::string in = testing::shared_path("models/stories1M/stories1M.gguf");
  const std::string out = testing::temp_path("stories1m.rot.gguf");
  quant::rotate_model(gguf::File::open(in), {}, out);
  const double base = ppl_of(in, false, 30000), plain = ppl_of(in, true, 30000), rot = ppl_of(out, true, 30000);
  std::printf("stories1M ppl: f32 %.5f, w8a8 %.5f (x%.5f), rotated w8a8 %.5f (x%.5f)\n", base, plain, plain / base,
              rot, rot / base);
  EXPECT_LT(std::abs(rot / base - 1.0), 0.5 * std::abs(plain / base - 1.0));
}

}  // namespace
}  // namespace tessera
