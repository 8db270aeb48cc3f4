// Tokenizers against llama.cpp's tokenizer test vectors (ids produced by the
// models' own Hugging Face tokenizers), round trips, and the stories260K
// golden text.
#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <time.h>

#include <array>
#include <cstdio>
#include <functional>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "tokenizer/normalize.h"
#include "tokenizer/unicode.h"
#include "util/test_util.h"

namespace tessera {
namespace {

using testing::read_file;
using testing::shared_path;

struct VocabCase {
  std::string text;
  std::vector<int32_t> ids;
};

// The .inp file holds the strings, each followed by "\n__ggml_vocab_test__\n";
// the .out file one line of space-separated ids per string.
std::vector<VocabCase> load_cases(const std::string& base) {
  const std::string inp = read_file(shared_path("models/vocab/" + base + ".inp"));
  const std::string out = read_file(shared_path("models/vocab/" + base + ".out"));
  EXPECT_FALSE(inp.empty()) << base;
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<VocabCase> cases;
  for (size_t pos = 0; pos < inp.size();) {
    const size_t end = inp.find(sep, pos);
    EXPECT_NE(end, std::string::npos) << base << ": text after the last separator";
    if (end == std::string::npos) break;
    cases.push_back(VocabCase{inp.substr(pos, end - pos), {}});
    pos = end + sep.size();
  }
  std::istringstream lines(out);
  std::string line;
  size_t i = 0;
  for (; std::getline(lines, line); ++i) {
    if (i >= cases.size()) break;
    std::istringstream ids(line);
    int32_t id;
    while (ids >> id) cases[i].ids.push_back(id);
  }
  EXPECT_EQ(i, cases.size()) << base << ": .out lines vs .inp strings";
  return cases;
}

// Loaded once per process and shared by the tests (read-only, so safe).
std::shared_ptr<const Tokenizer> cached(const std::string& key,
                                        const std::function<std::unique_ptr<Tokenizer>()>& load) {
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<const Tokenizer>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = cache[key];
  if (!slot) slot = load();
  return slot;
}

std::shared_ptr<const Tokenizer> load_vocab(const std::string& name) {
  const std::string rel = "models/vocab/ggml-vocab-" + name + ".gguf";
  if (!testing::shared_exists(rel)) return nullptr;
  return cached(rel, [&] { return Tokenizer::from_gguf(gguf::File::open(shared_path(rel))); });
}

std::shared_ptr<const Tokenizer> load_qwen3() {
  const std::string rel = "models/tokenizers/qwen3/tokenizer.json";
  return cached(rel, [&] { return Tokenizer::from_hf_json(shared_path(rel)); });
}

std::string ids_string(const std::vector<int32_t>& ids) {
  std::string s;
  for (const int32_t id : ids) {
    s += ' ';
    s += std::to_string(id);
  }
  return s;
}

void expect_cases(const Tokenizer& tok, const std::string& out_base, bool lossless) {
  const std::vector<VocabCase> cases = load_cases(out_base);
  ASSERT_EQ(cases.size(), 46u) << out_base;
  for (const VocabCase& c : cases) {
    const std::vector<int32_t> ids = tok.encode(c.text, /*add_special=*/false);
    EXPECT_EQ(ids_string(ids), ids_string(c.ids)) << out_base << " on " << nlohmann::json(c.text).dump();
    if (lossless) {
      EXPECT_EQ(tok.decode(ids), c.text) << out_base << " round trip";
    }
  }
}

// ---- llama.cpp's test-tokenizer-0 vectors --------------------------------------

class VocabFile : public ::testing::TestWithParam<std::string> {};

TEST_P(VocabFile, MatchesReferenceIds) {
  const std::string name = GetParam();
  TESSERA_REQUIRE_SHARED("models/vocab/ggml-vocab-" + name + ".gguf");
  const auto tok = load_vocab(name);
  ASSERT_TRUE(tok);
  // WordPiece lowercases, strips accents and drops whitespace: not lossless.
  const bool lossless = tok->kind() != "wpm";
  expect_cases(*tok, "ggml-vocab-" + name + ".gguf", lossless);
}

INSTANTIATE_TEST_SUITE_P(Vocabs, VocabFile,
                         ::testing::Values("llama-spm", "phi-3", "bert-bge", "deepseek-coder", "deepseek-llm",
                                           "falcon", "gpt-2", "mpt", "refact", "starcoder"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n) if (c == '-') c = '_';
                           return n;
                         });

TEST(TokenizerJson, Qwen3MatchesQwen2AndDeepseekR1QwenIds) {
  TESSERA_REQUIRE_SHARED("models/tokenizers/qwen3/tokenizer.json");
  const auto tok = load_qwen3();
  EXPECT_EQ(tok->kind(), "bpe");
  expect_cases(*tok, "ggml-vocab-qwen2.gguf", true);
  // DeepSeek-R1-Distill-Qwen uses Qwen2's vocabulary and pre-tokenizer.
  expect_cases(*tok, "ggml-vocab-deepseek-r1-qwen.gguf", true);
}

// The vocabularies without test vectors still load and round-trip.
TEST(VocabFile, BaichuanAndGptNeoxRoundTrip) {
  const std::vector<VocabCase> cases = load_cases("ggml-vocab-llama-spm.gguf");
  for (const std::string name : {"baichuan", "gpt-neox"}) {
    TESSERA_REQUIRE_SHARED("models/vocab/ggml-vocab-" + name + ".gguf");
    const auto tok = load_vocab(name);
    for (const VocabCase& c : cases) {
      const std::vector<int32_t> ids = tok->encode(c.text, false);
      EXPECT_EQ(tok->decode(ids), c.text) << name << " on " << nlohmann::json(c.text).dump();
    }
  }
}

// ---- stories260K (the project's golden model) --------------------------------------

struct Golden {
  std::vector<int32_t> ids;
  std::string text;
  std::string check_text;
  std::vector<int32_t> check_ids;
};

Golden load_golden() {
  const auto j = nlohmann::json::parse(
      read_file(shared_path("models/stories260K/stories260K_greedy256_expected.json")));
  Golden g;
  g.ids = j.at("generated_ids").get<std::vector<int32_t>>();
  g.text = j.at("text").get<std::string>();
  g.check_text = j.at("llamacpp_tokenize_check").at("text").get<std::string>();
  g.check_ids = j.at("llamacpp_tokenize_check").at("ids_no_bos").get<std::vector<int32_t>>();
  return g;
}

std::shared_ptr<const Tokenizer> load_stories() {
  return cached("stories260K", [] { return Tokenizer::from_gguf(gguf::File::open(testing::stories260k_path())); });
}

TEST(Stories260K, EncodesLikeLlamaCpp) {
  TESSERA_REQUIRE_SHARED("models/stories260K/stories260K_greedy256_expected.json");
  const auto tok = load_stories();
  const Golden g = load_golden();
  EXPECT_EQ(tok->n_vocab(), 512);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_TRUE(tok->add_bos());
  EXPECT_TRUE(tok->is_eog(2));
  EXPECT_FALSE(tok->is_eog(1));
  EXPECT_EQ(tok->encode(g.check_text, false), g.check_ids);
  // "Once upon a time" with BOS: BOS then the first four ids of the same text.
  std::vector<int32_t> expected{1};
  expected.insert(expected.end(), g.check_ids.begin(), g.check_ids.begin() + 4);
  EXPECT_EQ(tok->encode("Once upon a time", true), expected);
}

TEST(Stories260K, GoldenIdsDecodeToGoldenText) {
  TESSERA_REQUIRE_SHARED("models/stories260K/stories260K_greedy256_expected.json");
  const auto tok = load_stories();
  const Golden g = load_golden();
  ASSERT_EQ(g.ids.size(), 256u);
  EXPECT_EQ(tok->decode(g.ids), g.text);
  // After BOS the leading space is stripped the same way.
  std::vector<int32_t> with_bos{1};
  with_bos.insert(with_bos.end(), g.ids.begin(), g.ids.end());
  EXPECT_EQ(tok->decode(with_bos), g.text);
  // Re-encoding the text gives ids that decode to it again.
  const std::vector<int32_t> again = tok->encode(g.text, false);
  EXPECT_EQ(tok->decode(again), g.text);

  // Streaming: one id at a time gives the same text.
  StreamingDecoder stream(*tok);
  std::string streamed;
  for (const int32_t id : g.ids) streamed += stream.push(id);
  streamed += stream.flush();
  EXPECT_EQ(streamed, g.text);
}

// ---- streaming over byte-fallback sequences ----------------------------------------

TEST(StreamingDecoder, HoldsPartialCharactersUntilComplete) {
  TESSERA_REQUIRE_SHARED("models/vocab/ggml-vocab-llama-spm.gguf");
  const auto tok = load_vocab("llama-spm");
  const auto byte_id = [&](const char* text) {
    const auto id = tok->find_token(text);
    EXPECT_TRUE(id.has_value()) << text;
    return id.value_or(0);
  };
  // U+2019 RIGHT SINGLE QUOTATION MARK is E2 80 99.
  const std::vector<int32_t> ids = {byte_id("<0xE2>"), byte_id("<0x80>"), byte_id("<0x99>")};
  StreamingDecoder d(*tok);
  EXPECT_EQ(d.push(ids[0]), "");
  EXPECT_EQ(d.push(ids[1]), "");
  EXPECT_EQ(d.push(ids[2]), "\xE2\x80\x99");
  EXPECT_EQ(d.flush(), "");
  EXPECT_EQ(tok->decode(ids), "\xE2\x80\x99");

  // An incomplete sequence at the end comes out of flush() as U+FFFD.
  StreamingDecoder cut(*tok);
  EXPECT_EQ(cut.push(ids[0]), "");
  EXPECT_EQ(cut.push(ids[1]), "");
  EXPECT_EQ(cut.flush(), "\xEF\xBF\xBD");
  // A sequence broken by another token: U+FFFD for the broken part, then the rest.
  const int32_t a = byte_id("<0x41>");
  StreamingDecoder broken(*tok);
  EXPECT_EQ(broken.push(ids[0]), "");
  EXPECT_EQ(broken.push(a), "\xEF\xBF\xBD" "A");
  EXPECT_EQ(tok->decode(std::vector<int32_t>{ids[0], a}), "\xEF\xBF\xBD" "A");
}

TEST(StreamingDecoder, MatchesDecodeOnEveryReferenceString) {
  for (const std::string name : {"llama-spm", "gpt-2", "deepseek-llm"}) {
    TESSERA_REQUIRE_SHARED("models/vocab/ggml-vocab-" + name + ".gguf");
    const auto tok = load_vocab(name);
    for (const VocabCase& c : load_cases("ggml-vocab-" + name + ".gguf")) {
      for (const bool render : {false, true}) {
        StreamingDecoder d(*tok, render);
        std::string s;
        for (const int32_t id : c.ids) {
          const std::string part = d.push(id);
          EXPECT_TRUE(tok::is_valid_utf8(part)) << "a chunk that is not whole UTF-8";
          s += part;
        }
        s += d.flush();
        EXPECT_EQ(s, tok->decode(c.ids, render)) << name << " on " << nlohmann::json(c.text).dump();
      }
    }
  }
}

// A completion's text is decode(prompt + output) minus decode(prompt): after
// skip(prompt), pushes give exactly that, whatever the continuation starts
// with (a word, punctuation, a newline, a multi-byte character) and wherever
// the prompt ends, for SentencePiece and byte-level BPE.
TEST(StreamingDecoder, ContinuationAfterSkipIsFullTextMinusPromptText) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"The little dog", " was a little girl"},
      {"The little dog", ", said Tom."},
      {"The little dog", "\nThe end"},
      {"The little dog", "\u00e9t\u00e9 caf\u00e9 \u65e5\u672c\u8a9e \U0001F600!"},
      {"Caf\u00e9", "\u00e9\u00e9 ok"},
  };
  for (const std::string name : {"llama-spm", "gpt-2"}) {
    TESSERA_REQUIRE_SHARED("models/vocab/ggml-vocab-" + name + ".gguf");
    const auto tok = load_vocab(name);
    int checked = 0;
    for (const auto& [prompt, cont] : cases) {
      const std::vector<int32_t> ids = tok->encode(prompt + cont, /*add_special=*/true);
      const std::string full = tok->decode(ids);
      // Every split of the ids that ends the prompt on a character boundary.
      for (size_t k = 0; k <= ids.size(); ++k) {
        const std::span<const int32_t> head(ids.data(), k);
        const std::string head_text = tok->decode(head);
        if (full.compare(0, head_text.size(), head_text) != 0) continue;  // split inside a character
        StreamingDecoder d(*tok);
        d.skip(head);
        std::string text;
        for (size_t i = k; i < ids.size(); ++i) text += d.push(ids[i]);
        text += d.flush();
        EXPECT_EQ(head_text + text, full) << name << " split at " << k << " of " << nlohmann::json(full).dump();
        ++checked;
      }
      // The split at the prompt's own end exists and gives the continuation
      // itself, leading space included.
      const std::vector<int32_t> p_ids = tok->encode(prompt, /*add_special=*/true);
      if (std::equal(p_ids.begin(), p_ids.end(), ids.begin())) {
        StreamingDecoder d(*tok);
        d.skip(p_ids);
        std::string text;
        for (size_t i = p_ids.size(); i < ids.size(); ++i) text += d.push(ids[i]);
        EXPECT_EQ(text + d.flush(), cont) << name;
      }
    }
    EXPECT_GT(checked, 40) << name;
  }
  // Where the prompt's tokens equal the separate encoding, the first case is
  // the example: " was", not "was".
  const auto spm = load_vocab("llama-spm");
  const std::vector<int32_t> p = spm->encode("The little dog", true);
  const std::vector<int32_t> w = spm->encode("The little dog was", true);
  ASSERT_EQ(w.size(), p.size() + 1);
  StreamingDecoder d(*spm);
  d.skip(p);
  EXPECT_EQ(d.push(w.back()), " was");
  // A copy continues from the same state (parallel samples fork it).
  StreamingDecoder fork = d;
  EXPECT_EQ(fork.push(w.back()), d.push(w.back()));
}

