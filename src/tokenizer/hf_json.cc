// Tokenizer::from_hf_json: Hugging Face tokenizer.json files with a byte-level
// BPE model (GPT-2, Llama 3, Qwen2/3, ...). Special tokens and add_bos come
// from a tokenizer_config.json in the same folder when there is one.
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "format/json_file.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/hf_scan.h"
#include "tokenizer/internal.h"

namespace tessera {
namespace {

using nlohmann::json;
using tok::TokenType;

// Ids beyond this are surely a corrupt file, not a vocabulary.
constexpr int64_t kMaxVocab = 1 << 24;

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
    else if (pattern.contains("String")) regex = tok::quote_regex(pattern["String"].get<std::string>());
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

// A literal pattern of Replace normalizers / decoders: {"String": ...} only.
std::string replace_pattern(const json& j, const std::string& where) {
  TESSERA_CHECK(j.contains("pattern") && j["pattern"].is_object() && j["pattern"].contains("String") &&
                    j["pattern"]["String"].is_string() && j.contains("content") && j["content"].is_string(),
                kCorruptFile, "{}: only Replace with a String pattern and a string content is supported", where);
  return j["pattern"]["String"].get<std::string>();
}

// The normalizer: none, a Unicode normalization form (NFC, NFD, NFKC, NFKD),
// or for SentencePiece-style BPE also Replace (String) and Prepend steps; a
// Sequence of these applies them in order.
void parse_normalizer(const json& j, const std::string& where, bool byte_fallback, tok::Replacements& out) {
  if (j.is_null()) return;
  TESSERA_CHECK(j.is_object(), kCorruptFile, "{}: expected an object with a \"type\"", where);
  const std::string type = j.value("type", std::string());
  if (type == "Sequence") {
    const json list = j.value("normalizers", json::array());
    TESSERA_CHECK(list.is_array(), kCorruptFile, "{}.normalizers is not an array", where);
    for (size_t i = 0; i < list.size(); ++i) {
      parse_normalizer(list[i], fmt::format("{}.normalizers[{}]", where, i), byte_fallback, out);
    }
    return;
  }
  if (const tok::NormalForm form = tok::normal_form_from_name(type); form != tok::NormalForm::kNone) {
    out.steps.push_back({false, "", "", form});
    return;
  }
  if (byte_fallback && type == "Replace") {
    const std::string from = replace_pattern(j, where);
    out.steps.push_back({false, from, j["content"].get<std::string>()});
    return;
  }
  if (byte_fallback && type == "Prepend") {
    TESSERA_CHECK(j.contains("prepend") && j["prepend"].is_string(), kCorruptFile, "{}: Prepend without a string",
                  where);
    out.steps.push_back({true, "", j["prepend"].get<std::string>()});
    return;
  }
  fail(ErrorCode::kCorruptFile, "{}: unsupported normalizer '{}'", where, type);
}

// The decoder of a SentencePiece-style BPE: a Sequence of Replace (String),
// ByteFallback, Fuse and, after Fuse, Strip of one leading space. Sets
// `strip_leading_space` for that Strip.
void parse_fallback_decoder(const json& j, const std::string& path, tok::Replacements& out,
                            bool& strip_leading_space) {
  TESSERA_CHECK(j.is_object() && j.value("type", std::string()) == "Sequence" && j.contains("decoders") &&
                    j["decoders"].is_array(),
                kCorruptFile, "{}: decoder: a BPE with byte_fallback needs a Sequence decoder with ByteFallback", path);
  bool byte_fallback = false, fused = false;
  for (size_t i = 0; i < j["decoders"].size(); ++i) {
    const json& d = j["decoders"][i];
    const std::string where = fmt::format("{}: decoder.decoders[{}]", path, i);
    const std::string type = d.is_object() ? d.value("type", std::string()) : std::string();
    TESSERA_CHECK(!fused, kCorruptFile, "{}: decoder '{}' after Fuse is not supported", where, type);
    if (type == "Replace") {
      const std::string from = replace_pattern(d, where);
      out.steps.push_back({false, from, d["content"].get<std::string>()});
    } else if (type == "ByteFallback") {
      byte_fallback = true;
    } else if (type == "Fuse") {
      fused = i + 1 < j["decoders"].size();  // only a Strip may follow
      if (fused) {
        const json& next = j["decoders"][i + 1];
        TESSERA_CHECK(next.is_object() && next.value("type", std::string()) == "Strip" &&
                          next.value("content", std::string()) == " " && next.value("start", 0) <= 1 &&
                          next.value("stop", 0) == 0 && i + 2 == j["decoders"].size(),
                      kCorruptFile, "{}: after Fuse only Strip of one leading \" \" is supported", where);
        strip_leading_space = next.value("start", 0) == 1;
        break;
      }
    } else {
      fail(ErrorCode::kCorruptFile, "{}: unsupported decoder '{}' for a BPE with byte_fallback", where, type);
    }
  }
  TESSERA_CHECK(byte_fallback, kCorruptFile, "{}: decoder: a BPE with byte_fallback needs a ByteFallback decoder",
                path);
}

// A byte-level BPE decodes with ByteLevel (or no decoder at all).
void check_byte_level_decoder(const json& j, const std::string& path) {
  if (j.is_null()) return;
  const std::string type = j.is_object() ? j.value("type", std::string()) : std::string();
  TESSERA_CHECK(type == "ByteLevel", kCorruptFile,
                "{}: decoder '{}' is not supported for a byte-level BPE (only ByteLevel)", path, type);
}

// What the post-processor adds around a single sequence: TemplateProcessing's
// special tokens (BOS before, EOS after); ByteLevel adds nothing. Returns
// false when there is no TemplateProcessing (tokenizer_config.json decides).
bool parse_post_processor(const json& j, const std::string& where, tok::Vocab& v) {
  if (j.is_null()) return false;
  const std::string type = j.value("type", std::string());
  if (type == "ByteLevel") return false;
  if (type == "Sequence") {
    bool any = false;
    const json list = j.value("processors", json::array());
    for (size_t i = 0; i < list.size(); ++i) {
      any = parse_post_processor(list[i], fmt::format("{}.processors[{}]", where, i), v) || any;
    }
    return any;
  }
  TESSERA_CHECK(type == "TemplateProcessing", kCorruptFile, "{}: unsupported post-processor '{}'", where, type);
  TESSERA_CHECK(j.contains("single") && j["single"].is_array(), kCorruptFile, "{}: no \"single\" template", where);
  bool seen_sequence = false;
  v.add_bos = v.add_eos = false;
  for (const json& item : j["single"]) {
    if (item.contains("Sequence")) {
      seen_sequence = true;
      continue;
    }
    TESSERA_CHECK(item.contains("SpecialToken") && item["SpecialToken"].contains("id"), kCorruptFile,
                  "{}.single: an item is neither Sequence nor SpecialToken", where);
    const std::string name = item["SpecialToken"]["id"].get<std::string>();
    int32_t id = v.find(name);
    // special_tokens maps the template's name to the id(s) it stands for.
    const json& named = j.contains("special_tokens") ? j["special_tokens"] : json();
    if (named.is_object() && named.contains(name) && named[name].contains("ids")) {
      const json& ids = named[name]["ids"];
      TESSERA_CHECK(ids.is_array() && ids.size() == 1 && ids[0].is_number_integer(), kCorruptFile,
                    "{}.special_tokens['{}']: only one id per special token is supported", where, name);
      id = ids[0].get<int32_t>();
      TESSERA_CHECK(id >= 0 && id < v.size(), kCorruptFile, "{}.special_tokens['{}']: id {} is out of range", where,
                    name, id);
    }
    TESSERA_CHECK(id >= 0, kCorruptFile, "{}.single: special token '{}' is not in the vocabulary", where, name);
    bool& flag = seen_sequence ? v.add_eos : v.add_bos;
    TESSERA_CHECK(!flag, kCorruptFile, "{}.single: more than one special token on one side is not supported", where);
    flag = true;
    (seen_sequence ? v.ids.eos : v.ids.bos) = id;
  }
  return true;
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

tok::HfTokenizerParts load_hf_json(const std::string& path) {
  tok::HfTokenizerFile file = tok::read_hf_tokenizer_file(path);
  const json& j = file.rest;
  TESSERA_CHECK(j.contains("model") && j["model"].is_object(), kCorruptFile, "{}: no \"model\" object", path);
  const json& model = j["model"];
  const std::string type = model.value("type", std::string("BPE"));
  TESSERA_CHECK(type == "BPE", kCorruptFile, "{}: model type '{}' is not supported (only BPE)", path, type);
  const bool byte_fallback = model.value("byte_fallback", false);
  const auto nonempty = [&](const char* key) {
    return model.contains(key) && model[key].is_string() && !model[key].get<std::string>().empty();
  };
  TESSERA_CHECK(!nonempty("continuing_subword_prefix") && !nonempty("end_of_word_suffix"), kCorruptFile,
                "{}: BPE sub-word prefixes/suffixes are not supported", path);
  TESSERA_CHECK(!model.contains("dropout") || model["dropout"].is_null(), kCorruptFile,
                "{}: model.dropout is not supported (tokenization would be random)", path);

  auto v = std::make_unique<tok::Vocab>();
  // A SentencePiece-style BPE decodes like SentencePiece (its Strip decoder
  // drops the prefix space); its algorithm is BPE by merge rank all the same.
  v->kind = byte_fallback ? tok::ModelKind::kSpm : tok::ModelKind::kBpe;
  TESSERA_CHECK(file.has_vocab_object && !file.vocab.empty(), kCorruptFile,
                "{}: model.vocab is not a non-empty object", path);
  int64_t max_id = -1;
  for (const auto& [text, id] : file.vocab) max_id = std::max(max_id, id);
  if (max_id >= 0 && max_id < kMaxVocab) {
    v->text.reserve(max_id + 1);
    v->type.reserve(max_id + 1);
  }
  for (auto& [text, id] : file.vocab) {
    TESSERA_CHECK(id < 0 || static_cast<size_t>(id) >= v->text.size() || v->type[id] == TokenType::kUnused,
                  kCorruptFile, "{}: model.vocab gives id {} twice", path, id);
    // <0xNN> entries of a byte-fallback vocabulary stand for that byte.
    const TokenType tt = byte_fallback && tok::parse_byte_token(text) >= 0 ? TokenType::kByte : TokenType::kNormal;
    set_token(*v, id, std::move(text), tt, path + ": model.vocab");
  }
  if (j.contains("added_tokens") && j["added_tokens"].is_array()) {
    for (const json& t : j["added_tokens"]) {
      TESSERA_CHECK(t.is_object() && t.contains("id") && t["id"].is_number_integer() && t.contains("content") &&
                        t["content"].is_string(),
                    kCorruptFile, "{}: an added_tokens entry lacks an integer id or a string content", path);
      // Added tokens are matched in the raw text; "special" ones only when
      // the caller parses special tokens.
      const TokenType tt = t.value("special", false) ? TokenType::kControl : TokenType::kUserDefined;
      for (const char* flag : {"lstrip", "rstrip", "single_word"}) {
        TESSERA_CHECK(!t.value(flag, false), kCorruptFile, "{}: added token '{}': {} is not supported", path,
                      t["content"].get<std::string>(), flag);
      }
      set_token(*v, t["id"].get<int64_t>(), t["content"].get<std::string>(), tt, path + ": added_tokens");
    }
  }

  TESSERA_CHECK(file.has_merges_array, kCorruptFile, "{}: model.merges is not an array", path);

  tok::BpeOptions options;
  options.ignore_merges = model.value("ignore_merges", false);
  options.byte_fallback = byte_fallback;
  parse_normalizer(j.value("normalizer", json()), "normalizer", byte_fallback, options.normalizer);
  PreTokenizerSpec spec;
  if (byte_fallback) {
    if (j.contains("pre_tokenizer") && !j["pre_tokenizer"].is_null()) {
      parse_pre_tokenizer(j["pre_tokenizer"], "pre_tokenizer", spec);
    }
    TESSERA_CHECK(!spec.byte_level, kCorruptFile, "{}: a ByteLevel pre-tokenizer with byte_fallback is not supported",
                  path);
    bool strip = false;
    parse_fallback_decoder(j.value("decoder", json()), path, options.decoder, strip);
    v->add_space_prefix = strip;
  } else {
    TESSERA_CHECK(j.contains("pre_tokenizer") && !j["pre_tokenizer"].is_null(), kCorruptFile,
                  "{}: no pre_tokenizer (a byte-level BPE needs ByteLevel)", path);
    parse_pre_tokenizer(j["pre_tokenizer"], "pre_tokenizer", spec);
    TESSERA_CHECK(spec.byte_level, kCorruptFile,
                  "{}: only byte-level BPE tokenizers are supported (no ByteLevel), or BPE with byte_fallback", path);
    TESSERA_CHECK(options.normalizer.only_forms(), kCorruptFile,
                  "{}: normalizers other than NFC/NFD/NFKC/NFKD on a byte-level BPE", path);
    check_byte_level_decoder(j.value("decoder", json()), path);
    v->add_space_prefix = spec.add_prefix_space;
  }

  v->finalize();
  if (model.contains("unk_token") && model["unk_token"].is_string()) {
    v->ids.unk = v->find(model["unk_token"].get<std::string>());
  }

  const std::filesystem::path config_path = std::filesystem::path(path).parent_path() / "tokenizer_config.json";
  const json config = std::filesystem::exists(config_path) ? read_json_file(config_path.string()) : json::object();
  const std::string cp = config_path.string();
  TESSERA_CHECK(config.is_object(), kCorruptFile, "{}: not a JSON object", cp);
  v->ids.bos = config_token(config, "bos_token", *v, cp);
  v->ids.eos = config_token(config, "eos_token", *v, cp);
  v->ids.pad = config_token(config, "pad_token", *v, cp);
  const auto flag = [&](const char* key) {
    return config.contains(key) && config[key].is_boolean() && config[key].get<bool>();  // null: false
  };
  const int32_t config_eos = v->ids.eos;
  // TemplateProcessing (what Hugging Face tokenizers and transformers.js
  // run) decides BOS / EOS; otherwise tokenizer_config.json's flags.
  if (!parse_post_processor(j.value("post_processor", json()), "post_processor", *v)) {
    v->add_bos = flag("add_bos_token") && v->ids.bos >= 0;
    v->add_eos = flag("add_eos_token") && v->ids.eos >= 0;
  } else if (!v->add_eos) {
    v->ids.eos = config_eos;
  }
  v->finalize();  // the end-of-generation set includes the new EOS

  tok::HfTokenizerParts parts;
  parts.vocab = std::move(v);
  parts.merges = std::move(file.merges);
  parts.pre = std::move(spec.pre);
  parts.options = std::move(options);
  parts.byte_level_prefix_space = spec.byte_level && spec.add_prefix_space;
  return parts;
}

}  // namespace

namespace tok {

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

HfTokenizerParts read_hf_tokenizer(const std::string& path) {
  try {
    return load_hf_json(path);
  } catch (const json::exception& e) {
    // A value of the wrong JSON type somewhere.
    fail(ErrorCode::kCorruptFile, "{}: {}", path, e.what());
  }
}

}  // namespace tok

std::unique_ptr<Tokenizer> Tokenizer::from_hf_json(const std::string& path) {
  tok::HfTokenizerParts p = tok::read_hf_tokenizer(path);
  std::vector<std::pair<std::string_view, std::string_view>> merges;
  merges.reserve(p.merges.size());
  for (const auto& [a, b] : p.merges) merges.emplace_back(a, b);
  auto m = tok::make_bpe_model(*p.vocab, merges, "model.merges", std::move(p.pre), std::move(p.options));
  return std::make_unique<Tokenizer>(std::move(p.vocab), std::move(m));
}

}  // namespace tessera
