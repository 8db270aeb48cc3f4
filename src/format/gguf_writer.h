// GGUF v3 writer: metadata first, then tensor data streamed to the file, so a
// 1B-parameter model is written without holding it all in memory.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "format/gguf.h"

namespace tessera::gguf {

// general.file_type as llama.cpp numbers it (LLAMA_FTYPE_*) for a file
// whose matrices are mostly of type t; 0 (all F32) for a type without one.
uint32_t llama_file_type(DType t);

class Writer {
 public:
  // `alignment` must be a power of two; a general.alignment key set as
  // metadata takes precedence over it (it is what readers will use).
  explicit Writer(uint64_t alignment = 32);

  void set_u32(const std::string& key, uint32_t v);
  void set_i32(const std::string& key, int32_t v);
  void set_u64(const std::string& key, uint64_t v);
  void set_f32(const std::string& key, float v);
  void set_bool(const std::string& key, bool v);
  void set_string(const std::string& key, const std::string& v);
  void set_strings(const std::string& key, const std::vector<std::string>& v);
  void set_f32s(const std::string& key, const std::vector<float>& v);
  void set_i32s(const std::string& key, const std::vector<int32_t>& v);
  // Copies a metadata value read from another file, whatever its type.
  void set_value(const std::string& key, const Value& v);

  // Declares a tensor whose bytes `fill` writes on demand into a buffer of
  // exactly row_bytes(type, ne[0]) * rows; `ne` is innermost first.
  using Fill = std::function<void(uint8_t* out, size_t n_bytes)>;
  void add_tensor(const std::string& name, DType type, std::vector<int64_t> ne, Fill fill);
  // A tensor of a variable-size type (dtype_fixed_size false: QMOE) of
  // n_bytes bytes.
  void add_sized_tensor(const std::string& name, DType type, std::vector<int64_t> ne, size_t n_bytes, Fill fill);

  // Writes the file; throws Error(kIo) on failure.
  void write(const std::string& path) const;

 private:
  struct Tensor {
    std::string name;
    DType type;
    std::vector<int64_t> ne;
    size_t n_bytes;
    Fill fill;
  };
  void put_header_value(std::vector<uint8_t>& out, const Value& v) const;
  std::optional<uint64_t> alignment_key() const;
  uint64_t alignment_;
  std::vector<std::pair<std::string, Value>> kv_;
  std::vector<Tensor> tensors_;
};

}  // namespace tessera::gguf
