// Hugging Face folders (format/hf_model.h) and the safetensors reader:
//   - a random model written as GGUF and as its HF twin gives the same
//     logits bit for bit, for every architecture and F32 / F16 / BF16;
//   - `convert` of the twin gives the make-model GGUF's tensor bytes;
//   - the tokenizer `convert` writes (the real Qwen 3 tokenizer.json, and
//     byte-fallback BPEs trained in the test) encodes and decodes varied
//     text as the tokenizer.json does; what GGUF cannot express is refused;
//   - sharded safetensors with an index load as one file does;
//   - corrupt or missing files, unknown model types and keys, missing
//     tensors: one Error naming them;
//   - the header parser on truncated, bit-flipped and hand-made hostile
//     headers: an Error or a file whose tensors lie inside the input.
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/sequence_runner.h"
#include "model/convert.h"
#include "format/gguf.h"
#include "format/hf_model.h"
#include "format/safetensors.h"
#include "model/synthetic.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/normalize.h"
#include "util/test_util.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// ---- the safetensors header parser ----------------------------------------

std::vector<uint8_t> image(const std::string& header, size_t data_bytes) {
  std::vector<uint8_t> b(8 + header.size() + data_bytes, 0);
  const uint64_t n = header.size();
  std::memcpy(b.data(), &n, 8);
  std::memcpy(b.data() + 8, header.data(), header.size());
  for (size_t i = 0; i < data_bytes; ++i) b[8 + header.size() + i] = static_cast<uint8_t>(i * 7);
  return b;
}

std::string parse_error(const std::vector<uint8_t>& b) {
  try {
    safetensors::File::parse(b.data(), b.size(), "x.safetensors");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Any input: an Error, or tensors that lie inside it and match their shapes.
void parse_or_error(const std::vector<uint8_t>& b) {
  try {
    const safetensors::File f = safetensors::File::parse(b.data(), b.size(), "x.safetensors");
    for (const safetensors::Tensor& t : f.tensors()) {
      ASSERT_GE(t.data, b.data());
      ASSERT_LE(t.data + t.n_bytes, b.data() + b.size());
      ASSERT_EQ(t.n_bytes, static_cast<size_t>(t.n_elements()) * safetensors::dtype_size(t.dtype));
    }
  } catch (const Error&) {
  }
}

TEST(Safetensors, RoundTrip) {
  std::vector<float> a = {1, 2, 3, 4, 5, 6};
  std::vector<uint16_t> h = {1, 2, 3};
  const std::string path = testing::temp_path("rt.safetensors");
  safetensors::write(path, {{"a", DType::kF32, {2, 3}, reinterpret_cast<const uint8_t*>(a.data())},
                            {"h", DType::kBF16, {3}, reinterpret_cast<const uint8_t*>(h.data())}},
                     {{"format", "pt"}});
  const safetensors::File f = safetensors::File::open(path);
  ASSERT_EQ(f.tensors().size(), 2u);
  const safetensors::Tensor* t = f.find("a");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->dtype, "F32");
  EXPECT_EQ(t->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(std::memcmp(t->data, a.data(), 24), 0);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t->data) % 8, 0u);  // the header is padded
  EXPECT_EQ(f.find("h")->dtype, "BF16");
  EXPECT_EQ(f.metadata().at(0), (std::pair<std::string, std::string>{"format", "pt"}));
}