// ---- special tokens --------------------------------------------------------------

TEST(SpecialTokens, ControlTokensOnlyWhenParsingSpecial) {
  TESSERA_REQUIRE_SHARED("models/tokenizers/qwen3/tokenizer.json");
  const auto tok = load_qwen3();
  const int32_t im_start = tok->find_token("<|im_start|>").value();
  const int32_t im_end = tok->find_token("<|im_end|>").value();
  EXPECT_TRUE(tok->is_control(im_start));
  const std::string chat = "<|im_start|>user\nHello<|im_end|>";
  const std::vector<int32_t> parsed = tok->encode(chat, false, true);
  ASSERT_GE(parsed.size(), 3u);
  EXPECT_EQ(parsed.front(), im_start);
  EXPECT_EQ(parsed.back(), im_end);
  std::vector<int32_t> inner(parsed.begin() + 1, parsed.end() - 1);
  EXPECT_EQ(inner, tok->encode("user\nHello", false));
  const std::vector<int32_t> plain = tok->encode(chat, false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), im_start), 0);
  EXPECT_EQ(tok->decode(plain), chat);  // as text, it round-trips
  EXPECT_EQ(tok->decode(parsed), "user\nHello");
  EXPECT_EQ(tok->decode(parsed, true), chat);
  // End of generation: Qwen's end of turn and end of text.
  EXPECT_TRUE(tok->is_eog(im_end));
  EXPECT_TRUE(tok->is_eog(tok->find_token("<|endoftext|>").value()));
  EXPECT_FALSE(tok->is_eog(im_start));
  EXPECT_EQ(tok->eos_id(), im_end);  // tokenizer_config.json's eos_token
  EXPECT_EQ(tok->eot_id(), im_end);
  EXPECT_EQ(tok->bos_id(), -1);
  EXPECT_FALSE(tok->add_bos());
}

