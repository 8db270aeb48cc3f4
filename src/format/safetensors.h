// Safetensors reader and writer (the format of Hugging Face model folders):
// an 8-byte little-endian header length N, N bytes of JSON
//   {"<name>": {"dtype": "BF16", "shape": [rows, cols], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"<key>": "<string>", ...}}
// then the tensors' bytes, offsets relative to the end of the header.
//
// As for GGUF (format/gguf.h), everything the header claims is checked before
// it is used: the header length against the file, the JSON's nesting depth,
// each dtype, shape (no negative or overflowing dimension) and byte range
// (inside the data section, the size the shape and dtype give, no two
// tensors overlapping), so a corrupt or hostile file gives one
// Error(kCorruptFile) naming the file and the tensor, never a crash.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/mmap_file.h"

namespace tessera::safetensors {

struct Tensor {
  std::string name;
  std::string dtype;            // as the file spells it: "F32", "BF16", "I64", ...
  std::vector<int64_t> shape;   // outermost first (row-major): a matrix is [rows, cols]
  const uint8_t* data = nullptr;  // into the mapping
  size_t n_bytes = 0;

  int64_t n_elements() const;
};

// The element size of a dtype the format defines, or 0 for an unknown one.
size_t dtype_size(std::string_view dtype);
// Tessera's type for F32, F16 and BF16; throws Error(kCorruptFile) naming
// `where` for any other (Tessera computes with these only).
DType to_dtype(std::string_view dtype, std::string_view where);
// "F32", "F16" or "BF16"; throws Error(kInvalidArgument) for other types.
std::string_view dtype_string(DType t);

class File {
 public:
  // Maps and parses `path`. Throws Error(kIo) or Error(kCorruptFile).
  static File open(const std::string& path);
  // Parses an in-memory image (tests, the fuzzer); `data` must outlive the File.
  static File parse(const uint8_t* data, size_t size, std::string name = "<memory>");

  const std::string& path() const { return path_; }
  const std::vector<Tensor>& tensors() const { return tensors_; }  // by name
  const std::vector<std::pair<std::string, std::string>>& metadata() const { return metadata_; }
  const Tensor* find(std::string_view name) const;
  // The mapping the tensors point into (null for a parsed image).
  const std::shared_ptr<MappedFile>& mapping() const { return mapping_; }

 private:
  File() = default;
  std::string path_;
  std::shared_ptr<MappedFile> mapping_;
  std::vector<Tensor> tensors_;
  std::vector<std::pair<std::string, std::string>> metadata_;
};

// A tensor to write: its bytes must be shape's elements of `type` (F32, F16
// or BF16), row-major.
struct TensorToWrite {
  std::string name;
  DType type = DType::kF32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
};

// Writes a safetensors file (tensors in the given order, the header padded
// with spaces so the data starts 8-byte aligned, as the reference writer
// does). Throws Error(kIo) on failure.
void write(const std::string& path, const std::vector<TensorToWrite>& tensors,
           const std::vector<std::pair<std::string, std::string>>& metadata = {});

}  // namespace tessera::safetensors
