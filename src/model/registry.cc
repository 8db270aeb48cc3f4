// Architecture name -> model. Adding an architecture: a model file and a line here.
#include <functional>
#include <map>

#include "core/error.h"
#include "model/llama.h"
#include "model/model.h"

namespace tessera {
namespace {

using Factory = std::function<std::unique_ptr<Model>(const gguf::File&)>;

const std::map<std::string, Factory, std::less<>>& factories() {
  static const std::map<std::string, Factory, std::less<>> table = {
      {"llama", [](const gguf::File& f) { return std::make_unique<LlamaModel>(f, LlamaVariant{}); }},
      {"mistral", [](const gguf::File& f) { return std::make_unique<LlamaModel>(f, LlamaVariant{}); }},
      {"qwen2", [](const gguf::File& f) {
         return std::make_unique<LlamaModel>(f, LlamaVariant{.qkv_bias = true, .rope_neox = true});
       }},
  };
  return table;
}

}  // namespace

bool architecture_supported(std::string_view arch) { return factories().count(arch) != 0; }

LoadedModel load_model(const std::string& path) {
  LoadedModel m;
  m.file = std::make_shared<gguf::File>(gguf::File::open(path));
  const std::string arch = m.file->get_string("general.architecture");
  auto it = factories().find(arch);
  if (it == factories().end()) {
    std::string known;
    for (const auto& [name, _] : factories()) known += (known.empty() ? "" : ", ") + name;
    fail(ErrorCode::kCorruptFile, "{}: architecture '{}' is not supported (supported: {})", path, arch, known);
  }
  m.model = it->second(*m.file);
  return m;
}

}  // namespace tessera
