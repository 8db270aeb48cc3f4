// Structured output's machinery (src/grammar/) against independent
// references: UTF-8 encodings checked code point by code point, regexes
// against std::regex (ECMAScript), integer ranges against arithmetic, and
// token masks against trying every token one by one.
#include <regex>

#include <gtest/gtest.h>

#include "core/error.h"
#include "grammar/codepoints.h"
#include "grammar/gbnf.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "grammar/regex.h"
#include "tokenizer/tokenizer.h"
#include "util/test_util.h"

namespace tessera::grammar {
namespace {

// A masker whose vocabulary is every single byte, plus EOS (id 256).
std::unique_ptr<TokenMasker> byte_masker() {
  std::vector<std::string> pieces;
  for (int b = 0; b < 256; ++b) pieces.emplace_back(1, static_cast<char>(b));
  pieces.emplace_back("");
  return std::make_unique<TokenMasker>(pieces, std::vector<int32_t>{256});
}

bool full_match(const std::shared_ptr<const Constraint>& c, TokenMasker& m, std::string_view text) {
  Matcher x(c, m);
  return x.accept_bytes(text) && x.can_end();
}

TEST(Codepoints, Utf8SequencesCoverExactlyTheRange) {
  std::mt19937 rng(1);
  for (int trial = 0; trial < 200; ++trial) {
    uint32_t lo = rng() % 0x110000, hi = rng() % 0x110000;
    if (trial % 3 == 0) hi = lo + rng() % 300;
    if (lo > hi) std::swap(lo, hi);
    hi = std::min(hi, kMaxCodepoint);
    const auto seqs = utf8_sequences(lo, hi);
    auto covered = [&](uint32_t c) {
      std::string u;
      append_utf8(c, u);
      for (const auto& s : seqs) {
        if (s.size() != u.size()) continue;
        bool ok = true;
        for (size_t i = 0; i < u.size(); ++i) ok = ok && s[i].first <= static_cast<uint8_t>(u[i]) && static_cast<uint8_t>(u[i]) <= s[i].second;
        if (ok) return true;
      }
      return false;
    };
    for (int k = 0; k < 200; ++k) {
      const uint32_t c = rng() % 0x110000;
      if (c >= 0xD800 && c <= 0xDFFF) continue;
      EXPECT_EQ(covered(c), c >= lo && c <= hi) << std::hex << c << " in [" << lo << ", " << hi << "]";
    }
    for (const uint32_t c : {lo, hi}) {
      if (c < 0xD800 || c > 0xDFFF) {
        EXPECT_TRUE(covered(c));
      }
    }
  }
}

TEST(Regex, AgreesWithStdRegexOnRandomStrings) {
  const std::vector<std::string> patterns = {
      "a*b", "(ab|a)*c?", "[a-c]{2,4}", "a(b|c)*d", "(a|b)+", "[^ab]c", "\\d+(\\.\\d+)?", "x{3}",
      "(?:ab){1,2}c", "a?b?c?", ".b", "[\\w-]+", "(a*)*b", "c{0,3}a", "[b-d]*[a-b]",
  };
  auto m = byte_masker();
  std::mt19937 rng(7);
  const std::string alphabet = "abcd1.-x ";
  for (const auto& p : patterns) {
    const auto c = compile_regex(p);
    const std::regex ref(p, std::regex::ECMAScript);
    for (int t = 0; t < 400; ++t) {
      std::string s;
      const int len = static_cast<int>(rng() % 7);
      for (int i = 0; i < len; ++i) s += alphabet[rng() % alphabet.size()];
      if (s.empty()) continue;  // the constraint admits no empty text unless the pattern does; tested below
      EXPECT_EQ(full_match(c, *m, s), std::regex_match(s, ref)) << "pattern " << p << " text '" << s << "'";
    }
  }
}

TEST(Regex, RefusesWhatIsNotRegular) {
  for (const char* p : {"(a)\\1", "(?=a)b", "a\\bc", "(ab", "a)", "[b-a]", "*a"}) {
    EXPECT_THROW(compile_regex(p), Error) << p;
  }
}

TEST(Regex, AnAutomatonTooLargeIsAnErrorBeforeItIsBuilt) {
  auto m = byte_masker();
  const auto c = compile_regex("(a{1000}){1000}");  // parses: the size shows when its lexeme is added
  EXPECT_THROW(Matcher(c, *m), Error);
  EXPECT_LT(m->lexer().memory_bytes(), size_t{64} << 20);
  EXPECT_TRUE(full_match(compile_regex("(ab){3}"), *m, "ababab"));  // the lexer still works
}

TEST(Regex, EmptyTextOnlyWhenThePatternAllowsIt) {
  auto m = byte_masker();
  EXPECT_TRUE(full_match(compile_regex("a*"), *m, ""));
  EXPECT_FALSE(full_match(compile_regex("a+"), *m, ""));
}

TEST(JsonSchema, IntegerRangesMatchArithmetic) {
  auto m = byte_masker();
  const std::vector<std::pair<std::optional<int64_t>, std::optional<int64_t>>> ranges = {
      {0, 0}, {-5, 5}, {3, 117}, {-250, -7}, {10, 99}, {99, 1000}, {std::nullopt, 12}, {-12, std::nullopt}, {7, std::nullopt},
      {std::nullopt, -40}, {std::nullopt, std::nullopt}, {100, 100}};
  for (const auto& [lo, hi] : ranges) {
    GrammarBuilder b;
    const int32_t root = b.seq("root", b.text(integer_range_regex(lo, hi)));
    const auto c = make_constraint("regex", b.finish(root));
    for (int64_t v = -1100; v <= 1100; ++v) {
      const bool in = (!lo || v >= *lo) && (!hi || v <= *hi);
      EXPECT_EQ(full_match(c, *m, std::to_string(v)), in) << v;
    }
    EXPECT_FALSE(full_match(c, *m, "007"));
    EXPECT_FALSE(full_match(c, *m, "-0"));
  }
}

TEST(JsonSchema, AcceptsInstancesAndRejectsViolations) {
  auto m = byte_masker();
  const auto c = compile_json_schema_text(R"({
    "type": "object",
    "properties": {
      "name": {"type": "string", "minLength": 2, "maxLength": 5},
      "age": {"type": "integer", "minimum": 0, "maximum": 130},
      "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2},
      "when": {"type": "string", "format": "date"},
      "score": {"type": "number", "minimum": -1, "maximum": 1}
    },
    "required": ["name", "age"],
    "additionalProperties": false
  })");
  for (const char* ok : {R"({"name": "Bo", "age": 3})", R"({"name": "Alice", "age": 130, "tags": ["a", "b"]})",
                         R"({"name": "Al", "age": 0, "when": "2024-02-28", "score": -0.25})",
                         R"({"name": "Al", "age": 1, "score": 1.000})", R"({"name": "\u00e9\n", "age": 5})"}) {
    EXPECT_TRUE(full_match(c, *m, ok)) << ok;
  }
  for (const char* bad : {R"({"age": 3})", R"({"name": "B", "age": 3})", R"({"name": "Bo", "age": 131})",
                          R"({"name": "Bo", "age": 3, "tags": ["a", "b", "a"]})", R"({"name": "Bo", "age": 3, "x": 1})",
                          R"({"name": "Al", "age": 1, "when": "2024-02-30"})", R"({"name": "Al", "age": 1, "score": 1.5})",
                          R"({"name": "Al", "age": 1.5})", R"({"age": 3, "name": "Bo"})"}) {
    EXPECT_FALSE(full_match(c, *m, bad)) << bad;
  }
}

TEST(JsonSchema, ExtraPropertiesFollowTheSpecUnlessStrict) {
  auto m = byte_masker();
  const char* schema = R"({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a", "b"]})";
  const auto open = compile_json_schema_text(schema);
  EXPECT_TRUE(full_match(open, *m, R"({"a": 1, "b": [true], "zz": {"k": null}})"));
  EXPECT_FALSE(full_match(open, *m, R"({"a": 1})"));                // b is required
  EXPECT_FALSE(full_match(open, *m, R"({"a": 1, "b": 2, "a": 3})"));  // a listed key is not an extra one
  JsonSchemaOptions strict;
  strict.strict = true;
  const auto closed = compile_json_schema_text(R"({"type": "object", "properties": {"a": {"type": "integer"}}})", strict);
  EXPECT_TRUE(full_match(closed, *m, R"({"a": 1})"));
  EXPECT_FALSE(full_match(closed, *m, R"({"a": 1, "b": 2})"));
}

