// hf_tokenizer_gguf_metadata: a tokenizer.json as GGUF tokenizer.* metadata,
// the vocabulary `tessera convert` writes for llama.cpp.
#include <filesystem>
#include <memory>

#include "core/error.h"
#include "core/log.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/internal.h"

namespace tessera {
namespace {

using tok::TokenType;

constexpr std::string_view kSpmSpaceMark = "\xE2\x96\x81";  // U+2581 "▁"

// llama.cpp's tokenizer.ggml.pre names whose splits Tessera implements, most
// common first: the first whose splits equal the tokenizer.json's is written
// (several names share one regex; llama.cpp treats those alike).
constexpr const char* kLlamaCppPreNames[] = {"llama-bpe",      "qwen2",  "gpt-2",     "gpt-4o", "starcoder", "deepseek-llm",
                                             "deepseek-coder", "falcon", "poro-chat", "viking"};

gguf::Value meta_u32(int64_t v) {
  gguf::Value x;
  x.type = gguf::ValueType::kU32;
  x.u = static_cast<uint64_t>(v);
  return x;
}

gguf::Value meta_bool(bool v) {
  gguf::Value x;
  x.type = gguf::ValueType::kBool;
  x.i = v ? 1 : 0;
  return x;
}

gguf::Value meta_string(std::string v) {
  gguf::Value x;
  x.type = gguf::ValueType::kString;
  x.s = std::move(v);
  return x;
}

gguf::Value meta_array(gguf::Array a) {
  gguf::Value x;
  x.type = gguf::ValueType::kArray;
  x.array = std::make_shared<gguf::Array>(std::move(a));
  return x;
}

// The tokenizer.ggml.pre of a byte-level BPE: the llama.cpp name whose
// splits are the tokenizer.json's. An unknown pre-tokenizer is refused:
// llama.cpp's "default" would split text otherwise, and the converted model
// would tokenize differently from its tokenizer.json without a word.
std::string byte_level_pre_name(const tok::HfTokenizerParts& p, const std::string& path) {
  const std::vector<tok::PreTokenizer::SplitSpec> want = p.pre.splits();
  std::string name;
  for (const char* candidate : kLlamaCppPreNames) {
    if (tok::PreTokenizer::from_name(candidate).splits() == want) {
      name = candidate;
      break;
    }
  }
  if (name.empty()) {
    fail(ErrorCode::kCorruptFile, "{}: its pre-tokenizer ({} regex split(s), the first /{}/) is none that llama.cpp "
         "names in tokenizer.ggml.pre (known: llama-bpe, qwen2, gpt-2, gpt-4o, starcoder, deepseek-llm, deepseek-coder, "
         "falcon, poro-chat, viking); a GGUF would tokenize differently", path, want.size(),
         want.empty() ? std::string() : want[0].pattern);
  }
  // llama.cpp (and Tessera's GGUF reader) apply ignore_merges with llama-bpe only.
  TESSERA_CHECK(p.options.ignore_merges == (name == "llama-bpe"), kCorruptFile,
                "{}: model.ignore_merges is {} with the '{}' pre-tokenizer, but llama.cpp ignores merges with "
                "llama-bpe only; a GGUF would tokenize differently", path, p.options.ignore_merges, name);
  TESSERA_CHECK(!p.byte_level_prefix_space, kCorruptFile,
                "{}: ByteLevel add_prefix_space is true; llama.cpp adds no space in front of byte-level BPE text",
                path);
  return name;
}

// Whether a SentencePiece-style BPE puts "▁" in front of the text
// (tokenizer.ggml.add_space_prefix); refuses what a GGUF "llama" tokenizer
// cannot express. That tokenizer writes spaces as "▁" and maybe adds one in
// front, nothing else: the normalizer must be Replace(" ", "▁") with or
// without Prepend("▁"), the decoder Replace("▁", " ") (ByteFallback and Fuse
// are implied), with a Strip of the leading space exactly when the
// normalizer prepends one.
bool spm_space_prefix(const tok::HfTokenizerParts& p, const std::string& path) {
  bool replace = false, prepend = false;
  for (const tok::Replacements::Step& s : p.options.normalizer.steps) {
    if (s.prepend && s.to == kSpmSpaceMark && !prepend) {
      prepend = true;
    } else if (!s.prepend && s.from == " " && s.to == kSpmSpaceMark && !replace) {
      replace = true;
    } else {
      fail(ErrorCode::kCorruptFile, "{}: normalizer step {} '{}' -> '{}' cannot be written to a GGUF llama tokenizer "
           "(it only writes spaces as \"\xE2\x96\x81\" and maybe prepends one)", path,
           s.prepend ? "Prepend" : "Replace", s.from, s.to);
    }
  }
  TESSERA_CHECK(replace, kCorruptFile, "{}: the normalizer does not replace \" \" with \"\xE2\x96\x81\", as a GGUF "
                "llama tokenizer does", path);
  const auto& dec = p.options.decoder.steps;
  TESSERA_CHECK(dec.size() == 1 && !dec[0].prepend && dec[0].from == kSpmSpaceMark && dec[0].to == " ",
                kCorruptFile, "{}: the decoder is not Replace(\"\xE2\x96\x81\", \" \"), ByteFallback, Fuse[, Strip] as "
                "a GGUF llama tokenizer decodes", path);
  TESSERA_CHECK(p.vocab->add_space_prefix == prepend, kCorruptFile, "{}: the normalizer {} a leading "
                "\"\xE2\x96\x81\" but the decoder {} one; GGUF has one flag for both", path,
                prepend ? "prepends" : "does not prepend", p.vocab->add_space_prefix ? "strips" : "does not strip");
  // After the normalizer no space is left, so splitting at spaces does nothing.
  for (const tok::PreTokenizer::SplitSpec& s : p.pre.splits()) {
    TESSERA_CHECK(s.pattern == tok::quote_regex(" ") && !s.invert, kCorruptFile, "{}: pre-tokenizer split /{}/ "
                  "cannot be written to a GGUF llama tokenizer (it splits nothing but words)", path, s.pattern);
  }
  TESSERA_CHECK(!p.options.ignore_merges, kCorruptFile, "{}: model.ignore_merges with byte_fallback cannot be written "
                "to a GGUF llama tokenizer", path);
  return prepend;
}

// Scores for a SentencePiece-style BPE. A GGUF "llama" tokenizer (llama.cpp's
// and Tessera's SPM) repeatedly merges the adjacent pair whose concatenation
// is the token of highest score, leftmost first on ties; Hugging Face's BPE
// merges the pair of lowest rank in model.merges. So a token's score is minus
// the rank of the first merge that forms it, and the merges happen in the
// same order. llama.cpp's converter (gguf-py's LlamaHfVocab) writes -1000 for
// every token instead, which merges left to right whatever the ranks. Tokens
// no merge forms (characters, <0xNN> bytes, added tokens) rank below every
// merge. Where the two algorithms can still differ: a token formed by two
// merges of different ranks (one score serves both), or a concatenation
// that is a token but no merge (SPM merges it, BPE never does); tokenizers
// converted from SentencePiece models have neither, as their merges are
// every such pair ordered by the merged token's score. The round trip test
// (tests/hf_model_test.cc) checks encodings against the tokenizer.json's.
std::vector<double> spm_scores(const tok::HfTokenizerParts& p, size_t n_tokens, const std::string& path) {
  const double unmerged = -static_cast<double>(p.merges.size()) - 1;
  std::vector<double> score(n_tokens, unmerged);
  std::string joined;
  for (size_t rank = 0; rank < p.merges.size(); ++rank) {
    joined = p.merges[rank].first + p.merges[rank].second;
    const int32_t id = p.vocab->find(joined);
    TESSERA_CHECK(id >= 0, kCorruptFile, "{}: model.merges[{}] forms '{}', which is not in the vocabulary", path, rank,
                  joined);
    score[static_cast<size_t>(id)] = std::max(score[static_cast<size_t>(id)], -static_cast<double>(rank));
  }
  return score;
}

}  // namespace

std::vector<std::pair<std::string, gguf::Value>> hf_tokenizer_gguf_metadata(const std::string& path, int64_t n_vocab) {
  const tok::HfTokenizerParts p = tok::read_hf_tokenizer(path);
  const tok::Vocab& v = *p.vocab;
  const bool spm = p.options.byte_fallback;
  const size_t n_own = static_cast<size_t>(v.size());
  TESSERA_CHECK(n_vocab <= 0 || static_cast<size_t>(n_vocab) >= n_own, kCorruptFile,
                "{}: {} tokens, but the model's embedding has {} rows", path, n_own, n_vocab);
  const size_t n = n_vocab > 0 ? static_cast<size_t>(n_vocab) : n_own;

  std::vector<std::pair<std::string, gguf::Value>> out;
  out.emplace_back("tokenizer.ggml.model", meta_string(spm ? "llama" : "gpt2"));
  std::string pre;
  bool space_prefix = false;
  if (spm) space_prefix = spm_space_prefix(p, path);
  else pre = byte_level_pre_name(p, path);
  // A Unicode normalization form (Qwen's NFC) has no GGUF key, and llama.cpp
  // applies none to a gpt2 tokenizer (its own converter drops it too): the
  // converted file tokenizes text as given, as llama.cpp does, which differs
  // from the tokenizer.json only on text not already in that form.
  if (!spm && !p.options.normalizer.steps.empty()) {
    TESSERA_LOG_WARN("{}: the tokenizer.json's Unicode normalizer has no GGUF equivalent; the converted tokenizer "
                     "(in llama.cpp and Tessera alike) tokenizes text as given, which differs only for text not "
                     "already normalized", path);
  }
  if (!spm) out.emplace_back("tokenizer.ggml.pre", meta_string(pre));

  // Ids the tokenizer.json leaves out, and the rows of the embedding past its
  // last token, are unused entries named as llama.cpp's converter names them.
  gguf::Array tokens, types;
  tokens.elem_type = gguf::ValueType::kString;
  types.elem_type = gguf::ValueType::kI32;
  tokens.strings.reserve(n);
  types.ints.reserve(n);
  for (size_t id = 0; id < n; ++id) {
    const bool hole = id >= n_own || (v.type[id] == TokenType::kUnused && v.text[id].empty());
    tokens.strings.push_back(hole ? fmt::format("[PAD{}]", id) : v.text[id]);
    TokenType t = hole ? TokenType::kUnused : v.type[id];
    // The unknown token of the model's vocabulary (not an added token, which
    // keeps its control type, as llama.cpp's converter keeps it).
    if (static_cast<int32_t>(id) == v.ids.unk && t == TokenType::kNormal) t = TokenType::kUnknown;
    // A non-special added token holding "▁" (Gemma's whitespace runs "▁▁",
    // "▁▁▁", ...) is merged from text like any piece, since its text never
    // occurs before the normalizer, and its marks decode to spaces through
    // tokenizer.json's decoder; a GGUF llama tokenizer decodes a
    // user-defined token as written ("▁▁"), a normal one with spaces.
    if (spm && t == TokenType::kUserDefined && v.text[id].find(kSpmSpaceMark) != std::string::npos) {
      t = TokenType::kNormal;
    }
    types.ints.push_back(static_cast<int64_t>(t));
  }
  out.emplace_back("tokenizer.ggml.tokens", meta_array(std::move(tokens)));
  if (spm) {
    gguf::Array scores;
    scores.elem_type = gguf::ValueType::kF32;
    scores.floats = spm_scores(p, n, path);
    out.emplace_back("tokenizer.ggml.scores", meta_array(std::move(scores)));
  }
  out.emplace_back("tokenizer.ggml.token_type", meta_array(std::move(types)));
  if (!spm) {
    gguf::Array merges;
    merges.elem_type = gguf::ValueType::kString;
    merges.strings.reserve(p.merges.size());
    for (const auto& [a, b] : p.merges) merges.strings.push_back(a + " " + b);
    out.emplace_back("tokenizer.ggml.merges", meta_array(std::move(merges)));
  }
  const std::pair<const char*, int32_t> ids[] = {{"tokenizer.ggml.bos_token_id", v.ids.bos},
                                                 {"tokenizer.ggml.eos_token_id", v.ids.eos},
                                                 {"tokenizer.ggml.unknown_token_id", v.ids.unk},
                                                 {"tokenizer.ggml.padding_token_id", v.ids.pad}};
  for (const auto& [key, id] : ids) {
    if (id >= 0) out.emplace_back(key, meta_u32(id));
  }
  out.emplace_back("tokenizer.ggml.add_bos_token", meta_bool(v.add_bos));
  out.emplace_back("tokenizer.ggml.add_eos_token", meta_bool(v.add_eos));
  if (spm) out.emplace_back("tokenizer.ggml.add_space_prefix", meta_bool(space_prefix));
  return out;
}

}  // namespace tessera
