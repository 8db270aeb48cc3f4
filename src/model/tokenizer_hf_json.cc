// Tokenizer::from_hf_json: Hugging Face tokenizer.json files with a byte-level
// BPE model (GPT-2, Llama 3, Qwen2/3, ...). Special tokens and add_bos come
// from a tokenizer_config.json in the same folder when there is one.
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/log.h"
#include "model/json_file.h"
#include "model/tokenizer.h"
#include "model/tokenizer_internal.h"

namespace tessera {
namespace {

using nlohmann::json;
using tok::TokenType;

// Ids beyond this are surely a corrupt file, not a vocabulary.
constexpr int64_t kMaxVocab = 1 << 24;

// A regex that matches `s` literally (Split's {"String": ...} patterns).
std::string quote_regex(std::string_view s) {
  std::string out = "\\Q";
  for (size_t i = 0; i < s.size(); ++i) {
    if (s.compare(i, 2, "\\E") == 0) {
      out += "\\E\\\\E\\Q";
      ++i;
    } else {
      out += s[i];
    }
  }
  return out + "\\E";
}

tok::SplitBehavior parse_behavior(const json& j, const std::string& where) {
  const std::string b = j.value("behavior", std::string("Isolated"));
  if (b == "Isolated") return tok::SplitBehavior::kIsolated;
  if (b == "Removed") return tok::SplitBehavior::kRemoved;
  if (b == "MergedWithPrevious") return tok::SplitBehavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return tok::SplitBehavior::kMergedWithNext;
  if (b == "Contiguous") return tok::SplitBehavior::kContiguous;
  fail(ErrorCode::kCorruptFile, "{}: unknown split behavior '{}'", where, b);
}

struct PreTokenizerSpec {
  tok::PreTokenizer pre;
  bool byte_level = false;
  bool add_prefix_space = false;
};

void parse_pre_tokenizer(const json& j, const std::string& where, PreTokenizerSpec& spec) {
  TESSERA_CHECK(j.is_object() && j.contains("type") && j["type"].is_string(), kCorruptFile,
                "{}: expected an object with a \"type\"", where);
  const std::string type = j["type"];
  if (type == "Sequence") {
    const json& list = j.at("pretokenizers");
    TESSERA_CHECK(list.is_array(), kCorruptFile, "{}.pretokenizers is not an array", where);
    for (size_t i = 0; i < list.size(); ++i) {
      parse_pre_tokenizer(list[i], fmt::format("{}.pretokenizers[{}]", where, i), spec);
    }
  } else if (type == "Split") {
    const json& pattern = j.at("pattern");
    std::string regex;
    if (pattern.contains("Regex")) regex = pattern["Regex"].get<std::string>();
    else if (pattern.contains("String")) regex = quote_regex(pattern["String"].get<std::string>());
    else fail(ErrorCode::kCorruptFile, "{}.pattern has neither Regex nor String", where);
    spec.pre.add_split(regex, parse_behavior(j, where), j.value("invert", false));
  } else if (type == "ByteLevel") {
    spec.byte_level = true;
    spec.add_prefix_space = j.value("add_prefix_space", false);
    if (j.value("use_regex", true)) spec.pre.add_split(tok::kGpt2Pattern);
  } else if (type == "Digits") {
    spec.pre.add_split(j.value("individual_digits", false) ? R"(\p{N})" : R"(\p{N}+)");
  } else if (type == "Punctuation") {
    spec.pre.add_split(R"([\p{P}!-/:-@\[-`{-~])", parse_behavior(j, where));
  } else if (type == "Whitespace") {
    spec.pre.add_split(R"(\w+|[^\w\s]+)", tok::SplitBehavior::kRemoved, /*invert=*/true);
  } else if (type == "WhitespaceSplit") {
    spec.pre.add_split(R"(\s+)", tok::SplitBehavior::kRemoved);
  } else {
    fail(ErrorCode::kCorruptFile, "{}: unsupported pre-tokenizer type '{}'", where, type);
  }
}

void check_normalizer(const json& j, const std::string& path) {
  if (j.is_null()) return;
  const std::string type = j.value("type", std::string());
  if (type == "Sequence" && j.value("normalizers", json::array()).empty()) return;
  // NFC changes only text that is not already composed, which is rare in
  // prompts; llama.cpp does not apply it either.
  if (type == "NFC") {
    TESSERA_LOG_DEBUG("tokenizer: {}: the NFC normalizer is not applied", path);
    return;
  }
  fail(ErrorCode::kCorruptFile, "{}: unsupported normalizer '{}'", path, type);
}

// A special token in tokenizer_config.json: a string, {"content": ...} or null.
int32_t config_token(const json& config, const char* key, const tok::Vocab& v, const std::string& path) {
  if (!config.contains(key) || config[key].is_null()) return -1;
  const json& t = config[key];
  std::string text;
  if (t.is_string()) text = t.get<std::string>();
  else if (t.is_object() && t.contains("content") && t["content"].is_string()) text = t["content"];
  else fail(ErrorCode::kCorruptFile, "{}: {} is neither a string nor {{\"content\": ...}}", path, key);
  const int32_t id = v.find(text);
  TESSERA_CHECK(id >= 0, kCorruptFile, "{}: {} '{}' is not in the vocabulary", path, key, text);
  return id;
}

void set_token(tok::Vocab& v, int64_t id, std::string text, TokenType type, const std::string& where) {
  TESSERA_CHECK(id >= 0 && id < kMaxVocab, kCorruptFile, "{}: token id {} is out of range", where, id);
  if (static_cast<size_t>(id) >= v.text.size()) {
    v.text.resize(id + 1);
    v.type.resize(id + 1, TokenType::kUnused);  // holes stay unused
  }
  v.text[id] = std::move(text);
  v.type[id] = type;
}

std::unique_ptr<Tokenizer> load_hf_json(const std::string& path) {
  const json j = read_json_file(path);
  TESSERA_CHECK(j.is_object() && j.contains("model") && j["model"].is_object(), kCorruptFile,
                "{}: no \"model\" object", path);
  const json& model = j["model"];
  const std::string type = model.value("type", std::string("BPE"));
  TESSERA_CHECK(type == "BPE", kCorruptFile, "{}: model type '{}' is not supported (only BPE)", path, type);
  TESSERA_CHECK(!model.value("byte_fallback", false), kCorruptFile,
                "{}: BPE with byte_fallback (SentencePiece-style) is not supported from tokenizer.json", path);
  const auto nonempty = [&](const char* key) {
    return model.contains(key) && model[key].is_string() && !model[key].get<std::string>().empty();
  };
  TESSERA_CHECK(!nonempty("continuing_subword_prefix") && !nonempty("end_of_word_suffix"), kCorruptFile,
                "{}: BPE sub-word prefixes/suffixes are not supported", path);

  auto v = std::make_unique<tok::Vocab>();
  v->kind = tok::ModelKind::kBpe;
  const json& vocab = model.at("vocab");
  TESSERA_CHECK(vocab.is_object() && !vocab.empty(), kCorruptFile, "{}: model.vocab is not a non-empty object",
                path);
  for (const auto& [text, id] : vocab.items()) {
    TESSERA_CHECK(id.is_number_integer(), kCorruptFile, "{}: model.vocab['{}'] is not an integer", path, text);
    const int64_t i = id.get<int64_t>();
    TESSERA_CHECK(i < 0 || static_cast<size_t>(i) >= v->text.size() || v->type[i] == TokenType::kUnused,
                  kCorruptFile, "{}: model.vocab gives id {} twice", path, i);
    set_token(*v, i, text, TokenType::kNormal, path + ": model.vocab");
  }
  if (j.contains("added_tokens") && j["added_tokens"].is_array()) {
    for (const json& t : j["added_tokens"]) {
      TESSERA_CHECK(t.is_object() && t.contains("id") && t["id"].is_number_integer() && t.contains("content") &&
                        t["content"].is_string(),
                    kCorruptFile, "{}: an added_tokens entry lacks an integer id or a string content", path);
      // Added tokens are matched in the raw text; "special" ones only when
      // the caller parses special tokens.
      const TokenType tt = t.value("special", false) ? TokenType::kControl : TokenType::kUserDefined;
      set_token(*v, t["id"].get<int64_t>(), t["content"].get<std::string>(), tt, path + ": added_tokens");
    }
  }

  const json& merges_json = model.at("merges");
  TESSERA_CHECK(merges_json.is_array(), kCorruptFile, "{}: model.merges is not an array", path);
  std::vector<std::pair<std::string_view, std::string_view>> merges;
  merges.reserve(merges_json.size());
  for (size_t i = 0; i < merges_json.size(); ++i) {
    const json& m = merges_json[i];
    if (m.is_string()) {
      const std::string& s = m.get_ref<const std::string&>();
      const size_t sp = s.size() > 1 ? s.find(' ', 1) : std::string::npos;
      TESSERA_CHECK(sp != std::string::npos && sp + 1 < s.size(), kCorruptFile,
                    "{}: model.merges[{}] = '{}' is not two tokens separated by a space", path, i, s);
      const std::string_view sv = s;
      merges.emplace_back(sv.substr(0, sp), sv.substr(sp + 1));
    } else {
      TESSERA_CHECK(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(), kCorruptFile,
                    "{}: model.merges[{}] is neither \"a b\" nor [\"a\", \"b\"]", path, i);
      merges.emplace_back(m[0].get_ref<const std::string&>(), m[1].get_ref<const std::string&>());
    }
  }

  check_normalizer(j.value("normalizer", json()), path);
  PreTokenizerSpec spec;
  TESSERA_CHECK(j.contains("pre_tokenizer") && !j["pre_tokenizer"].is_null(), kCorruptFile,
                "{}: no pre_tokenizer (a byte-level BPE needs ByteLevel)", path);
  parse_pre_tokenizer(j["pre_tokenizer"], "pre_tokenizer", spec);
  TESSERA_CHECK(spec.byte_level, kCorruptFile, "{}: only byte-level BPE tokenizers are supported (no ByteLevel)",
                path);
  v->add_space_prefix = spec.add_prefix_space;

  v->finalize();
  if (model.contains("unk_token") && model["unk_token"].is_string()) {
    v->ids.unk = v->find(model["unk_token"].get<std::string>());
  }

  const std::filesystem::path config_path = std::filesystem::path(path).parent_path() / "tokenizer_config.json";
  if (std::filesystem::exists(config_path)) {
    const std::string cp = config_path.string();
    const json config = read_json_file(cp);
    TESSERA_CHECK(config.is_object(), kCorruptFile, "{}: not a JSON object", cp);
    v->ids.bos = config_token(config, "bos_token", *v, cp);
    v->ids.eos = config_token(config, "eos_token", *v, cp);
    v->ids.pad = config_token(config, "pad_token", *v, cp);
    const auto flag = [&](const char* key) {
      return config.contains(key) && config[key].is_boolean() && config[key].get<bool>();  // null: false
    };
    v->add_bos = flag("add_bos_token") && v->ids.bos >= 0;
    v->add_eos = flag("add_eos_token") && v->ids.eos >= 0;
    v->finalize();  // the end-of-generation set includes the new EOS
  }

  tok::BpeOptions options;
  options.ignore_merges = model.value("ignore_merges", false);
  auto m = tok::make_bpe_model(*v, merges, "model.merges", std::move(spec.pre), options);
  return std::make_unique<Tokenizer>(std::move(v), std::move(m));
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_hf_json(const std::string& path) {
  try {
    return load_hf_json(path);
  } catch (const json::exception& e) {
    // A value of the wrong JSON type somewhere.
    fail(ErrorCode::kCorruptFile, "{}: {}", path, e.what());
  }
}

}  // namespace tessera