TEST(SpecialTokens, SpmBosTextAndSpacePrefixAfterSpecial) {
  TESSERA_REQUIRE_SHARED("models/vocab/ggml-vocab-llama-spm.gguf");
  const auto tok = load_vocab("llama-spm");
  std::vector<int32_t> expected{1};
  const std::vector<int32_t> hello = tok->encode("Hello", false);
  expected.insert(expected.end(), hello.begin(), hello.end());
  EXPECT_EQ(tok->encode("<s>Hello", false, true), expected);
  EXPECT_NE(tok->encode("<s>Hello", false, false), expected);
  EXPECT_EQ(tok->decode(tok->encode("<s>Hello", false, true), true), "<s>Hello");
  EXPECT_EQ(tok->token_to_piece(1), "");
  EXPECT_EQ(tok->token_to_piece(1, true), "<s>");
  EXPECT_EQ(tok->token_to_piece(tok->find_token("<0x0A>").value()), "\n");
  EXPECT_EQ(tok->token_to_piece(15043), " Hello");
  EXPECT_THROW(tok->token_to_piece(tok->n_vocab()), Error);
  EXPECT_THROW(tok->token_to_piece(-1), Error);
}

TEST(SpecialTokens, UserDefinedTokensAlwaysMatch) {
  // deepseek-coder's added token "ü" and mpt's whitespace runs are user-defined.
  TESSERA_REQUIRE_SHARED("models/vocab/ggml-vocab-mpt.gguf");
  const auto tok = load_vocab("mpt");
  const int32_t four_spaces = tok->find_token("    ").value();
  const std::vector<int32_t> ids = tok->encode("a    b", false);
  EXPECT_NE(std::find(ids.begin(), ids.end(), four_spaces), ids.end());
  EXPECT_EQ(tok->decode(ids), "a    b");
}

