// Architecture name -> model. Adding an architecture: a file under
// model/arch/ and a line here.
#include <map>

#include "core/error.h"
#include "model/decoder.h"
#include "model/loader.h"
#include "model/model.h"

namespace tessera {
namespace {

using Factory = std::unique_ptr<Model> (*)(ModelLoader&);

const std::map<std::string, Factory, std::less<>>& factories() {
  static const std::map<std::string, Factory, std::less<>> table = {
      {"llama", make_llama},
      {"mistral", make_llama},  // the llama topology; its sliding window from mistral.attention.sliding_window
      {"qwen2", make_qwen2},
      {"qwen3", make_qwen3},
      {"gemma2", make_gemma2},
      {"gemma3", make_gemma3},
      {"phi3", make_phi3},
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
  ModelLoader loader(*m.file);
  m.model = it->second(loader);
  loader.finish();
  return m;
}

}  // namespace tessera
