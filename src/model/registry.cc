// Architecture name -> model. Adding an architecture: a file under
// model/arch/ and a line here.
#include <map>

#include "core/error.h"
#include "model/decoder.h"
#include "format/hf_model.h"
#include "model/loader.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace tessera {
namespace {

using Factory = std::unique_ptr<Model> (*)(ModelLoader&);

const std::map<std::string, Factory, std::less<>>& factories() {
  static const std::map<std::string, Factory, std::less<>> table = {
      {"llama", make_llama},
      {"mistral", make_llama},  // the llama topology; its sliding window from mistral.attention.sliding_window
      {"qwen2", make_qwen2},
      {"qwen3", make_qwen3},
      {"qwen2moe", make_qwen2moe},
      {"qwen3moe", make_qwen3moe},
      {"gemma2", make_gemma2},
      {"gemma3", make_gemma3},
      {"phi3", make_phi3},
      {"gpt-oss", make_gpt_oss},
  };
  return table;
}

}  // namespace

bool architecture_supported(std::string_view arch) { return factories().count(arch) != 0; }

LoadedModel load_model(const std::string& path, const TensorSplit& split) {
  LoadedModel m;
  if (hf::is_folder(path)) {
    m.hf_folder = path;
    m.file = std::make_shared<gguf::File>(hf::open_folder(path));
  } else {
    // A tensor-parallel rank maps only its slices (its address space, and a
    // limit on it, is its share of the model, not the whole file).
    m.file = std::make_shared<gguf::File>(
        gguf::File::open(path, split.size > 1 ? gguf::Mapping::kOnDemand : gguf::Mapping::kWhole));
  }
  const std::string arch = m.file->get_string("general.architecture");
  auto it = factories().find(arch);
  if (it == factories().end()) {
    std::string known;
    for (const auto& [name, _] : factories()) known += (known.empty() ? "" : ", ") + name;
    fail(ErrorCode::kCorruptFile, "{}: architecture '{}' is not supported (supported: {})", path, arch, known);
  }
  ModelLoader loader(*m.file, split);
  try {
    m.model = it->second(loader);
  } catch (const Error& e) {
    // A folder's missing tensor is named as the folder would hold it.
    const std::string msg = e.what();
    const size_t at = msg.find("missing tensor '");
    if (m.hf_folder.empty() || at == std::string::npos) throw;
    const size_t from = at + 16, to = msg.find('\'', from);
    const std::string hf_name = hf::hf_tensor_name(*m.file, msg.substr(from, to - from));
    if (hf_name.empty()) throw;
    fail(e.code(), "{}: missing tensor '{}'", path, hf_name);
  }
  loader.finish();
  return m;
}

std::unique_ptr<Tokenizer> load_tokenizer(const LoadedModel& lm) {
  if (!lm.hf_folder.empty()) return Tokenizer::from_hf_json(hf::tokenizer_json_path(lm.hf_folder));
  return Tokenizer::from_gguf(*lm.file);
}

}  // namespace tessera