// ---- WordPiece -------------------------------------------------------------------

TEST(WordPiece, NormalisesAndFramesWithClsSep) {
  TESSERA_REQUIRE_SHARED("models/vocab/ggml-vocab-bert-bge.gguf");
  const auto tok = load_vocab("bert-bge");
  const std::vector<int32_t> ids = tok->encode("Hello, World!", true);
  ASSERT_GE(ids.size(), 2u);
  EXPECT_EQ(ids.front(), tok->find_token("[CLS]").value());
  EXPECT_EQ(ids.back(), tok->find_token("[SEP]").value());
  // Lossy: lowercased, and punctuation became words of its own.
  EXPECT_EQ(tok->decode(ids), "hello , world !");
  EXPECT_EQ(tok->decode(tok->encode("the cat sat", false)), "the cat sat");
}

// ---- concurrency and speed ------------------------------------------------------

std::string long_text(size_t bytes) {
  std::string t = read_file(shared_path("data/tinystories_val_prefix.txt"));
  EXPECT_GE(t.size(), 1000u);
  while (t.size() < bytes) t += t;
  t.resize(bytes);
  // Cut at a character boundary.
  while (!t.empty() && (static_cast<uint8_t>(t.back()) & 0xC0) == 0x80) t.pop_back();
  if (!t.empty() && static_cast<uint8_t>(t.back()) >= 0xC0) t.pop_back();
  return t;
}

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9;
}