TEST(Safetensors, HostileHeadersNameTheProblem) {
  const auto one = [](const std::string& entry) { return "{\"t\":" + entry + "}"; };
  const std::vector<std::pair<std::vector<uint8_t>, std::string>> cases = {
      {std::vector<uint8_t>(5, 0), "too short"},
      {image("{}", 0), ""},  // empty is valid
      {[] { auto b = image("{}", 0); b[0] = 200; return b; }(), "header length in its first 8 bytes exceeds"},
      {image("{\"t\":", 0), "not valid JSON"},
      {image("[1]", 0), "not a JSON object"},
      {image(one("[[[[1]]]]"), 0), "nests deeper"},
      {image(one("{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}"), 4), "outside the data section"},
      {image(one("{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}"), 8), "tensor 't': data_offsets [0, 8] hold 8"},
      {image(one("{\"dtype\":\"Q4\",\"shape\":[2],\"data_offsets\":[0,8]}"), 8), "unknown dtype 'Q4'"},
      {image(one("{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}"), 8), "not a non-negative integer"},
      {image(one("{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,8]}"), 8),
       "larger than the file"},
      {image(one("{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}"), 8), "outside the data section"},
      {image(one("{\"dtype\":\"F32\",\"shape\":[2]}"), 8), "data_offsets"},
      {image(one("{\"shape\":[2],\"data_offsets\":[0,8]}"), 8), "no \"dtype\""},
      {image("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
             "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8), "overlap"},
      {image("{\"__metadata__\":{\"k\":1}}", 0), "__metadata__ 'k'"},
  };
  for (const auto& [bytes, want] : cases) {
    const std::string got = parse_error(bytes);
    if (want.empty()) {
      EXPECT_EQ(got, "");
    } else {
      EXPECT_NE(got.find(want), std::string::npos) << "want '" << want << "', got '" << got << "'";
      EXPECT_EQ(got.find('\n'), std::string::npos) << got;
    }
  }
}

TEST(Safetensors, TruncationAndByteFlipsNeverCrash) {
  std::vector<float> a(24, 1.5f);
  const std::string path = testing::temp_path("fuzz.safetensors");
  safetensors::write(path, {{"model.layers.0.w", DType::kF32, {4, 6}, reinterpret_cast<const uint8_t*>(a.data())},
                            {"b", DType::kF16, {2, 2}, reinterpret_cast<const uint8_t*>(a.data())}});
  const std::string s = testing::read_file(path);
  const std::vector<uint8_t> good(s.begin(), s.end());
  for (size_t n = 0; n < good.size(); ++n) parse_or_error(std::vector<uint8_t>(good.begin(), good.begin() + n));
  std::mt19937 rng(42);
  for (int i = 0; i < 20000; ++i) {
    std::vector<uint8_t> b = good;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) {
      const size_t at = rng() % std::min<size_t>(b.size(), 8 + 200);  // mostly the header
      b[at] = rng() % 3 == 0 ? static_cast<uint8_t>("0123456789[]{},:\"-"[rng() % 18]) : static_cast<uint8_t>(rng());
    }
    parse_or_error(b);
  }
}

// ---- GGUF and HF twins ----------------------------------------------------

struct Twin {
  std::string gguf, hf;
};

SyntheticModelSpec spec_for(const std::string& arch, DType type) {
  SyntheticModelSpec s = preset_spec("tiny");
  s.arch = arch;
  s.type = type;
  s.n_vocab = 96;
  s.seed = 11;
  if (arch == "mistral" || arch == "gemma2" || arch == "gemma3") s.sliding_window = 5;  // shorter than the prompt
  if (arch == "gemma3") s.n_layer = 7;   // local and global layers
  if (arch == "qwen3") s.n_head_kv = 1;  // another GQA ratio
  if (arch == "phi3") {
    s.rope_scaling = "longrope";
    s.rope_orig_ctx = 8;  // the prompt runs past it: long factors
    s.n_ctx = 64;
  }
  if (arch == "qwen2") s.tied_output = true;
  if (arch == "qwen2moe" || arch == "qwen3moe") s.n_ff_exp = 32;  // expert width apart from the dense one
  return s;
}

Twin make_twin(const std::string& arch, DType type, int64_t shard_bytes = 0) {
  const SyntheticModelSpec s = spec_for(arch, type);
  const std::string base = fmt::format("{}-{}-{}", arch, dtype_name(type), shard_bytes);
  Twin t{testing::temp_path(base + ".gguf"), testing::temp_path(base + "-hf")};
  write_synthetic_model(s, t.gguf, 1);
  write_synthetic_hf_folder(s, t.hf, "", shard_bytes, 1);
  return t;
}

std::vector<float> logits_of(const std::string& path) {
  const LoadedModel lm = load_model(path);
  ThreadPool pool(1);
  engine::SequenceRunner runner(*lm.model, {.n_ctx = 32}, pool);
  std::vector<int32_t> ids;
  for (int i = 0; i < 14; ++i) ids.push_back((i * 37 + 5) % 96);
  const std::span<const float> logits = runner.append(ids, /*all_logits=*/true);
  return std::vector<float>(logits.begin(), logits.end());
}

void expect_same_tensors(const gguf::File& a, const gguf::File& b) {
  ASSERT_EQ(a.tensors().size(), b.tensors().size()) << a.path() << " vs " << b.path();
  for (const gguf::TensorInfo& t : a.tensors()) {
    const gguf::TensorInfo* u = b.find_tensor(t.name);
    ASSERT_NE(u, nullptr) << t.name;
    EXPECT_EQ(t.type, u->type) << t.name;
    EXPECT_EQ(t.shape_string(), u->shape_string()) << t.name;
    ASSERT_EQ(t.n_bytes, u->n_bytes) << t.name;
    EXPECT_EQ(std::memcmp(t.data, u->data, t.n_bytes), 0) << t.name;
  }
}

class HfTwin : public ::testing::TestWithParam<std::tuple<std::string, DType>> {};

TEST_P(HfTwin, SameLogitsBitForBitAndConvertGivesTheGgufTensors) {
  const auto& [arch, type] = GetParam();
  const Twin t = make_twin(arch, type);
  const std::vector<float> want = logits_of(t.gguf);
  const std::vector<float> got = logits_of(t.hf);
  ASSERT_EQ(want.size(), got.size());
  EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0) << arch;

  // The view of the folder holds the GGUF's tensors, and so does convert's output.
  const gguf::File made = gguf::File::open(t.gguf);
  expect_same_tensors(made, hf::open_folder(t.hf));
  const std::string out = testing::temp_path(fmt::format("conv-{}-{}.gguf", arch, dtype_name(type)));
  write_gguf(*load_model(t.hf).file, out);
  expect_same_tensors(made, gguf::File::open(out));
}

