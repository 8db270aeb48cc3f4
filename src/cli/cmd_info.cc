// tessera info: print a GGUF file's metadata and tensor list.
#include <cstdio>

#include <fmt/format.h>

#include "cli/command.h"
#include "core/cpu.h"
#include "format/gguf.h"
#include "format/hf_model.h"

namespace tessera::cli {
namespace {

std::string value_to_string(const gguf::Value& v) {
  using gguf::ValueType;
  switch (v.type) {
    case ValueType::kString: return v.s.size() > 80 ? "\"" + v.s.substr(0, 77) + "...\"" : "\"" + v.s + "\"";
    case ValueType::kF32: case ValueType::kF64: return fmt::format("{}", v.f);
    case ValueType::kBool: return v.i ? "true" : "false";
    case ValueType::kArray:
      return fmt::format("[{} x {}]", v.array->size(), gguf::value_type_name(v.array->elem_type));
    case ValueType::kU8: case ValueType::kU16: case ValueType::kU32: case ValueType::kU64:
      return fmt::format("{}", v.u);
    default: return fmt::format("{}", v.i);
  }
}

TESSERA_COMMAND("info", "Print a GGUF file's (or a Hugging Face folder's, as GGUF) metadata and tensors", [](CLI::App& sub) {
  auto model = std::make_shared<std::string>();
  auto tensors = std::make_shared<bool>(false);
  sub.add_option("-m,--model", *model, "GGUF file or Hugging Face folder")->required();
  sub.add_flag("--tensors", *tensors, "List every tensor");
  return [=]() {
    const gguf::File f = hf::is_folder(*model) ? hf::open_folder(*model) : gguf::File::open(*model);
    std::printf("file: %s\nversion: %u\nalignment: %lu\ncpu: %s\n", model->c_str(), f.version(),
                static_cast<unsigned long>(f.alignment()), cpu_summary().c_str());
    for (const auto& [k, v] : f.metadata()) std::printf("%s = %s\n", k.c_str(), value_to_string(v).c_str());
    std::printf("tensors: %zu\n", f.tensors().size());
    if (*tensors) {
      for (const auto& t : f.tensors()) {
        std::printf("  %-32s %-6s %s\n", t.name.c_str(), std::string(dtype_name(t.type)).c_str(),
                    t.shape_string().c_str());
      }
    }
    return 0;
  };
});

}  // namespace
}  // namespace tessera::cli