TEST(TokenizerSpeed, LongTextRoundTripsAndReportsThroughput) {
  TESSERA_REQUIRE_SHARED("data/tinystories_val_prefix.txt");
  const std::string text = long_text(100 * 1024);
  struct Named {
    std::string name;
    std::shared_ptr<const Tokenizer> tok;
  };
  std::vector<Named> toks;
  toks.push_back({"spm llama-spm", load_vocab("llama-spm")});
  toks.push_back({"bpe gpt-2", load_vocab("gpt-2")});
  for (const Named& n : toks) {
    ASSERT_TRUE(n.tok) << n.name;
    // This thread's CPU time: the machine may be busy with other work.
    const double t0 = thread_cpu_seconds();
    const std::vector<int32_t> ids = n.tok->encode(text, false);
    const double s = thread_cpu_seconds() - t0;
    EXPECT_EQ(n.tok->decode(ids), text) << n.name;
    std::printf("[ speed    ] %-16s %zu bytes -> %zu tokens in %.2f ms CPU: %.2f M tokens/s\n", n.name.c_str(),
                text.size(), ids.size(), s * 1e3, ids.size() / s / 1e6);
  }
}

TEST(TokenizerThreads, ConcurrentEncodesAgree) {
  TESSERA_REQUIRE_SHARED("data/tinystories_val_prefix.txt");
  const auto tok = load_vocab("deepseek-llm");
  const std::string text = long_text(16 * 1024);
  const std::vector<int32_t> expected = tok->encode(text, true);
  std::vector<std::vector<int32_t>> got(4);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < got.size(); ++i) {
    threads.emplace_back([&, i] {
      for (int rep = 0; rep < 3; ++rep) got[i] = tok->encode(text, true);
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& g : got) EXPECT_EQ(g, expected);
}

// ---- Unicode normalization ----------------------------------------------------------

std::string utf8(std::u32string_view cps) {
  std::string out;
  for (const char32_t c : cps) tok::append_utf8(out, c);
  return out;
}

std::string nfc(std::string_view s) { return tok::normalize(s, tok::NormalForm::kNfc); }
std::string nfd(std::string_view s) { return tok::normalize(s, tok::NormalForm::kNfd); }
std::string nfkc(std::string_view s) { return tok::normalize(s, tok::NormalForm::kNfkc); }
std::string nfkd(std::string_view s) { return tok::normalize(s, tok::NormalForm::kNfkd); }

// Unicode's own conformance data (a subset of NormalizationTest-15.0.0.txt,
// the version of the tables): each line is c1;c2;c3;c4;c5 with
// c2 = NFC(c1) = NFC(c2) = NFC(c3), c4 = NFC(c4) = NFC(c5),
// c3 = NFD(c1) = NFD(c2) = NFD(c3), c5 = NFD(c4) = NFD(c5),
// c4 = NFKC(c1..c5), c5 = NFKD(c1..c5).
std::vector<std::array<std::string, 5>> normalization_test_lines() {
  std::ifstream in(std::string(TESSERA_SOURCE_DIR) + "/tests/tokenizers/NormalizationTest-15.0.0-subset.txt");
  EXPECT_TRUE(in.good());
  std::vector<std::array<std::string, 5>> lines;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#' || line[0] == '@') continue;
    std::array<std::string, 5> cols;
    std::istringstream fields(line);
    std::string field;
    for (auto& col : cols) {
      std::getline(fields, field, ';');
      std::istringstream hex(field);
      uint32_t cp;
      while (hex >> std::hex >> cp) tok::append_utf8(col, cp);
    }
    lines.push_back(std::move(cols));
  }
  return lines;
}

