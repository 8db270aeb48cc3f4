// Tokenizer loading: hostile or broken GGUF metadata and tokenizer.json files
// must give one tessera::Error naming what is wrong, never a crash (CI runs
// this under ASan/UBSan); tiny hand-built byte-level BPEs (GGUF and
// tokenizer.json) check merge order and added tokens against ids worked out
// by hand.
#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <functional>
#include <limits>
#include <random>

#include "core/error.h"
#include "format/gguf_writer.h"
#include "util/test_util.h"

namespace tessera {
namespace {

using testing::shared_path;
using testing::temp_path;

// Copies every metadata key of `src` except those `edit` handles itself.
using Edit = std::function<void(gguf::Writer&)>;

std::string write_edited(const gguf::File& src, const std::string& name, const std::vector<std::string>& drop,
                         const Edit& edit) {
  gguf::Writer w;
  for (const auto& [key, value] : src.metadata()) {
    if (std::find(drop.begin(), drop.end(), key) == drop.end()) w.set_value(key, value);
  }
  edit(w);
  const std::string path = temp_path(name + ".gguf");
  w.write(path);
  return path;
}

// Loading `path` throws Error(kCorruptFile) whose message mentions `needle`.
void expect_corrupt(const std::string& path, const std::string& needle) {
  try {
    Tokenizer::from_gguf(gguf::File::open(path));
    ADD_FAILURE() << path << ": loaded, expected an error mentioning '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kCorruptFile) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

class HostileSpm : public ::testing::Test {
 protected:
  void SetUp() override {
    TESSERA_REQUIRE_SHARED("models/stories260K/stories260K.gguf");
    src_ = std::make_unique<gguf::File>(gguf::File::open(testing::stories260k_path()));
  }
  std::string edited(const std::string& name, const std::vector<std::string>& drop, const Edit& edit) {
    return write_edited(*src_, name, drop, edit);
  }
  std::unique_ptr<gguf::File> src_;
};

TEST_F(HostileSpm, UnmodifiedCopyLoads) {
  const std::string path = edited("copy", {}, [](gguf::Writer&) {});
  const auto tok = Tokenizer::from_gguf(gguf::File::open(path));
  EXPECT_EQ(tok->n_vocab(), 512);
  EXPECT_EQ(tok->decode(tok->encode("Once upon a time", true)), "Once upon a time");
}

TEST_F(HostileSpm, TokenIdOutOfRange) {
  expect_corrupt(edited("bos", {"tokenizer.ggml.bos_token_id"},
                        [](gguf::Writer& w) { w.set_u32("tokenizer.ggml.bos_token_id", 512); }),
                 "tokenizer.ggml.bos_token_id");
  expect_corrupt(edited("eos", {"tokenizer.ggml.eos_token_id"},
                        [](gguf::Writer& w) { w.set_i32("tokenizer.ggml.eos_token_id", -7); }),
                 "tokenizer.ggml.eos_token_id");
  expect_corrupt(edited("unk", {"tokenizer.ggml.unknown_token_id"},
                        [](gguf::Writer& w) { w.set_u64("tokenizer.ggml.unknown_token_id", 1ull << 40); }),
                 "tokenizer.ggml.unknown_token_id");
  expect_corrupt(edited("eot", {}, [](gguf::Writer& w) { w.set_string("tokenizer.ggml.eot_token_id", "2"); }),
                 "tokenizer.ggml.eot_token_id");
}

TEST_F(HostileSpm, MismatchedArrayLengths) {
  expect_corrupt(edited("scores", {"tokenizer.ggml.scores"},
                        [](gguf::Writer& w) { w.set_f32s("tokenizer.ggml.scores", std::vector<float>(511, 0.f)); }),
                 "tokenizer.ggml.scores");
  expect_corrupt(edited("types", {"tokenizer.ggml.token_type"},
                        [](gguf::Writer& w) { w.set_i32s("tokenizer.ggml.token_type", std::vector<int32_t>(513, 1)); }),
                 "tokenizer.ggml.token_type");
}

TEST_F(HostileSpm, MissingOrMistypedTokens) {
  expect_corrupt(edited("no_tokens", {"tokenizer.ggml.tokens"}, [](gguf::Writer&) {}), "tokenizer.ggml.tokens");
  expect_corrupt(edited("int_tokens", {"tokenizer.ggml.tokens"},
                        [](gguf::Writer& w) { w.set_i32s("tokenizer.ggml.tokens", std::vector<int32_t>(512, 3)); }),
                 "tokenizer.ggml.tokens");
  expect_corrupt(edited("empty_tokens", {"tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type"},
                        [](gguf::Writer& w) { w.set_strings("tokenizer.ggml.tokens", {}); }),
                 "tokenizer.ggml.tokens");
  expect_corrupt(edited("scalar_tokens", {"tokenizer.ggml.tokens"},
                        [](gguf::Writer& w) { w.set_string("tokenizer.ggml.tokens", "a"); }),
                 "tokenizer.ggml.tokens");
}

TEST_F(HostileSpm, BadValues) {
  expect_corrupt(edited("model", {"tokenizer.ggml.model"},
                        [](gguf::Writer& w) { w.set_string("tokenizer.ggml.model", "t5-ish"); }),
                 "tokenizer.ggml.model");
  expect_corrupt(edited("no_model", {"tokenizer.ggml.model"}, [](gguf::Writer&) {}), "tokenizer.ggml.model");
  expect_corrupt(edited("model_int", {"tokenizer.ggml.model"},
                        [](gguf::Writer& w) { w.set_u32("tokenizer.ggml.model", 1); }),
                 "tokenizer.ggml.model");
  std::vector<int32_t> types(512, 1);
  types[7] = 9;
  expect_corrupt(edited("type9", {"tokenizer.ggml.token_type"},
                        [&](gguf::Writer& w) { w.set_i32s("tokenizer.ggml.token_type", types); }),
                 "tokenizer.ggml.token_type[7]");
  // Token 300 is a normal piece; claiming it is a byte token needs <0xNN> text.
  types.assign(512, 1);
  types[300] = 6;
  expect_corrupt(edited("byte_text", {"tokenizer.ggml.token_type"},
                        [&](gguf::Writer& w) { w.set_i32s("tokenizer.ggml.token_type", types); }),
                 "token 300");
  std::vector<float> scores(512, 0.f);
  scores[5] = std::numeric_limits<float>::quiet_NaN();
  expect_corrupt(edited("nan", {"tokenizer.ggml.scores"},
                        [&](gguf::Writer& w) { w.set_f32s("tokenizer.ggml.scores", scores); }),
                 "tokenizer.ggml.scores[5]");
  expect_corrupt(edited("add_bos", {"tokenizer.ggml.add_bos_token"},
                        [](gguf::Writer& w) { w.set_string("tokenizer.ggml.add_bos_token", "yes"); }),
                 "tokenizer.ggml.add_bos_token");
}

// ---- a tiny byte-level BPE built by hand ------------------------------------------

// GPT-2's byte -> character table, written independently of the library: the
// printable bytes keep their code point, the rest take U+0100.. in order.
std::vector<std::string> byte_level_alphabet() {
  std::vector<std::string> out;
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    const int cp = keep ? b : next++;
    std::string s;
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
    out.push_back(s);
  }
  return out;
}

std::string write_tiny_bpe(const std::string& name, const std::vector<std::string>& extra_tokens,
                           const std::vector<std::string>& merges) {
  gguf::Writer w;
  std::vector<std::string> tokens = byte_level_alphabet();
  tokens.insert(tokens.end(), extra_tokens.begin(), extra_tokens.end());
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string("tokenizer.ggml.pre", "gpt-2");
  w.set_strings("tokenizer.ggml.tokens", tokens);
  w.set_i32s("tokenizer.ggml.token_type", std::vector<int32_t>(tokens.size(), 1));
  w.set_strings("tokenizer.ggml.merges", merges);
  const std::string path = temp_path(name + ".gguf");
  w.write(path);
  return path;
}

TEST(TinyBpe, LowestRankMergesFirst) {
  // Ids 0..255 are the bytes' characters (byte b is id b); then 256 "bc",
  // 257 "ab", 258 "abc", 259 "Ġa", 260 "Ġab" (Ġ is the space byte's character).
  const std::string path = write_tiny_bpe("tiny", {"bc", "ab", "abc", "Ġa", "Ġab"},
                                          {"b c", "a b", "a bc", "Ġ a", "Ġa b"});
  const auto tok = Tokenizer::from_gguf(gguf::File::open(path));
  EXPECT_EQ(tok->n_vocab(), 261);
  // "abc": "b c" (rank 0) beats "a b" (rank 1); then "a bc" (rank 2) gives "abc".
  EXPECT_EQ(tok->encode("abc", false), (std::vector<int32_t>{258}));
  EXPECT_EQ(tok->encode("ab", false), (std::vector<int32_t>{257}));
  // " abc" is one pre-token: Ġ,a,b,c -> Ġ,a,bc -> Ġ,abc; "Ġ a" (rank 3) lost
  // its chance and there is no "Ġ abc".
  EXPECT_EQ(tok->encode(" abc", false), (std::vector<int32_t>{' ', 258}));
  // " ab": "a b" (rank 1) before "Ġ a" (rank 3): Ġ,ab; "Ġa b" never applies.
  EXPECT_EQ(tok->encode(" ab", false), (std::vector<int32_t>{' ', 257}));
  // " a": only "Ġ a".
  EXPECT_EQ(tok->encode(" a", false), (std::vector<int32_t>{259}));
  // No merge at all: one token per byte, split by the GPT-2 regex ("bb", "!").
  EXPECT_EQ(tok->encode("bb!", false), (std::vector<int32_t>{'b', 'b', '!'}));
  EXPECT_EQ(tok->encode("\xC3\xA9", false), (std::vector<int32_t>{0xC3, 0xA9}));
  EXPECT_EQ(tok->decode(tok->encode("a\nb\xC3\xA9 abc!", false)), "a\nb\xC3\xA9 abc!");
}

TEST(TinyBpe, BadMerges) {
  expect_corrupt(write_tiny_bpe("merge_unknown", {"ab"}, {"a b", "x yz"}), "tokenizer.ggml.merges[1]");
  expect_corrupt(write_tiny_bpe("merge_result", {}, {"a b"}), "tokenizer.ggml.merges[0]");
  expect_corrupt(write_tiny_bpe("merge_nospace", {"ab"}, {"ab"}), "tokenizer.ggml.merges[0]");
  expect_corrupt(write_tiny_bpe("merge_trailing", {"ab"}, {"ab "}), "tokenizer.ggml.merges[0]");
  // A gpt2 tokenizer without merges at all.
  gguf::Writer w;
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_strings("tokenizer.ggml.tokens", byte_level_alphabet());
  const std::string path = temp_path("no_merges.gguf");
  w.write(path);
  expect_corrupt(path, "tokenizer.ggml.merges");
}

// ---- tokenizer.json ------------------------------------------------------------------

// The same kind of hand-built byte-level BPE, as a tokenizer.json with a Split
// regex, string-form merges and added tokens.
nlohmann::json tiny_json() {
  nlohmann::json vocab = nlohmann::json::object();
  const std::vector<std::string> alphabet = byte_level_alphabet();
  for (int b = 0; b < 256; ++b) vocab[alphabet[b]] = b;
  vocab["ab"] = 256;
  vocab["Ġab"] = 257;
  const nlohmann::json j = {
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"a b", "Ġ ab"}}}},
      {"added_tokens",
       {{{"id", 258}, {"content", "<|sp|>"}, {"special", true}},
        {{"id", 259}, {"content", "<u>"}, {"special", false}}}},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"}, {"pattern", {{"Regex", R"( ?\p{L}+|\p{N})"}}}, {"behavior", "Isolated"}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}}},
  };
  return j;
}