std::string twin_name(const ::testing::TestParamInfo<HfTwin::ParamType>& p) {
  return std::get<0>(p.param) + "_" + std::string(dtype_name(std::get<1>(p.param)));
}

INSTANTIATE_TEST_SUITE_P(Archs, HfTwin,
                         ::testing::Combine(::testing::Values("llama", "llama3", "mistral", "qwen2", "qwen3", "gemma2",
                                                              "gemma3", "phi3", "mixtral", "qwen2moe", "qwen3moe"),
                                            ::testing::Values(DType::kF32, DType::kF16, DType::kBF16)),
                         twin_name);

TEST(HfFolder, ConvertToQ8EqualsMakeModelQ8) {
  for (const char* arch : {"llama", "qwen3"}) {
    const Twin t = make_twin(arch, DType::kF32);
    SyntheticModelSpec s = spec_for(arch, DType::kQ8_0);
    const std::string q8 = testing::temp_path(std::string(arch) + "-made-q8.gguf");
    write_synthetic_model(s, q8, 1);
    const std::string out = testing::temp_path(std::string(arch) + "-conv-q8.gguf");
    write_gguf(*load_model(t.hf).file, out, DType::kQ8_0);
    expect_same_tensors(gguf::File::open(q8), gguf::File::open(out));
  }
}

TEST(HfFolder, ShardsLoadAsOneFile) {
  const Twin one = make_twin("llama", DType::kF16);
  const Twin sharded = make_twin("llama", DType::kF16, /*shard_bytes=*/20000);
  ASSERT_TRUE(fs::exists(sharded.hf + "/model.safetensors.index.json"));
  int n_shards = 0;
  for (const auto& e : fs::directory_iterator(sharded.hf)) {
    n_shards += e.path().filename().string().rfind("model-0000", 0) == 0;
  }
  ASSERT_GE(n_shards, 3);
  expect_same_tensors(hf::open_folder(one.hf), hf::open_folder(sharded.hf));
  const std::vector<float> a = logits_of(one.hf), b = logits_of(sharded.hf);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
}

// ---- the tokenizer `convert` writes -----------------------------------------

// The texts of the real-tokenizer checks (tests/tokenizers/texts.json: code,
// emoji, CJK, RTL scripts, whitespace runs, digits, special-token texts) and
// a few more.
std::vector<std::string> varied_texts() {
  std::vector<std::string> texts =
      json::parse(testing::read_file(std::string(TESSERA_SOURCE_DIR) + "/tests/tokenizers/texts.json"));
  for (const char* t : {"the cat sat on the mat", "<start_of_turn>user\nthe <custom> cat<end_of_turn>",
                        "\xE2\x96\x81\xE2\x96\x81 double marks", "  two leading spaces", "x"}) {
    texts.emplace_back(t);
  }
  return texts;
}

// `gguf` (read back from convert's metadata) tokenizes and detokenizes as
// `hf` (the tokenizer.json) does: every token's piece, and every text with
// and without BOS/EOS and special-token parsing. `form`: the tokenizer.json's
// Unicode normalizer, which GGUF cannot express (llama.cpp applies none to a
// gpt2 tokenizer): the GGUF side is given the text in that form.
void expect_same_tokenizer(const Tokenizer& hf, const Tokenizer& gguf, const std::string& label,
                           tok::NormalForm form = tok::NormalForm::kNone) {
  // (kind() may differ: a byte-fallback BPE runs as BPE from tokenizer.json
  // and as SentencePiece from GGUF; the ids must not.)
  EXPECT_EQ(hf.bos_id(), gguf.bos_id()) << label;
  EXPECT_EQ(hf.eos_id(), gguf.eos_id()) << label;
  EXPECT_EQ(hf.add_bos(), gguf.add_bos()) << label;
  EXPECT_EQ(hf.add_eos(), gguf.add_eos()) << label;
  ASSERT_LE(hf.n_vocab(), gguf.n_vocab()) << label;
  int bad_pieces = 0;
  for (int32_t id = 0; id < hf.n_vocab(); ++id) {
    if (hf.token_to_piece(id, true) != gguf.token_to_piece(id, true) || hf.is_control(id) != gguf.is_control(id)) {
      if (++bad_pieces <= 3) ADD_FAILURE() << label << ": token " << id << " '" << hf.token_text(id) << "' differs";
    }
  }
  EXPECT_EQ(bad_pieces, 0) << label;
  size_t n_ids = 0;
  for (const std::string& text : varied_texts()) {
    for (const bool add_special : {false, true}) {
      for (const bool parse_special : {false, true}) {
        const std::vector<int32_t> want = hf.encode(text, add_special, parse_special);
        ASSERT_EQ(want, gguf.encode(tok::normalize(text, form), add_special, parse_special))
            << label << ": '" << text << "' add_special " << add_special << " parse_special " << parse_special;
        EXPECT_EQ(hf.decode(want), gguf.decode(want)) << label << ": '" << text << "'";
        EXPECT_EQ(hf.decode(want, true), gguf.decode(want, true)) << label << ": '" << text << "'";
        n_ids += want.size();
      }
    }
  }
  EXPECT_GT(n_ids, 1000u) << label;
}

