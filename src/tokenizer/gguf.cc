// Tokenizer::from_gguf: reads and validates the tokenizer.ggml.* metadata.
// Every array length and token id is checked before use, so a hostile file
// gives one Error(kCorruptFile) naming the key.
#include <limits>

#include "core/error.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/internal.h"

namespace tessera {
namespace {

using tok::TokenType;

constexpr std::string_view kModelKey = "tokenizer.ggml.model";
constexpr std::string_view kTokensKey = "tokenizer.ggml.tokens";
constexpr std::string_view kScoresKey = "tokenizer.ggml.scores";
constexpr std::string_view kTypesKey = "tokenizer.ggml.token_type";
constexpr std::string_view kMergesKey = "tokenizer.ggml.merges";

// A token id key: absent or the 0xFFFFFFFF / -1 sentinel means "none" (as
// llama.cpp's converters write for unused separator and padding ids).
int32_t read_token_id(const gguf::File& f, std::string_view key, int32_t n_vocab) {
  const gguf::Value* v = f.find(key);
  if (v == nullptr) return -1;
  int64_t id;
  switch (v->type) {
    case gguf::ValueType::kU8: case gguf::ValueType::kU16: case gguf::ValueType::kU32:
    case gguf::ValueType::kU64:
      if (v->u == 0xFFFFFFFFull || v->u == std::numeric_limits<uint64_t>::max()) return -1;
      TESSERA_CHECK(v->u < static_cast<uint64_t>(n_vocab), kCorruptFile,
                    "{} = {} is outside the vocabulary (n_vocab {})", key, v->u, n_vocab);
      return static_cast<int32_t>(v->u);
    case gguf::ValueType::kI8: case gguf::ValueType::kI16: case gguf::ValueType::kI32:
    case gguf::ValueType::kI64:
      id = v->i;
      if (id == -1) return -1;
      TESSERA_CHECK(id >= 0 && id < n_vocab, kCorruptFile, "{} = {} is outside the vocabulary (n_vocab {})", key,
                    id, n_vocab);
      return static_cast<int32_t>(id);
    default:
      fail(ErrorCode::kCorruptFile, "{} has type {}, expected an integer token id", key,
           gguf::value_type_name(v->type));
  }
}

void read_tokens(const gguf::File& f, tok::Vocab& v) {
  const gguf::Array* tokens = f.find_array(kTokensKey);
  TESSERA_CHECK(tokens != nullptr, kCorruptFile, "missing {}", kTokensKey);
  TESSERA_CHECK(tokens->elem_type == gguf::ValueType::kString, kCorruptFile, "{} holds {}, expected strings",
                kTokensKey, gguf::value_type_name(tokens->elem_type));
  TESSERA_CHECK(!tokens->strings.empty(), kCorruptFile, "{} is empty", kTokensKey);
  TESSERA_CHECK(tokens->strings.size() < static_cast<size_t>(std::numeric_limits<int32_t>::max()), kCorruptFile,
                "{} has {} entries, more than token ids can number", kTokensKey, tokens->strings.size());
  v.text = tokens->strings;
  const size_t n = v.text.size();

  if (const gguf::Array* scores = f.find_array(kScoresKey)) {
    v.score = gguf::array_as_floats(*scores, kScoresKey);
    TESSERA_CHECK(v.score.size() == n, kCorruptFile, "{} has {} entries but {} has {}", kScoresKey,
                  v.score.size(), kTokensKey, n);
    for (size_t i = 0; i < n; ++i) {
      TESSERA_CHECK(v.score[i] == v.score[i], kCorruptFile, "{}[{}] is NaN", kScoresKey, i);
    }
  } else {
    TESSERA_CHECK(!f.has(kScoresKey), kCorruptFile, "{} is not an array", kScoresKey);
  }

  v.type.assign(n, TokenType::kNormal);
  if (const gguf::Array* types = f.find_array(kTypesKey)) {
    const std::vector<int64_t> t = gguf::array_as_ints(*types, kTypesKey);
    TESSERA_CHECK(t.size() == n, kCorruptFile, "{} has {} entries but {} has {}", kTypesKey, t.size(), kTokensKey,
                  n);
    for (size_t i = 0; i < n; ++i) {
      TESSERA_CHECK(t[i] >= 0 && t[i] <= 6, kCorruptFile, "{}[{}] = {} is not a token type (0..6)", kTypesKey, i,
                    t[i]);
      v.type[i] = static_cast<TokenType>(t[i]);
      if (v.type[i] == TokenType::kByte) {
        TESSERA_CHECK(tok::parse_byte_token(v.text[i]) >= 0, kCorruptFile,
                      "token {} has type byte but its text '{}' is not <0xNN>", i, v.text[i]);
      }
    }
  } else {
    TESSERA_CHECK(!f.has(kTypesKey), kCorruptFile, "{} is not an array", kTypesKey);
  }
}

void read_special_ids(const gguf::File& f, tok::Vocab& v) {
  const int32_t n = v.size();
  v.ids.bos = read_token_id(f, "tokenizer.ggml.bos_token_id", n);
  v.ids.eos = read_token_id(f, "tokenizer.ggml.eos_token_id", n);
  v.ids.eot = read_token_id(f, "tokenizer.ggml.eot_token_id", n);
  v.ids.eom = read_token_id(f, "tokenizer.ggml.eom_token_id", n);
  v.ids.unk = read_token_id(f, "tokenizer.ggml.unknown_token_id", n);
  v.ids.pad = read_token_id(f, "tokenizer.ggml.padding_token_id", n);
  // (sic) "seperator" is the key llama.cpp's converters write.
  v.ids.sep = read_token_id(f, "tokenizer.ggml.seperator_token_id", n);
  v.ids.cls = read_token_id(f, "tokenizer.ggml.cls_token_id", n);
  v.ids.mask = read_token_id(f, "tokenizer.ggml.mask_token_id", n);
}

std::vector<std::pair<std::string_view, std::string_view>> read_merges(const gguf::File& f) {
  const gguf::Array* merges = f.find_array(kMergesKey);
  TESSERA_CHECK(merges != nullptr, kCorruptFile, "missing {} (required by a gpt2 tokenizer)", kMergesKey);
  TESSERA_CHECK(merges->elem_type == gguf::ValueType::kString, kCorruptFile, "{} holds {}, expected strings",
                kMergesKey, gguf::value_type_name(merges->elem_type));
  std::vector<std::pair<std::string_view, std::string_view>> out;
  out.reserve(merges->strings.size());
  for (size_t i = 0; i < merges->strings.size(); ++i) {
    const std::string_view m = merges->strings[i];
    // The separator is the first space after the first character: a token
    // never is empty, but could itself be a space in a non-byte-level vocab.
    const size_t sp = m.size() > 1 ? m.find(' ', 1) : std::string_view::npos;
    TESSERA_CHECK(sp != std::string_view::npos && sp + 1 < m.size(), kCorruptFile,
                  "{}[{}] = '{}' is not two tokens separated by a space", kMergesKey, i, m);
    out.emplace_back(m.substr(0, sp), m.substr(sp + 1));
  }
  return out;
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const gguf::File& f) {
  const gguf::Value* model_value = f.find(kModelKey);
  TESSERA_CHECK(model_value != nullptr, kCorruptFile, "missing {}", kModelKey);
  const std::string& model = f.get_string(kModelKey);
  auto v = std::make_unique<tok::Vocab>();
  if (model == "llama") v->kind = tok::ModelKind::kSpm;
  else if (model == "gpt2") v->kind = tok::ModelKind::kBpe;
  else if (model == "bert") v->kind = tok::ModelKind::kWpm;
  else fail(ErrorCode::kCorruptFile, "{} = '{}' is not a supported tokenizer (llama, gpt2, bert)", kModelKey, model);

  read_tokens(f, *v);
  read_special_ids(f, *v);
  const bool spm = v->kind == tok::ModelKind::kSpm;
  const bool wpm = v->kind == tok::ModelKind::kWpm;
  if (wpm) {
    // BERT frames a sequence as [CLS] ... [SEP].
    if (v->ids.bos < 0) v->ids.bos = v->ids.cls;
    if (v->ids.eos < 0) v->ids.eos = v->ids.sep;
  }
  v->add_bos = f.get_bool_or("tokenizer.ggml.add_bos_token", spm || wpm);
  v->add_eos = f.get_bool_or("tokenizer.ggml.add_eos_token", wpm);
  v->add_space_prefix = f.get_bool_or("tokenizer.ggml.add_space_prefix", spm || wpm);
  v->finalize();

  std::unique_ptr<tok::Model> m;
  switch (v->kind) {
    case tok::ModelKind::kSpm:
      m = tok::make_spm_model(*v);
      break;
    case tok::ModelKind::kWpm:
      m = tok::make_wpm_model(*v);
      break;
    case tok::ModelKind::kBpe: {
      const std::string pre_name = f.get_string_or("tokenizer.ggml.pre", "default");
      tok::PreTokenizer pre = tok::PreTokenizer::from_name(pre_name);
      tok::BpeOptions options;
      // Llama 3's tokenizer.json sets ignore_merges; GGUF does not record it.
      options.ignore_merges = pre_name == "llama-bpe" || pre_name == "llama3" || pre_name == "llama-v3";
      m = tok::make_bpe_model(*v, read_merges(f), kMergesKey, std::move(pre), options);
      break;
    }
  }
  return std::make_unique<Tokenizer>(std::move(v), std::move(m));
}

}  // namespace tessera
