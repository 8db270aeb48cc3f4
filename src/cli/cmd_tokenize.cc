// tessera tokenize: print the token ids of a text as a JSON array (and, with
// --pieces, each token's piece on a second line). --texts FILE.json (a JSON
// array of strings) prints one JSON object per text and line: {"ids": [...],
// "decoded": decode(ids)} (control tokens rendered), for comparisons against
// other tokenizers without loading the vocabulary once per text.
#include <cstdio>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "core/error.h"
#include "core/mmap_file.h"
#include "format/gguf.h"
#include "format/hf_model.h"
#include "format/json_file.h"
#include "tokenizer/tokenizer.h"

namespace tessera::cli {
namespace {

struct TokenizeOptions {
  std::string model;
  std::string tokenizer_json;
  std::string prompt;
  std::string prompt_file;
  std::string texts_file;
  bool bos = false;
  bool special = false;
  bool pieces = false;
};

int run_tokenize(const TokenizeOptions& o) {
  TESSERA_CHECK(!o.model.empty() || !o.tokenizer_json.empty(), kInvalidArgument,
                "give a model (-m) or a tokenizer.json (--tokenizer-json)");
  TESSERA_CHECK(o.prompt.empty() || o.prompt_file.empty(), kInvalidArgument, "give -p or -f, not both");
  std::unique_ptr<Tokenizer> tok = !o.tokenizer_json.empty() ? Tokenizer::from_hf_json(o.tokenizer_json)
                                   : hf::is_folder(o.model)    ? Tokenizer::from_hf_json(hf::tokenizer_json_path(o.model))
                                                               : Tokenizer::from_gguf(gguf::File::open(o.model));
  if (!o.texts_file.empty()) {
    TESSERA_CHECK(o.prompt.empty() && o.prompt_file.empty(), kInvalidArgument, "give -p, -f or --texts, not two");
    const nlohmann::json texts = read_json_file(o.texts_file);
    TESSERA_CHECK(texts.is_array(), kInvalidArgument, "{}: not a JSON array of strings", o.texts_file);
    for (size_t i = 0; i < texts.size(); ++i) {
      TESSERA_CHECK(texts[i].is_string(), kInvalidArgument, "{}[{}] is not a string", o.texts_file, i);
      const std::vector<int32_t> ids = tok->encode(texts[i].get_ref<const std::string&>(), o.bos, o.special);
      const nlohmann::json line = {{"ids", ids}, {"decoded", tok->decode(ids, /*render_special=*/true)}};
      std::printf("%s\n", line.dump().c_str());
    }
    return 0;
  }
  std::string text = o.prompt;
  if (!o.prompt_file.empty()) {
    const MappedFile file(o.prompt_file);
    text.clear();
    if (file.size() > 0) text.assign(reinterpret_cast<const char*>(file.data()), file.size());
  }
  const std::vector<int32_t> ids = tok->encode(text, o.bos, o.special);
  std::printf("%s\n", nlohmann::json(ids).dump().c_str());
  if (o.pieces) {
    nlohmann::json pieces = nlohmann::json::array();
    for (const int32_t id : ids) pieces.push_back(tok->token_to_piece(id, /*render_special=*/true));
    // A piece can be part of a character (a byte-fallback token): shown as U+FFFD.
    std::printf("%s\n", pieces.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  }
  return 0;
}

TESSERA_COMMAND("tokenize", "Print the token ids of a text", [](CLI::App& sub) {
  auto o = std::make_shared<TokenizeOptions>();
  sub.add_option("-m,--model", o->model, "GGUF file whose tokenizer.ggml.* metadata to use");
  sub.add_option("--tokenizer-json", o->tokenizer_json, "Hugging Face tokenizer.json to use instead of -m");
  sub.add_option("-p,--prompt", o->prompt, "Text to tokenize");
  sub.add_option("-f,--file", o->prompt_file, "Read the text from this file");
  sub.add_option("--texts", o->texts_file, "A JSON array of texts: one {\"ids\", \"decoded\"} line each");
  sub.add_flag("--bos", o->bos, "Add BOS (and EOS) as the model's metadata says");
  sub.add_flag("--special", o->special, "Map control-token texts such as <|im_start|> to their ids");
  sub.add_flag("--pieces", o->pieces, "Also print each token's piece (a JSON array of strings)");
  return [o]() { return run_tokenize(*o); };
});

}  // namespace
}  // namespace tessera::cli