// A SentencePiece-style BPE (byte_fallback) as Gemma's and Llama 2's
// tokenizer.json hold one, trained here: words of `corpus` ("▁" for spaces),
// the most frequent adjacent pair merged 250 times, and the merges written as
// Hugging Face's converter writes a SentencePiece model's (every split of
// every piece into two pieces, in the pieces' order). With `prepend`, Llama
// 2's Prepend("▁") normalizer and Strip decoder; without, Gemma's bare
// Replace and its no-op Split(" ") pre-tokenizer. <unk>, <s>, </s>, the 256
// <0xNN> bytes, a special <start_of_turn>, non-special <custom> and "▁▁".
void write_fallback_tokenizer(const std::string& dir, bool prepend) {
  const std::string mark = "\xE2\x96\x81";
  const std::string corpus =
      "the cat sat on the mat. the dog sat on the log. a cat and a dog met on the mat; "
      "then the cat ran, the dog ran after the cat, and the mat was empty. "
      "Hello world! Hello, cats and dogs of the world. café naïve résumé, über alles. "
      "int main() { return 0; } // the end; 3.14159 and 2026 and 100000 \n\t tabs\tand\nlines ";
  std::vector<std::vector<std::string>> words;  // characters, spaces as marks, a word from each mark on
  for (size_t i = 0; i < corpus.size();) {
    const size_t n = (static_cast<uint8_t>(corpus[i]) >= 0xF0) ? 4 : (static_cast<uint8_t>(corpus[i]) >= 0xE0) ? 3
                     : (static_cast<uint8_t>(corpus[i]) >= 0xC0) ? 2 : 1;
    const std::string c = corpus[i] == ' ' ? mark : corpus.substr(i, n);
    if (c == mark || words.empty()) words.emplace_back();
    words.back().push_back(c);
    i += n;
  }
  std::vector<std::string> pieces;  // characters (sorted), then merge results in order
  std::map<std::string, int32_t> vocab;
  const std::vector<std::string> specials = {"<unk>", "<s>", "</s>"};
  for (const std::string& t : specials) vocab[t] = static_cast<int32_t>(vocab.size());
  for (int b = 0; b < 256; ++b) vocab[fmt::format("<0x{:02X}>", b)] = static_cast<int32_t>(vocab.size());
  std::set<std::string> chars;
  for (const auto& w : words) chars.insert(w.begin(), w.end());
  for (const std::string& c : chars) {
    vocab.emplace(c, static_cast<int32_t>(vocab.size()));
    pieces.push_back(c);
  }
  for (int m = 0; m < 250; ++m) {
    std::map<std::pair<std::string, std::string>, int> count;
    for (const auto& w : words) {
      for (size_t i = 0; i + 1 < w.size(); ++i) ++count[{w[i], w[i + 1]}];
    }
    auto best = count.end();
    for (auto it = count.begin(); it != count.end(); ++it) {
      if (best == count.end() || it->second > best->second) best = it;
    }
    if (best == count.end() || best->second < 2) break;
    const auto [a, b] = best->first;
    if (vocab.emplace(a + b, static_cast<int32_t>(vocab.size())).second) pieces.push_back(a + b);
    for (auto& w : words) {
      for (size_t i = 0; i + 1 < w.size(); ++i) {
        if (w[i] == a && w[i + 1] == b) {
          w[i] += w[i + 1];
          w.erase(w.begin() + static_cast<std::ptrdiff_t>(i) + 1);
        }
      }
    }
  }
  // Gemma's whitespace runs: pieces that are also non-special added tokens.
  const std::string two_marks = mark + mark;
  if (vocab.emplace(two_marks, static_cast<int32_t>(vocab.size())).second) pieces.push_back(two_marks);
  json merges = json::array();
  const auto is_piece = [&](const std::string& t) { return vocab.count(t) != 0 && t.rfind("<", 0) != 0; };
  for (const std::string& p : pieces) {
    std::vector<std::pair<int32_t, int32_t>> splits;
    for (size_t i = 1; i < p.size(); ++i) {
      if ((static_cast<uint8_t>(p[i]) & 0xC0) == 0x80) continue;  // inside a character
      if (is_piece(p.substr(0, i)) && is_piece(p.substr(i))) splits.emplace_back(vocab[p.substr(0, i)], vocab[p.substr(i)]);
    }
    std::sort(splits.begin(), splits.end());
    for (const auto& [l, r] : splits) {
      const auto text = [&](int32_t id) {
        return std::find_if(vocab.begin(), vocab.end(), [&](const auto& kv) { return kv.second == id; })->first;
      };
      merges.push_back(json::array({text(l), text(r)}));
    }
  }
  const auto n = static_cast<int32_t>(vocab.size());
  json added = json::array();
  const auto add = [&](int32_t id, const std::string& content, bool special) {
    added.push_back({{"id", id}, {"content", content}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                     {"normalized", false}, {"special", special}});
  };
  for (size_t i = 0; i < specials.size(); ++i) add(static_cast<int32_t>(i), specials[i], true);
  add(n, "<start_of_turn>", true);
  add(n + 1, "<custom>", false);
  add(vocab[two_marks], two_marks, false);
  const json replace = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", mark}};
  json decoders = json::array({{{"type", "Replace"}, {"pattern", {{"String", mark}}}, {"content", " "}},
                               {{"type", "ByteFallback"}}, {{"type", "Fuse"}}});
  if (prepend) decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  json vocab_json = json::object();
  for (const auto& [t, id] : vocab) vocab_json[t] = id;
  const json tok = {
      {"version", "1.0"},
      {"added_tokens", added},
      {"normalizer", prepend ? json{{"type", "Sequence"},
                                    {"normalizers", {{{"type", "Prepend"}, {"prepend", mark}}, replace}}}
                             : replace},
      {"pre_tokenizer", prepend ? json() : json{{"type", "Split"}, {"pattern", {{"String", " "}}},
                                               {"behavior", "MergedWithPrevious"}, {"invert", false}}},
      {"post_processor", {{"type", "TemplateProcessing"},
                          {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                                      {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
                          {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}}},
      {"decoder", {{"type", "Sequence"}, {"decoders", decoders}}},
      {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", "<unk>"}, {"byte_fallback", true},
                 {"ignore_merges", false}, {"vocab", vocab_json}, {"merges", merges}}}};
  fs::create_directories(dir);
  testing::write_file(dir + "/tokenizer.json", tok.dump());
  testing::write_file(dir + "/tokenizer_config.json",
                      json{{"bos_token", "<s>"}, {"eos_token", "</s>"}, {"unk_token", "<unk>"}, {"add_bos_token", true},
                           {"chat_template", "{% for m in messages %}{{ m['content'] }}{% endfor %}"}}
                          .dump());
}

// An HF folder with tokenizer `tok_dir`, converted: the GGUF's tokenizer and
// the folder's.
void expect_convert_keeps_tokenizer(const std::string& tok_dir, const std::string& label, const char* want_model,
                                    const char* want_pre, tok::NormalForm form = tok::NormalForm::kNone) {
  const SyntheticModelSpec s = spec_for("qwen3", DType::kBF16);
  const std::string hf_dir = testing::temp_path(label + "-hf");
  write_synthetic_hf_folder(s, hf_dir, tok_dir, 0, 1);
  const std::string out = testing::temp_path(label + ".gguf");
  const LoadedModel lm = load_model(hf_dir);
  convert_model(lm, out);
  const gguf::File f = gguf::File::open(out);
  EXPECT_EQ(f.get_string("tokenizer.ggml.model"), want_model) << label;
  EXPECT_EQ(f.get_string_or("tokenizer.ggml.pre", ""), want_pre) << label;
  const json config = json::parse(testing::read_file(tok_dir + "/tokenizer_config.json"));
  EXPECT_EQ(f.get_string("tokenizer.chat_template"), config["chat_template"].get<std::string>()) << label;
  expect_same_tensors(*lm.file, f);
  // The converted file loads, with its own tokenizer, as a model.
  const LoadedModel back = load_model(out);
  expect_same_tokenizer(*load_tokenizer(lm), *load_tokenizer(back), label, form);
}

TEST(HfTokenizerToGguf, RealQwen3ByteLevelBpe) {
  const std::string qwen3 = testing::shared_path("models/tokenizers/qwen3");
  ASSERT_TRUE(fs::exists(qwen3 + "/tokenizer.json")) << "missing shared test data " << qwen3;
  // Qwen's NFC normalizer is lost in GGUF (as in llama.cpp's converter):
  // decomposed text tokenizes differently, its NFC form as tokenizer.json.
  expect_convert_keeps_tokenizer(qwen3, "tok-qwen3", "gpt2", "qwen2", tok::NormalForm::kNfc);
  {
    const auto hf = Tokenizer::from_hf_json(qwen3 + "/tokenizer.json");
    const auto gguf = Tokenizer::from_gguf(gguf::File::assemble(
        "q3", hf_tokenizer_gguf_metadata(qwen3 + "/tokenizer.json", 0), {}, {}));
    const std::string decomposed = "cafe\xCC\x81";  // "cafe" + U+0301
    EXPECT_NE(gguf->encode(decomposed, false, false), hf->encode(decomposed, false, false));
    EXPECT_EQ(gguf->encode("caf\xC3\xA9", false, false), hf->encode(decomposed, false, false));
  }

  // Qwen 3's embedding has 151936 rows for 151669 tokens: the tokens are
  // padded with unused entries, as llama.cpp's converter pads them.
  const auto meta = hf_tokenizer_gguf_metadata(qwen3 + "/tokenizer.json", 151936);
  const gguf::File padded = gguf::File::assemble("padded", meta, {}, {});
  const gguf::Array& tokens = padded.get_array("tokenizer.ggml.tokens");
  ASSERT_EQ(tokens.size(), 151936u);
  EXPECT_EQ(tokens.strings[151935], "[PAD151935]");
  EXPECT_EQ(padded.get_array("tokenizer.ggml.token_type").ints[151935], 5);  // unused
  EXPECT_EQ(padded.get_array("tokenizer.ggml.token_type").ints[151644], 3);  // <|im_start|>: control
  EXPECT_EQ(padded.get_uint("tokenizer.ggml.eos_token_id"), 151645u);        // <|im_end|>
  EXPECT_EQ(padded.get_uint("tokenizer.ggml.padding_token_id"), 151643u);    // <|endoftext|>
  EXPECT_FALSE(padded.has("tokenizer.ggml.bos_token_id"));                  // bos_token null
  expect_same_tokenizer(*Tokenizer::from_hf_json(qwen3 + "/tokenizer.json"), *Tokenizer::from_gguf(padded),
                        "qwen3-padded", tok::NormalForm::kNfc);
}

TEST(HfTokenizerToGguf, ByteFallbackBpeAsSentencePieceScores) {
  for (const bool prepend : {true, false}) {
    const std::string label = prepend ? "tok-fallback-llama2" : "tok-fallback-gemma";
    const std::string dir = testing::temp_path(label);
    write_fallback_tokenizer(dir, prepend);
    expect_convert_keeps_tokenizer(dir, label, "llama", "");
    const gguf::File meta = gguf::File::assemble("m", hf_tokenizer_gguf_metadata(dir + "/tokenizer.json", 0), {}, {});
    EXPECT_EQ(meta.get_bool_or("tokenizer.ggml.add_space_prefix", !prepend), prepend);
    EXPECT_TRUE(meta.get_bool_or("tokenizer.ggml.add_bos_token", false));
    EXPECT_EQ(meta.get_array("tokenizer.ggml.token_type").ints[3 + 0x41], 6);  // <0x41>: byte

    // The scores matter: with llama.cpp's converter's -1000 for every token
    // (merging left to right) some text tokenizes otherwise.
    std::vector<std::pair<std::string, gguf::Value>> flat = hf_tokenizer_gguf_metadata(dir + "/tokenizer.json", 0);
    for (auto& [key, value] : flat) {
      if (key == "tokenizer.ggml.scores") {
        auto a = std::make_shared<gguf::Array>(*value.array);
        std::fill(a->floats.begin(), a->floats.end(), -1000.0);
        value.array = a;
      }
    }
    const auto hf_tok = Tokenizer::from_hf_json(dir + "/tokenizer.json");
    const auto flat_tok = Tokenizer::from_gguf(gguf::File::assemble("flat", flat, {}, {}));
    int differ = 0;
    for (const std::string& text : varied_texts()) differ += hf_tok->encode(text, false) != flat_tok->encode(text, false);
    EXPECT_GT(differ, 0) << label;  // 2 of the texts here
  }
}

TEST(HfTokenizerToGguf, WhatGgufCannotExpressIsRefusedByName) {
  const auto error_of = [](const json& tok) {
    const std::string dir = testing::temp_path("tok-refused");
    fs::create_directories(dir);
    testing::write_file(dir + "/tokenizer.json", tok.dump());
    try {
      hf_tokenizer_gguf_metadata(dir + "/tokenizer.json", 0);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const json vocab = {{"a", 0}, {"b", 1}, {"ab", 2}, {"1", 3}};
  const json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}};
  const auto with_pre = [&](const std::string& regex, bool ignore_merges) {
    return json{{"pre_tokenizer", {{"type", "Sequence"},
                                   {"pretokenizers", {{{"type", "Split"}, {"pattern", {{"Regex", regex}}},
                                                       {"behavior", "Isolated"}}, byte_level}}}},
                {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"a b"}}, {"ignore_merges", ignore_merges}}}};
  };
  std::string e = error_of(with_pre(R"(\p{L}+|\p{N}{1,4})", false));
  EXPECT_NE(e.find("pre-tokenizer"), std::string::npos) << e;
  EXPECT_NE(e.find("\\p{N}{1,4}"), std::string::npos) << e;
  e = error_of(with_pre(R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N})"
                        R"(| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)", true));
  EXPECT_NE(e.find("ignore_merges"), std::string::npos) << e;
  EXPECT_EQ(error_of(with_pre(R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N})"
                              R"(| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)", false)), "");
}