std::string write_json_body(const std::string& dir_name, const std::string& body, const nlohmann::json* config) {
  const std::string dir = temp_path(dir_name);
  std::filesystem::create_directories(dir);
  testing::write_file(dir + "/tokenizer.json", body);
  if (config != nullptr) testing::write_file(dir + "/tokenizer_config.json", config->dump());
  return dir + "/tokenizer.json";
}

std::string write_tiny_json(const std::string& dir_name, const nlohmann::json* config) {
  return write_json_body(dir_name, tiny_json().dump(), config);
}

TEST(TinyJson, SplitMergesAndAddedTokens) {
  const auto tok = Tokenizer::from_hf_json(write_tiny_json("tiny_json", nullptr));
  EXPECT_EQ(tok->n_vocab(), 260);
  EXPECT_EQ(tok->bos_id(), -1);
  // " ab": Ġ,a,b -> Ġ,ab (rank 0) -> Ġab (rank 1).
  EXPECT_EQ(tok->encode(" ab", true), (std::vector<int32_t>{257}));
  // The non-special added token always splits the text.
  EXPECT_EQ(tok->encode("ab<u>ab", false), (std::vector<int32_t>{256, 259, 256}));
  // The special one only when parsing special tokens; otherwise its bytes,
  // cut by the Split regex into "<|", "sp", "|>".
  EXPECT_EQ(tok->encode("<|sp|>", false, true), (std::vector<int32_t>{258}));
  EXPECT_EQ(tok->encode("<|sp|>", false, false), (std::vector<int32_t>{'<', '|', 's', 'p', '|', '>'}));
  // \p{N} isolates each digit.
  EXPECT_EQ(tok->encode("12", false), (std::vector<int32_t>{'1', '2'}));
  EXPECT_EQ(tok->decode(tok->encode("x <u> ab\n", false)), "x <u> ab\n");
  EXPECT_EQ(tok->token_to_piece(258), "");
  EXPECT_EQ(tok->token_to_piece(258, true), "<|sp|>");
  EXPECT_EQ(tok->token_to_piece(259), "<u>");
}