TEST(JsonSchema, RecursiveRefs) {
  auto m = byte_masker();
  const auto c = compile_json_schema_text(R"({
    "$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
              "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["v"]}},
    "$ref": "#/$defs/node"})");
  EXPECT_TRUE(full_match(c, *m, R"({"v": 1, "kids": [{"v": 2}, {"v": 3, "kids": [{"v": 4, "kids": []}]}]})"));
  EXPECT_FALSE(full_match(c, *m, R"({"v": 1, "kids": [{"w": 2}]})"));
}

TEST(JsonSchema, RefusesUnsupportedKeywordsByName) {
  for (const auto& [schema, needle] : std::vector<std::pair<const char*, const char*>>{
           {R"({"type": "string", "contentEncoding": "base64"})", "contentEncoding"},
           {R"({"type": "array", "uniqueItems": true})", "uniqueItems"},
           {R"({"oneOf": [{"type": "integer"}, {"type": "number"}]})", "oneOf"},
           {R"({"type": "string", "format": "ipv6"})", "ipv6"},
           {R"({"$ref": "http://x/y"})", "$ref"}}) {
    try {
      compile_json_schema_text(schema);
      ADD_FAILURE() << schema;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  }
}

// The mask from the trie walk equals trying each token on a copy.
void expect_masks_match_brute_force(const std::shared_ptr<const Constraint>& c, TokenMasker& m, const Tokenizer& tok,
                                    std::string_view text) {
  Matcher x(c, m);
  std::vector<uint64_t> bits(m.n_words());
  const std::vector<int32_t> ids = tok.encode(text, /*add_special=*/false);
  size_t checked = 0;
  for (size_t step = 0; step <= ids.size(); ++step) {
    x.fill_mask(bits);
    size_t allowed = 0;
    for (int32_t t = 0; t < m.n_vocab(); ++t) {
      Matcher y = x;
      const bool ok = y.accept(t);
      ASSERT_EQ(test_bit(bits, t), ok) << "step " << step << " token " << t << " '" << m.piece(t) << "'";
      allowed += ok;
    }
    EXPECT_GT(allowed, 0u) << "dead end at step " << step;
    ++checked;
    if (step < ids.size()) {
      ASSERT_TRUE(x.accept(ids[step])) << "step " << step << " '" << m.piece(ids[step]) << "'";
    }
  }
  EXPECT_TRUE(x.can_end());
  EXPECT_GT(checked, 5u);
}

TEST(Matcher, MasksEqualTryingEveryToken) {
  const auto& s = testing::stories260k();
  auto m = make_token_masker(*s.tok);
  const auto c = compile_json_schema_text(R"({"type": "object", "properties": {
      "title": {"type": "string"}, "count": {"type": "integer", "minimum": -20, "maximum": 300},
      "kind": {"enum": ["cat", "dog", 3, null]}, "ok": {"type": "boolean"}},
      "required": ["title", "count"]})");
  expect_masks_match_brute_force(c, *m, *s.tok, R"({"title": "Once upon a time", "count": 12, "kind": "dog", "ok": true})");
  JsonSchemaOptions flexible;
  flexible.whitespace = JsonWhitespace::kFlexible;
  expect_masks_match_brute_force(compile_json_schema_text(R"({"type": "array", "items": {"type": "number"}})", flexible), *m,
                                 *s.tok, "[ 1.5,2 ,\n -3e4]");
  expect_masks_match_brute_force(compile_regex("( the| a) [a-z]+ (ran|sat)\\."), *m, *s.tok, "the dog sat.");
  // Plain-text states (Lexer::plain_budget): short and long counts, a star,
  // a pattern whose tail also takes plain characters, extra keys.
  expect_masks_match_brute_force(
      compile_json_schema_text(R"({"type": "array", "items": {"type": "string", "maxLength": 5}})"), *m, *s.tok,
      R"(["Tim", "a", ""])");
  expect_masks_match_brute_force(
      compile_json_schema_text(R"({"type": "object", "properties": {"a": {"type": "string", "minLength": 2, "maxLength": 40},
          "b": {"type": "string", "pattern": "^[a-z]{1,3}x*$"}}, "required": ["a", "b"]})"),
      *m, *s.tok, R"({"a": "Once upon a time", "b": "abxx", "other": "the end"})");
}