TEST(UnicodeNormalization, UnicodeConformanceSubset) {
  const auto lines = normalization_test_lines();
  ASSERT_GT(lines.size(), 1500u);
  int failures = 0;
  for (const auto& c : lines) {
    const std::string& c1 = c[0];
    const std::string& c2 = c[1];
    const std::string& c3 = c[2];
    const std::string& c4 = c[3];
    const std::string& c5 = c[4];
    const bool ok = nfc(c1) == c2 && nfc(c2) == c2 && nfc(c3) == c2 && nfc(c4) == c4 && nfc(c5) == c4 &&
                    nfd(c1) == c3 && nfd(c2) == c3 && nfd(c3) == c3 && nfd(c4) == c5 && nfd(c5) == c5 &&
                    nfkc(c1) == c4 && nfkc(c2) == c4 && nfkc(c3) == c4 && nfkc(c4) == c4 && nfkc(c5) == c4 &&
                    nfkd(c1) == c5 && nfkd(c2) == c5 && nfkd(c3) == c5 && nfkd(c4) == c5 && nfkd(c5) == c5;
    if (!ok && ++failures <= 10) ADD_FAILURE() << "NormalizationTest line with source '" << c1 << "'";
  }
  EXPECT_EQ(failures, 0);
}

TEST(UnicodeNormalization, KnownPairs) {
  // Composition and decomposition of é.
  EXPECT_EQ(nfc("cafe\u0301"), "caf\u00E9");
  EXPECT_EQ(nfd("caf\u00E9"), "cafe\u0301");
  // Hangul, algorithmically: L+V -> LV, LV+T -> LVT, and back.
  EXPECT_EQ(nfc(utf8(U"\u1100\u1161")), "\uAC00");
  EXPECT_EQ(nfc(utf8(U"\u1112\u1161\u11AB")), "\uD55C");
  EXPECT_EQ(nfc(utf8(U"\uAC00\u11A8")), "\uAC01");
  EXPECT_EQ(nfd("\uD55C\uAD6D"), utf8(U"\u1112\u1161\u11AB\u1100\u116E\u11A8"));
  EXPECT_EQ(nfc(utf8(U"\uAC00\u11A7")), utf8(U"\uAC00\u11A7"));  // U+11A7 is no trailing consonant
  // Singletons never compose back: U+0343 -> U+0313, U+212B ANGSTROM SIGN -> Å, U+2126 OHM -> Ω.
  EXPECT_EQ(nfc("Z\u0343"), "Z\u0313");
  EXPECT_EQ(nfc("\u212B"), "\u00C5");
  EXPECT_EQ(nfd("\u212B"), "A\u030A");
  EXPECT_EQ(nfc("\u2126"), "\u03A9");
  // Composition exclusions stay decomposed: U+0958 DEVANAGARI QA, U+FB1D.
  EXPECT_EQ(nfc("\u0958"), "\u0915\u093C");
  EXPECT_EQ(nfc("\u0915\u093C"), "\u0915\u093C");
  EXPECT_EQ(nfc("\uFB1D"), "\u05D9\u05B4");
  // Non-starter decomposition: U+0344 -> U+0308 U+0301.
  EXPECT_EQ(nfc("\u0344"), "\u0308\u0301");
  // Canonical ordering: dot below (220) before acute (230), then a + dot
  // below composes (ạ) and the acute cannot join ạ (no such character).
  EXPECT_EQ(nfd("a\u0301\u0323"), "a\u0323\u0301");
  EXPECT_EQ(nfc("a\u0301\u0323"), "\u1EA1\u0301");
  // ệ: e + circumflex + dot below, in either order.
  EXPECT_EQ(nfc("e\u0323\u0302"), "\u1EC7");
  EXPECT_EQ(nfc("e\u0302\u0323"), "\u1EC7");
  // A mark of the same class blocks: the second acute stays.
  EXPECT_EQ(nfc("e\u0301\u0301"), "\u00E9\u0301");
  // Compatibility forms: only NFK*.
  EXPECT_EQ(nfc("\uFB01\u2460"), "\uFB01\u2460");
  EXPECT_EQ(nfkc("\uFB01\u2460\u00BD"), "fi1" "1\u20442");
  EXPECT_EQ(nfkd("\u1E9B\u0323"), "s\u0323\u0307");
  EXPECT_EQ(nfkc("\u1E9B\u0323"), "\u1E69");
  // ASCII and the empty string are unchanged.
  EXPECT_EQ(nfc(""), "");
  EXPECT_EQ(nfkd("plain ASCII\n"), "plain ASCII\n");
  EXPECT_EQ(tok::canonical_combining_class(0x0301), 230);
  EXPECT_EQ(tok::canonical_combining_class(0x0323), 220);
  EXPECT_EQ(tok::canonical_combining_class('a'), 0);
}

