#include "model/convert.h"

#include <cstring>
#include <filesystem>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "kernels/quant.h"
#include "format/gguf_writer.h"
#include "format/hf_model.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace tessera {

void write_gguf(const gguf::File& in, const std::string& path, std::optional<DType> matrix_type,
                const std::vector<std::pair<std::string, gguf::Value>>& extra_metadata) {
  if (matrix_type) {
    TESSERA_CHECK(kernels::can_quantize(*matrix_type), kInvalidArgument, "cannot write matrices of type {}",
                  dtype_name(*matrix_type));
  }
  gguf::Writer w;
  for (const auto& [key, value] : in.metadata()) {
    if (key != "general.file_type") w.set_value(key, value);
  }
  for (const auto& [key, value] : extra_metadata) {
    TESSERA_CHECK(!in.has(key), kInvalidArgument, "{}: metadata key '{}' is already in the file", in.path(), key);
    w.set_value(key, value);
  }
  const gguf::TensorInfo* embd = in.find_tensor("token_embd.weight");
  const DType file_type = matrix_type.value_or(embd != nullptr ? embd->type : DType::kF32);
  w.set_u32("general.file_type", gguf::llama_file_type(file_type));
  for (const gguf::TensorInfo& t : in.tensors()) {
    const DType type = t.n_dims == 2 && matrix_type ? *matrix_type : t.type;
    std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
    if (type == t.type) {
      w.add_tensor(t.name, type, ne, [&t](uint8_t* out, size_t n) { std::memcpy(out, t.data, n); });
      continue;
    }
    TESSERA_CHECK(kernels::can_dequantize(t.type), kInvalidArgument, "{}: tensor '{}' of type {} cannot be converted",
                  in.path(), t.name, dtype_name(t.type));
    const int64_t bs = dtype_traits(type).block_size;
    TESSERA_CHECK(t.ne[0] % bs == 0, kInvalidArgument, "{}: tensor '{}' rows of {} values do not split into {} blocks "
                  "of {}", in.path(), t.name, t.ne[0], dtype_name(type), bs);
    w.add_tensor(t.name, type, ne, [&t, type](uint8_t* out, size_t) {
      const int64_t cols = t.ne[0], rows = t.n_elements() / cols;
      const size_t in_rb = row_bytes(t.type, cols), out_rb = row_bytes(type, cols);
      std::vector<float> row(static_cast<size_t>(cols));
      for (int64_t r = 0; r < rows; ++r) {
        kernels::dequantize_row(t.type, t.data + in_rb * static_cast<size_t>(r), row.data(), cols);
        kernels::quantize_row(type, row.data(), out + out_rb * static_cast<size_t>(r), cols);
      }
    });
  }
  w.write(path);
}

void convert_model(const LoadedModel& lm, const std::string& path, std::optional<DType> matrix_type) {
  std::vector<std::pair<std::string, gguf::Value>> tokenizer;
  if (!lm.hf_folder.empty()) {
    const std::string json_path = hf::tokenizer_json_path(lm.hf_folder);
    if (std::filesystem::exists(json_path)) {
      const gguf::TensorInfo* embd = lm.file->find_tensor("token_embd.weight");
      tokenizer = hf_tokenizer_gguf_metadata(json_path, embd != nullptr ? embd->ne[1] : 0);
    } else {
      TESSERA_LOG_WARN("{}: no tokenizer.json: the GGUF gets no tokenizer, and llama.cpp will not load it",
                       lm.hf_folder);
    }
  }
  write_gguf(*lm.file, path, matrix_type, tokenizer);
}

}  // namespace tessera