// The same on Qwen 3's 151k byte-level vocabulary, whose tokens span
// lexemes ('", "', '": '), hold partial UTF-8, and exceed 16 bytes; extra
// keys that are prefixes of listed ones, where '"name":' must be refused.
TEST(Matcher, MasksEqualTryingEveryTokenOfA151kVocabulary) {
  const auto tok = Tokenizer::from_hf_json(testing::shared_path("models/tokenizers/qwen3/tokenizer.json"));
  auto m = make_token_masker(*tok);
  expect_masks_match_brute_force(
      compile_json_schema_text(R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
          "note": {"type": "string"}, "n": {"type": "integer"}}, "required": ["name", "note", "n"]})"),
      *m, *tok, R"({"name": "Zoë Li", "note": "日本語 ok", "n": -12, "nam": [1], "notes": {}})");
}

TEST(Matcher, RollbackRestoresTheMask) {
  const auto& s = testing::stories260k();
  auto m = make_token_masker(*s.tok);
  const auto c = compile_json_schema_text(R"({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]})");
  Matcher x(c, *m);
  std::vector<uint64_t> before(m->n_words()), after(m->n_words());
  const auto ids = s.tok->encode(R"({"a": "hi there"})", false);
  ASSERT_TRUE(x.accept(ids[0]));
  x.fill_mask(before);
  for (size_t i = 1; i < ids.size(); ++i) ASSERT_TRUE(x.accept(ids[i]));
  EXPECT_TRUE(x.can_end());
  x.rollback(1);
  x.fill_mask(after);
  EXPECT_EQ(before, after);
  EXPECT_FALSE(x.can_end());
}

}  // namespace
}  // namespace tessera::grammar