// ---- errors ---------------------------------------------------------------

std::string load_error(const std::string& path) {
  try {
    load_model(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string copy_folder(const std::string& from, const std::string& name) {
  const std::string to = testing::temp_path(name);
  fs::remove_all(to);
  fs::copy(from, to, fs::copy_options::recursive);
  return to;
}

void edit_config(const std::string& dir, const std::function<void(json&)>& edit) {
  json j = json::parse(testing::read_file(dir + "/config.json"));
  edit(j);
  testing::write_file(dir + "/config.json", j.dump());
}

void expect_error(const std::string& path, const std::vector<std::string>& parts) {
  const std::string e = load_error(path);
  ASSERT_FALSE(e.empty()) << path << " loaded";
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  for (const std::string& p : parts) EXPECT_NE(e.find(p), std::string::npos) << "want '" << p << "' in: " << e;
}

// Gemma's query_pre_attn_scalar apart from what llama.cpp derives from the
// shape (Gemma-2-27B-like configs): the folder's queries are scaled by
// 1/sqrt(scalar), kept through convert as gemma2.attention.scale, and
// written back on export.
TEST(HfFolder, GemmaQueryPreAttnScalarApartFromHeadDim) {
  const Twin t = make_twin("gemma2", DType::kF32);
  const std::string d = copy_folder(t.hf, "gemma2-scalar");
  edit_config(d, [](json& j) { j["query_pre_attn_scalar"] = 36; });  // head_dim 16
  const LoadedModel lm = load_model(d);
  EXPECT_FLOAT_EQ(lm.model->config().attn_scale, 1.0f / 6.0f);
  EXPECT_NE(logits_of(d), logits_of(t.hf));  // the scale matters at these shapes
  const std::string out = testing::temp_path("gemma2-scalar.gguf");
  write_gguf(*lm.file, out);
  EXPECT_FLOAT_EQ(static_cast<float>(gguf::File::open(out).get_float("gemma2.attention.scale")), 1.0f / 6.0f);
  EXPECT_EQ(logits_of(out), logits_of(d));
  const std::string back = testing::temp_path("gemma2-scalar-back");
  hf::export_folder(gguf::File::open(out), back);
  EXPECT_EQ(json::parse(testing::read_file(back + "/config.json"))["query_pre_attn_scalar"], 36);
  // The derived value writes no key: the GGUF stays what llama.cpp reads.
  const std::string plain = testing::temp_path("gemma2-plain.gguf");
  write_gguf(*load_model(t.hf).file, plain);
  EXPECT_FALSE(gguf::File::open(plain).has("gemma2.attention.scale"));
}

// Rewrites a folder's model.safetensors with the tensors `keep` keeps (and
// may rename or reshape).
void rewrite(const std::string& dir, const std::function<bool(safetensors::TensorToWrite&)>& keep) {
  const std::string s = testing::read_file(dir + "/model.safetensors");
  const std::vector<uint8_t> bytes(s.begin(), s.end());
  const safetensors::File f = safetensors::File::parse(bytes.data(), bytes.size());
  std::vector<safetensors::TensorToWrite> out;
  for (const safetensors::Tensor& x : f.tensors()) {
    safetensors::TensorToWrite w{x.name, safetensors::to_dtype(x.dtype, x.name), x.shape, x.data};
    if (keep(w)) out.push_back(w);
  }
  safetensors::write(dir + "/model.safetensors", out);
}

TEST(HfFolder, ErrorsNameTheFileKeyOrTensor) {
  const Twin t = make_twin("qwen3", DType::kF32);

  const std::string empty = testing::temp_path("empty-dir");
  fs::create_directories(empty);
  expect_error(empty, {"without config.json"});

  std::string d = copy_folder(t.hf, "e-arch");
  edit_config(d, [](json& j) { j["model_type"] = "mamba"; });
  expect_error(d, {"config.json", "model_type 'mamba' is not supported"});

  d = copy_folder(t.hf, "e-key");
  edit_config(d, [](json& j) { j["quantization_config"] = {{"bits", 4}}; });
  expect_error(d, {"config.json", "key 'quantization_config'"});

  d = copy_folder(t.hf, "e-act");
  edit_config(d, [](json& j) { j["hidden_act"] = "gelu"; });
  expect_error(d, {"'hidden_act' = \"gelu\""});

  d = copy_folder(t.hf, "e-rope");
  edit_config(d, [](json& j) { j["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 2.0}}; });
  expect_error(d, {"rope_scaling type 'dynamic'"});

  d = copy_folder(t.hf, "e-window");
  edit_config(d, [](json& j) { j["use_sliding_window"] = true; });
  expect_error(d, {"'use_sliding_window' = true"});

  d = copy_folder(t.hf, "e-noweights");
  fs::remove(d + "/model.safetensors");
  expect_error(d, {"no model.safetensors"});

  d = copy_folder(t.hf, "e-truncated");
  fs::resize_file(d + "/model.safetensors", fs::file_size(d + "/model.safetensors") - 100);
  expect_error(d, {"model.safetensors", "tensor '"});

  // One tensor left out, another renamed.
  d = copy_folder(t.hf, "e-missing");
  rewrite(d, [](safetensors::TensorToWrite& w) { return w.name != "model.layers.1.mlp.up_proj.weight"; });
  expect_error(d, {"missing tensor 'model.layers.1.mlp.up_proj.weight'"});

  d = copy_folder(t.hf, "e-unknown");
  rewrite(d, [](safetensors::TensorToWrite& w) {
    if (w.name == "model.layers.0.mlp.up_proj.weight") w.name = "model.layers.0.mlp.experts.weight";
    return true;
  });
  expect_error(d, {"tensor 'model.layers.0.mlp.experts.weight' is not used"});

  d = copy_folder(t.hf, "e-lmhead");
  edit_config(d, [](json& j) { j["tie_word_embeddings"] = true; });
  EXPECT_EQ(load_error(d), "");  // a stored copy of the tied matrix is ignored
  d = copy_folder(make_twin("qwen2", DType::kF32).hf, "e-untied");  // qwen2's twin is tied
  edit_config(d, [](json& j) { j["tie_word_embeddings"] = false; });
  expect_error(d, {"missing tensor 'lm_head.weight'"});

  d = copy_folder(make_twin("llama", DType::kF32, 20000).hf, "e-index");
  testing::write_file(d + "/model.safetensors.index.json",
                      R"({"weight_map": {"model.norm.weight": "../model-00001-of-00009.safetensors"}})");
  expect_error(d, {"is not a file in the folder"});
}

// A mixture's folder: experts stacked only when each of 0..n-1 is there
// once with one shape, and the config's routing must be the architecture's.
TEST(HfFolder, MixtureErrorsNameTheExpertOrKey) {
  const Twin t = make_twin("qwen3moe", DType::kF32);
  std::string d = copy_folder(t.hf, "moe-gap");
  rewrite(d, [](safetensors::TensorToWrite& w) { return w.name != "model.layers.0.mlp.experts.3.up_proj.weight"; });
  expect_error(d, {"the experts of 'blk.0.ffn_up_exps.weight' are not numbered 0..6 (found 0 to 7)"});

  d = copy_folder(t.hf, "moe-last");
  rewrite(d, [](safetensors::TensorToWrite& w) { return w.name.find("experts.7.") == std::string::npos; });
  expect_error(d, {"tensor 'blk.0.ffn_gate_exps.weight' has shape [64, 32, 7], expected [64, 32, 8]"});

  d = copy_folder(t.hf, "moe-shape");
  rewrite(d, [](safetensors::TensorToWrite& w) {
    if (w.name == "model.layers.1.mlp.experts.2.down_proj.weight") w.shape = {32, 64};
    return true;
  });
  expect_error(d, {"model.layers.1.mlp.experts.2.down_proj.weight' is F32 [64, 32], but expert 0 of its stack is "
                   "F32 [32, 64]"});

  d = copy_folder(t.hf, "moe-norm");
  edit_config(d, [](json& j) { j["norm_topk_prob"] = false; });
  expect_error(d, {"'norm_topk_prob' = false is not supported"});

  d = copy_folder(t.hf, "moe-count");
  edit_config(d, [](json& j) { j.erase("num_experts"); });
  expect_error(d, {"missing 'num_experts' (qwen3_moe is a mixture of experts)"});
}

}  // namespace
}  // namespace tessera