TEST(TinyJson, TokenizerConfigGivesBosAndEos) {
  const nlohmann::json config = {{"bos_token", {{"content", "<|sp|>"}}}, {"eos_token", "<u>"},
                                 {"add_bos_token", true}, {"add_eos_token", nullptr}};
  const auto tok = Tokenizer::from_hf_json(write_tiny_json("tiny_json_config", &config));
  EXPECT_EQ(tok->bos_id(), 258);
  EXPECT_EQ(tok->eos_id(), 259);
  EXPECT_TRUE(tok->is_eog(259));
  EXPECT_TRUE(tok->add_bos());
  EXPECT_FALSE(tok->add_eos());
  EXPECT_EQ(tok->encode("ab", true), (std::vector<int32_t>{258, 256}));
  EXPECT_EQ(tok->encode("ab", false), (std::vector<int32_t>{256}));

  const nlohmann::json bad = {{"eos_token", "<missing>"}};
  try {
    Tokenizer::from_hf_json(write_tiny_json("tiny_json_bad_config", &bad));
    ADD_FAILURE() << "loaded a config whose eos_token is not in the vocabulary";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("eos_token"), std::string::npos) << e.what();
  }
}

void expect_json_corrupt(const std::string& body, const std::string& needle) {
  static int n = 0;
  const std::string dir = temp_path("json" + std::to_string(n++));
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/tokenizer.json";
  testing::write_file(path, body);
  try {
    Tokenizer::from_hf_json(path);
    ADD_FAILURE() << "loaded " << body;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kCorruptFile) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(TinyJson, UnicodeNormalizers) {
  // NFC, alone or in a Sequence: a decomposed é tokenizes as the composed one
  // (Qwen 3 declares NFC); NFKD the other way round.
  for (const nlohmann::json& normalizer :
       {nlohmann::json{{"type", "NFC"}},
        nlohmann::json{{"type", "Sequence"}, {"normalizers", {{{"type", "NFD"}}, {{"type", "NFC"}}}}}}) {
    nlohmann::json j = tiny_json();
    j["normalizer"] = normalizer;
    const auto tok = Tokenizer::from_hf_json(write_json_body("tiny_json_nfc", j.dump(), nullptr));
    EXPECT_EQ(tok->encode("cafe\u0301", false), tok->encode("caf\u00E9", false)) << normalizer.dump();
    EXPECT_EQ(tok->encode("caf\u00E9", false), (std::vector<int32_t>{'c', 'a', 'f', 0xC3, 0xA9}));
    // Each stretch between added tokens is normalized on its own.
    EXPECT_EQ(tok->encode("e<u>\u0301", false), (std::vector<int32_t>{'e', 259, 0xCC, 0x81}));
  }
  nlohmann::json j = tiny_json();
  j["normalizer"] = {{"type", "NFKD"}};
  auto tok = Tokenizer::from_hf_json(write_json_body("tiny_json_nfkd", j.dump(), nullptr));
  EXPECT_EQ(tok->encode("\u00E9\uFB01", false), (std::vector<int32_t>{'e', 0xCC, 0x81, 'f', 'i'}));
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}, {{"type", "Lowercase"}}}}};
  expect_json_corrupt(j.dump(), "Lowercase");
}