namespace tessera::grammar {
namespace {

// GBNF in llama.cpp's syntax: grammars of this project's own writing (the
// shapes of llama.cpp's examples: arithmetic, a list, JSON-like values),
// checked against strings they must and must not accept.
TEST(Gbnf, AcceptsItsLanguageExactly) {
  auto m = byte_masker();
  const auto arith = compile_gbnf(R"G(# integer arithmetic
root  ::= expr
expr  ::= term (("+" | "-") term)*
term  ::= factor (("*" | "/") factor)*
factor ::= [0-9]+ | "(" expr ")"
)G");
  for (const char* ok : {"1", "12+3", "(1+2)*3", "((4))", "7/8-9*10"}) EXPECT_TRUE(full_match(arith, *m, ok)) << ok;
  for (const char* bad : {"", "+1", "1+", "(1", "1)", "a", "1 + 2"}) EXPECT_FALSE(full_match(arith, *m, bad)) << bad;

  const auto list = compile_gbnf("root ::= item+\nitem ::= \"- \" [^\\n]+ \"\\n\"\n");
  EXPECT_TRUE(full_match(list, *m, "- eggs\n- milk\n"));
  EXPECT_FALSE(full_match(list, *m, "- eggs"));
  EXPECT_FALSE(full_match(list, *m, "-\n"));

  const auto value = compile_gbnf(R"G(
root   ::= value
value  ::= object | array | string | number | ("true" | "false" | "null")
object ::= "{" ( string ":" value ("," string ":" value)* )? "}"
array  ::= "[" ( value ("," value)* )? "]"
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}) )* "\""
number ::= "-"? ([0-9] | [1-9] [0-9]{1,15}) ("." [0-9]+)?
)G");
  for (const char* ok : {R"({"a":[1,-2.5,"x\u00e9"],"b":{}})", "[]", "null", R"("é")"}) {
    EXPECT_TRUE(full_match(value, *m, ok)) << ok;
  }
  for (const char* bad : {R"({"a"})", "[1,]", "01", R"("\x")", "tru"}) EXPECT_FALSE(full_match(value, *m, bad)) << bad;

  const auto counted = compile_gbnf("root ::= [a-c]{2,3} \"!\"?\n");
  for (const char* ok : {"ab", "abc", "ca!"}) EXPECT_TRUE(full_match(counted, *m, ok)) << ok;
  for (const char* bad : {"a", "abca", "!"}) EXPECT_FALSE(full_match(counted, *m, bad)) << bad;
}

TEST(Gbnf, ErrorsNameTheLine) {
  for (const auto& [text, needle] : std::vector<std::pair<const char*, const char*>>{
           {"root ::= foo\n", "undefined rule 'foo'"},
           {"item ::= \"a\"\n", "no 'root' rule"},
           {"root ::= \"a\"\nroot ::= \"b\"\n", "line 2"},
           {"root ::= [b-a]\n", "out of order"},
           {"root ::= \"abc\n", "unterminated literal"}}) {
    try {
      compile_gbnf(text);
      ADD_FAILURE() << text;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  }
}

TEST(Gbnf, MasksEqualTryingEveryToken) {
  const auto& s = testing::stories260k();
  auto m = make_token_masker(*s.tok);
  const auto g = compile_gbnf("root ::= \" \" sentence (\" \" sentence)*\nsentence ::= [A-Z] [a-z]+ (\" \" [a-z]+)* \".\"\n");
  expect_masks_match_brute_force(g, *m, *s.tok, "Tim ran to the park. He was happy.");
}

}  // namespace
}  // namespace tessera::grammar