// The standard's properties on random strings of characters that interact:
// starters that compose, marks of several classes, jamo, singletons,
// exclusions, compatibility characters.
TEST(UnicodeNormalization, PropertiesOnRandomStrings) {
  const std::vector<char32_t> pool = {
      'a', 'e', 'A', 'Z', ' ', 0x00C5, 0x00E9, 0x0300, 0x0301, 0x0302, 0x0308, 0x0313, 0x031B, 0x0323, 0x0327,
      0x0343, 0x0344, 0x0345, 0x05B4, 0x05D9, 0x0915, 0x093C, 0x0958, 0x0CC6, 0x0CC2, 0x0CD5, 0x1100, 0x1112,
      0x1161, 0x116E, 0x11A7, 0x11A8, 0x11AB, 0xAC00, 0xD55C, 0x1E9B, 0x212B, 0x2126, 0xFB01, 0x2460, 0x3099,
      0x304B, 0x309A, 0x0F73, 0x0F71, 0x0F72, 0x1D15E, 0x1D165, 0x1D16E, 0x0F40, 0x0FB5, 0x03A9, 0x03B1, 0x0342};
  std::mt19937 rng(14);
  for (int iter = 0; iter < 3000; ++iter) {
    std::u32string cps(1 + rng() % 8, U' ');
    for (auto& c : cps) c = pool[rng() % pool.size()];
    const std::string x = utf8(cps);
    const std::string c = nfc(x), d = nfd(x), kc = nfkc(x), kd = nfkd(x);
    EXPECT_EQ(nfc(d), c) << x;
    EXPECT_EQ(nfd(c), d) << x;
    EXPECT_EQ(nfc(c), c) << x;
    EXPECT_EQ(nfd(d), d) << x;
    EXPECT_EQ(nfkc(kd), kc) << x;
    EXPECT_EQ(nfkd(kc), kd) << x;
    EXPECT_EQ(nfkc(kc), kc) << x;
    EXPECT_EQ(nfkc(c), kc) << x;
    EXPECT_EQ(nfkd(d), kd) << x;
    // NFD is canonically ordered: no mark follows one of a higher class.
    size_t pos = 0;
    uint8_t prev = 0;
    while (pos < d.size()) {
      const uint8_t cc = tok::canonical_combining_class(tok::next_code_point(d, pos));
      EXPECT_FALSE(cc != 0 && prev > cc) << x;
      prev = cc;
    }
  }
}

