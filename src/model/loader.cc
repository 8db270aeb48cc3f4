#include "model/loader.h"

#include <fmt/ranges.h>

#include <map>

#include "core/error.h"
#include "core/log.h"
#include "model/weights.h"

namespace tessera {
namespace {

// The one list of what a model file may hold that the model does not need,
// and why. A prefix ends with '.'; anything else under an architecture's
// prefix ("llama.") or unknown elsewhere is refused, since it could change
// what the model computes.
struct Ignored {
  const char* name;  // exact key, or a prefix ending with '.'
  const char* why;
};

constexpr Ignored kIgnoredKeys[] = {
    {"general.", "descriptive (name, license, file type, base models, ...)"},
    {"tokenizer.", "read by the tokenizer, not the model"},
    {"quantize.imatrix.", "how the weights were quantized"},
    {"split.", "shard bookkeeping of a split model (gguf::File::open joins the parts)"},
};

// Tensors llama.cpp's converters wrote that hold nothing the metadata does
// not already say: the rotary inverse frequencies of old Llama conversions
// (base^(-2i/n_rot), recomputed from rope.freq_base).
constexpr Ignored kIgnoredTensors[] = {
    {"attn_rot_embd", "rotary inverse frequencies, recomputed from rope.freq_base"},
};

const Ignored* ignored_key(std::string_view key) {
  for (const Ignored& i : kIgnoredKeys) {
    const std::string_view n = i.name;
    if (n.back() == '.' ? key.substr(0, n.size()) == n : key == n) return &i;
  }
  return nullptr;
}

// "blk.N.<name>.weight" or "<name>.weight" with <name> in kIgnoredTensors.
const Ignored* ignored_tensor(std::string_view name) {
  if (name.substr(0, 4) == "blk.") {
    const size_t dot = name.find('.', 4);
    if (dot != std::string_view::npos) name = name.substr(dot + 1);
  }
  for (const Ignored& i : kIgnoredTensors) {
    const std::string_view n = i.name;
    if (name.substr(0, n.size()) == n && (name.size() == n.size() || name[n.size()] == '.')) return &i;
  }
  return nullptr;
}

}  // namespace

ModelConfig ModelLoader::read_config(const ConfigOptions& options) {
  return tessera::read_config(f_, options, [this](const std::string& key) { keys_.insert(key); });
}

kernels::WeightView ModelLoader::matrix(const std::string& name, int64_t cols, int64_t rows) {
  tensors_.insert(name);
  const std::string padded = kPaddedColsKey + name;
  if (f_.has(padded)) {
    keys_.insert(padded);
    return load_padded_matrix(f_, name, cols, rows);
  }
  return load_matrix(f_, name, cols, rows);
}

kernels::WeightView ModelLoader::matrix_rows(const std::string& name, int64_t cols, int64_t rows, int64_t r0,
                                             int64_t n) {
  if (f_.has(kPaddedColsKey + name)) return tessera::matrix_rows(matrix(name, cols, rows), r0, n);
  tensors_.insert(name);
  return load_matrix_rows(f_, name, cols, rows, r0, n);
}

kernels::WeightView ModelLoader::matrix_cols(const std::string& name, int64_t cols, int64_t rows, int64_t c0,
                                             int64_t n) {
  if (f_.has(kPaddedColsKey + name)) return tessera::matrix_cols(matrix(name, cols, rows), c0, n);
  tensors_.insert(name);
  return load_matrix_cols(f_, name, cols, rows, c0, n);
}

kernels::PreparedWeight ModelLoader::w8a8_matrix(const std::string& name, int64_t cols, int64_t rows, MatrixPart part) {
  tensors_.insert(name);
  tensors_.insert(w8a8_scale_name(name));
  const bool w4 = f_.get_bool_or(kW4A8Key, false);
  if (f_.has(kW4A8Key)) keys_.insert(kW4A8Key);
  return load_w8a8_matrix(f_, name, cols, rows, w4 ? 4 : 8, part);
}

kernels::WeightView ModelLoader::expert_rows(const std::string& name, int64_t cols, int64_t rows, int64_t n_expert,
                                             int64_t e, int64_t r0, int64_t n) {
  tensors_.insert(name);
  return load_expert_rows(f_, name, cols, rows, n_expert, e, r0, n);
}

kernels::WeightView ModelLoader::expert_cols(const std::string& name, int64_t cols, int64_t rows, int64_t n_expert,
                                             int64_t e, int64_t c0, int64_t n) {
  tensors_.insert(name);
  return load_expert_cols(f_, name, cols, rows, n_expert, e, c0, n);
}

kernels::QmoeView ModelLoader::qmoe_experts(const std::string& name, int64_t cols, int64_t rows, int64_t n_expert) {
  tensors_.insert(name);
  return load_qmoe_experts(f_, name, cols, rows, n_expert);
}

std::vector<float> ModelLoader::vector(const std::string& name, int64_t n) {
  tensors_.insert(name);
  return load_vector(f_, name, n);
}

std::vector<float> ModelLoader::vectors(const std::string& name, int64_t n, int64_t count) {
  tensors_.insert(name);
  return load_vectors(f_, name, n, count);
}

void ModelLoader::finish() const {
  const std::string arch = f_.get_string_or("general.architecture", "?");
  std::map<const Ignored*, std::vector<std::string>> ignored;  // what was ignored, by reason
  for (const auto& [key, value] : f_.metadata()) {
    if (keys_.count(key) != 0) continue;
    const Ignored* why = ignored_key(key);
    if (why == nullptr) {
      fail(ErrorCode::kCorruptFile, "{}: metadata key '{}' is not supported by Tessera's '{}' model (it may change "
           "what the model computes)", f_.path(), key, arch);
    }
    ignored[why].push_back(key);
  }
  for (const gguf::TensorInfo& t : f_.tensors()) {
    if (tensors_.count(t.name) != 0) continue;
    const Ignored* why = ignored_tensor(t.name);
    if (why == nullptr) {
      fail(ErrorCode::kCorruptFile, "{}: tensor '{}' is not used by Tessera's '{}' model (it may change what the "
           "model computes)", f_.path(), t.name, arch);
    }
    ignored[why].push_back(t.name);
  }
  std::string list;
  for (const auto& [why, names] : ignored) {
    list += fmt::format("{}{}: {}", list.empty() ? "" : "; ", why->why, fmt::join(names, ", "));
  }
  TESSERA_LOG_DEBUG("{}: ignored {}", f_.path(), list.empty() ? "nothing" : list);
}

}  // namespace tessera
