#include "model/convert.h"

#include <cstring>
#include <vector>

#include "core/error.h"
#include "kernels/quant.h"
#include "model/gguf_writer.h"

namespace tessera {

void write_gguf(const gguf::File& in, const std::string& path, std::optional<DType> matrix_type) {
  if (matrix_type) {
    TESSERA_CHECK(kernels::can_quantize(*matrix_type), kInvalidArgument, "cannot write matrices of type {}",
                  dtype_name(*matrix_type));
  }
  gguf::Writer w;
  for (const auto& [key, value] : in.metadata()) {
    if (key != "general.file_type") w.set_value(key, value);
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

}  // namespace tessera