TEST(UnicodeNormalization, LongRunOfMarks) {
  // Zalgo-sized input: 100 000 marks on one letter stay linear enough.
  std::string x = "a";
  for (int i = 0; i < 50000; ++i) x += "\u0301\u0323";
  const std::string c = nfc(x);
  EXPECT_EQ(c.substr(0, 3), "\u1EA1");  // a + the first dot below
  EXPECT_EQ(nfd(c).size(), x.size());
}

// ---- odd input -----------------------------------------------------------------------

TEST(TokenizerInput, InvalidUtf8BecomesReplacementCharacter) {
  const auto tok = load_vocab("gpt-2");
  ASSERT_TRUE(tok);
  const std::vector<int32_t> ids = tok->encode("a\xFF" "b\xE2\x80", false);
  EXPECT_EQ(tok->decode(ids), "a\xEF\xBF\xBD" "b\xEF\xBF\xBD");
}

TEST(TokenizerInput, HugeWhitespaceRunAndLongWord) {
  for (const std::string name : {"gpt-2", "llama-spm", "deepseek-llm", "bert-bge"}) {
    const auto tok = load_vocab(name);
    ASSERT_TRUE(tok) << name;
    const std::string spaces(200000, ' ');
    const std::string text = "x" + spaces + "y\n\n" + std::string(50000, 'z') + std::string(30000, '\n');
    const std::vector<int32_t> ids = tok->encode(text, false);
    EXPECT_FALSE(ids.empty());
    if (tok->kind() != "wpm") {
      EXPECT_EQ(tok->decode(ids), text) << name;
    }
  }
}

}  // namespace
}  // namespace tessera