// Truncations at many lengths and thousands of single-byte mutations of a small valid
// tokenizer.json (string and pair merges, escapes, a surrogate pair, an NFC
// normalizer, a post-processor) either load, and then tokenize, or throw
// tessera::Error: never a crash or another exception.
TEST(HostileJson, TruncationsAndMutationsLoadOrThrowError) {
  nlohmann::json j = tiny_json();
  j["model"]["merges"] = {"a b", {"\u0120", "ab"}};
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}}}};
  j["post_processor"] = {{"type", "TemplateProcessing"},
                         {"single", {{{"SpecialToken", {{"id", "<|sp|>"}, {"type_id", 0}}}},
                                     {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}}};
  j["decoder"] = {{"type", "ByteLevel"}};
  std::string base = j.dump();
  // Escapes the scanner decodes by hand, in a vocabulary key.
  const std::string vocab_key = "\"model\":{";
  const size_t at = base.find(vocab_key);
  ASSERT_NE(at, std::string::npos);
  base.insert(base.find("\"vocab\":{", at) + 9, R"("x\u00e9\ud83d\ude00\n\"\\\/\t": 260, )");
  ASSERT_NO_THROW(Tokenizer::from_hf_json(write_json_body("hostile_base", base, nullptr))) << base;

  const std::string dir = temp_path("hostile_json");
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/tokenizer.json";
  int loaded = 0, refused = 0;
  const auto attempt = [&](const std::string& body, const std::string& what) {
    testing::write_file(path, body);
    try {
      const auto tok = Tokenizer::from_hf_json(path);
      const std::vector<int32_t> ids = tok->encode("x cafe\u0301 ab <|sp|><u>\xF0\x9F\x98\x80 12", true, true);
      (void)tok->decode(ids);
      ++loaded;
    } catch (const Error&) {
      ++refused;
    } catch (const std::exception& e) {
      ADD_FAILURE() << what << ": not a tessera::Error: " << e.what();
    }
  };
  // Every other length (about 1 800) and 2 000 mutations: ~1 s of CPU.
  for (size_t len = 0; len < base.size(); len += 2) attempt(base.substr(0, len), "truncated to " + std::to_string(len));
  const std::string bytes = "\"\\{}[],:0-9eu \x01\xFF\xC3\x80";
  std::mt19937 rng(14);
  for (int i = 0; i < 2000; ++i) {
    std::string body = base;
    const size_t pos = rng() % body.size();
    body[pos] = i % 2 == 0 ? bytes[rng() % bytes.size()] : static_cast<char>(rng() % 256);
    attempt(body, "byte " + std::to_string(pos) + " mutated");
  }
  // Both outcomes happen (the mutations are not all rejected up front).
  EXPECT_GT(loaded, 100);
  EXPECT_GT(refused, 1000);
  std::printf("loaded %d, refused %d\n", loaded, refused);
}

