// tessera info: print a GGUF file's metadata, tensor list and type mix.
#include <algorithm>
#include <cstdio>
#include <map>

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

// The type mix: parameters and bytes per tensor type, bits per weight, and
// for a mixture of experts the share of the parameters one token uses.
void print_weights(const gguf::File& f) {
  struct Mix {
    int64_t tensors = 0, params = 0;
    size_t bytes = 0;
  };
  std::map<std::string, Mix> by_type;
  Mix all, experts;
  for (const gguf::TensorInfo& t : f.tensors()) {
    for (Mix* m : {&by_type[std::string(dtype_name(t.type))], &all}) {
      m->tensors += 1;
      m->params += t.n_elements();
      m->bytes += t.n_bytes;
    }
    if (t.name.find("_exps.") != std::string::npos) {
      experts.params += t.n_elements();
      experts.bytes += t.n_bytes;
    }
  }
  if (all.params == 0) return;
  const auto bits = [](const Mix& m) { return 8.0 * static_cast<double>(m.bytes) / static_cast<double>(m.params); };
  std::printf("weights: %.4g parameters in %.1f MiB, %.2f bits per weight\n", static_cast<double>(all.params),
              static_cast<double>(all.bytes) / (1 << 20), bits(all));
  for (const auto& [type, m] : by_type) {
    std::printf("  %-6s %5lld tensors %12lld parameters %9.1f MiB  %5.1f%% of the bytes  %.2f bits per weight\n",
                type.c_str(), static_cast<long long>(m.tensors), static_cast<long long>(m.params),
                static_cast<double>(m.bytes) / (1 << 20), 100.0 * static_cast<double>(m.bytes) / static_cast<double>(all.bytes),
                bits(m));
  }
  const std::string arch = f.get_string_or("general.architecture", "");
  if (experts.params == 0 || !f.has(arch + ".expert_count") || !f.has(arch + ".expert_used_count")) return;
  const double share = static_cast<double>(f.get_uint(arch + ".expert_used_count")) /
                       static_cast<double>(std::max<uint64_t>(f.get_uint(arch + ".expert_count"), 1));
  const double active = static_cast<double>(all.params - experts.params) + share * static_cast<double>(experts.params);
  std::printf("experts: %.1f%% of the parameters (%.1f MiB); a token uses %llu of %llu per layer: %.4g active "
              "parameters (%.1f%%)\n", 100.0 * static_cast<double>(experts.params) / static_cast<double>(all.params),
              static_cast<double>(experts.bytes) / (1 << 20),
              static_cast<unsigned long long>(f.get_uint(arch + ".expert_used_count")),
              static_cast<unsigned long long>(f.get_uint(arch + ".expert_count")), active,
              100.0 * active / static_cast<double>(all.params));
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
    print_weights(f);
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
