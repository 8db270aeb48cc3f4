// tessera convert: a Hugging Face folder (or a GGUF) to a GGUF with
// llama.cpp's metadata layout and tensor names, its matrices optionally in
// another type; a folder's tokenizer.json becomes tokenizer.ggml.* metadata.
#include <optional>

#include "cli/command.h"
#include "core/error.h"
#include "core/log.h"
#include "model/convert.h"
#include "model/model.h"

namespace tessera::cli {
namespace {

struct ConvertArgs {
  std::string model;
  std::string out;
  std::string type;
};

// The model is built first, so a folder that would not load (an unknown key
// or tensor, a wrong shape) is refused before anything is written.
TESSERA_COMMAND("convert", "Convert a Hugging Face folder to GGUF", [](CLI::App& sub) {
  auto a = std::make_shared<ConvertArgs>();
  sub.add_option("model", a->model, "Hugging Face folder (config.json, *.safetensors) or GGUF")->required();
  sub.add_option("-o,--out", a->out, "Output GGUF path")->required();
  sub.add_option("--type", a->type, "Type of the matrices: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, iq4_nl, iq4_xs, mxfp4, tq1_0, tq2_0 (default: as stored)");
  return [a]() {
    std::optional<DType> type;
    if (!a->type.empty()) {
      type = parse_dtype(a->type);
      TESSERA_CHECK(type.has_value(), kInvalidArgument, "unknown type '{}'", a->type);
    }
    const LoadedModel lm = load_model(a->model);
    convert_model(lm, a->out, type);
    TESSERA_LOG_INFO("wrote {} ({} tensors)", a->out, lm.file->tensors().size());
    return 0;
  };
});

}  // namespace
}  // namespace tessera::cli