TEST(HostileJson, ErrorsNameTheProblem) {
  const std::string pre = R"("pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true})";
  expect_json_corrupt("{", "not valid JSON");
  expect_json_corrupt("[]", "model");
  expect_json_corrupt(R"({"model": {"type": "Unigram", "vocab": []}})", "Unigram");
  expect_json_corrupt(R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["a b"]}, )" + pre + "}",
                      "model.merges[0]");
  expect_json_corrupt(R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": [["a"]]}, )" +
                          pre + "}",
                      "model.merges[0]");
  expect_json_corrupt(R"({"model": {"type": "BPE", "vocab": {"a": "zero"}, "merges": []}, )" + pre + "}",
                      "model.vocab");
  expect_json_corrupt(R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 0}, "merges": []}, )" + pre + "}",
                      "twice");
  expect_json_corrupt(R"({"model": {"type": "BPE", "vocab": {"a": 99999999999}, "merges": []}, )" + pre + "}",
                      "out of range");
  expect_json_corrupt(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
                          "pre_tokenizer": {"type": "Metaspace"}})",
                      "Metaspace");
  expect_json_corrupt(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
                          "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(["}, "behavior": "Isolated"}})",
                      "does not compile");
  expect_json_corrupt(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": 5}, )" + pre + "}",
                      "model.merges");
  expect_json_corrupt(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "added_tokens": [{"id": "x"}], )" +
                          pre + "}",
                      "added_tokens");
}

}  // namespace
}  // namespace tessera
