// GGUF (v2, v3) reader over a memory map.
//
// Everything the file claims (counts, lengths, offsets, dimensions) is checked
// against the file's size before it is used, so a truncated, corrupt or
// hostile file produces one precise Error(kCorruptFile) and never a crash or
// an allocation out of proportion to the file's size.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/mmap_file.h"

namespace tessera::gguf {

enum class ValueType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};
std::string_view value_type_name(ValueType t);

struct Value;

// A GGUF array. Numbers are kept widened (integers as int64/uint64, floats as
// double) so one accessor serves every element width; strings and nested
// arrays keep their own storage.
struct Array {
  ValueType elem_type = ValueType::kU8;
  std::vector<int64_t> ints;    // kI8..kI64 and kBool
  std::vector<uint64_t> uints;  // kU8..kU64
  std::vector<double> floats;   // kF32, kF64
  std::vector<std::string> strings;
  std::vector<Array> arrays;    // nested arrays
  size_t size() const;
};

struct Value {
  ValueType type = ValueType::kU8;
  int64_t i = 0;      // signed integers and bool
  uint64_t u = 0;     // unsigned integers
  double f = 0;       // floats
  std::string s;      // string
  std::shared_ptr<Array> array;  // array (shared: cheap to copy a Value)
};

struct TensorInfo {
  std::string name;
  DType type = DType::kF32;
  int n_dims = 0;
  int64_t ne[4] = {1, 1, 1, 1};  // ne[0] is the contiguous (innermost) dimension
  uint64_t offset = 0;           // from the start of the data section
  size_t n_bytes = 0;
  // Into the mapping; null in a File opened with Mapping::kOnDemand, whose
  // tensors' bytes come from File::bytes / File::read.
  const uint8_t* data = nullptr;
  uint32_t part = 0;         // on demand: the part of a split model holding it
  uint64_t file_offset = 0;  // on demand: where its bytes start in that part's file

  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  std::string shape_string() const;  // "[64, 512]"
};

// kWhole maps the file (every part of a split model) at open. kOnDemand maps
// only the header, then what File::bytes asks for: a tensor parallel rank's
// address space holds its slices, not the whole model. A file with
// variable-size tensors (sparse, QMoE) is mapped whole either way.
enum class Mapping { kWhole, kOnDemand };

class File {
 public:
  // Maps and parses `path`. Throws Error(kIo) or Error(kCorruptFile). A
  // model split by llama.cpp's gguf-split (split.count > 1) is opened from
  // its first part, PREFIX-00001-of-0000N.gguf: every part is mapped and
  // their tensors form one file (a missing or mismatched part is named).
  static File open(const std::string& path, Mapping mapping = Mapping::kWhole);
  // Parses an in-memory image (used by tests and the fuzzer); `data` must
  // outlive the File.
  static File parse(const uint8_t* data, size_t size, std::string name = "<memory>");
  // A model file that is not a GGUF image, translated into this view (a
  // Hugging Face folder, format/hf_model.h): metadata as llama.cpp's converter
  // would write it, and tensors (name, type, ne, n_bytes, data) whose bytes
  // live in `owners` (mappings, converted buffers), kept alive with the File.
  // Throws Error(kCorruptFile) on a duplicate key or tensor name.
  static File assemble(std::string path, std::vector<std::pair<std::string, Value>> metadata,
                       std::vector<TensorInfo> tensors, std::vector<std::shared_ptr<const void>> owners);

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  const std::string& path() const { return path_; }

  // Metadata, in file order.
  const std::vector<std::pair<std::string, Value>>& metadata() const { return kv_; }
  const Value* find(std::string_view key) const;
  bool has(std::string_view key) const { return find(key) != nullptr; }

  // Typed getters. The *_or variants return `fallback` when the key is
  // absent; all throw Error(kCorruptFile) naming the key when it is present
  // with an incompatible type, and the plain ones when it is absent.
  uint64_t get_uint(std::string_view key) const;
  uint64_t get_uint_or(std::string_view key, uint64_t fallback) const;
  int64_t get_int(std::string_view key) const;
  double get_float(std::string_view key) const;
  double get_float_or(std::string_view key, double fallback) const;
  bool get_bool_or(std::string_view key, bool fallback) const;
  const std::string& get_string(std::string_view key) const;
  std::string get_string_or(std::string_view key, std::string fallback) const;
  const Array& get_array(std::string_view key) const;
  const Array* find_array(std::string_view key) const;  // nullptr if absent

  // Bytes [begin, begin + n) of tensor t (one of tensors()): in the mapping,
  // or (on demand) mapped now, only their pages, kept while the File lives;
  // the whole tensor is mapped once however often it is asked for.
  const uint8_t* bytes(const TensorInfo& t, size_t begin, size_t n) const;
  const uint8_t* bytes(const TensorInfo& t) const { return bytes(t, 0, t.n_bytes); }
  // Copies bytes [begin, begin + n) of tensor t (on demand: read, not mapped).
  void read(const TensorInfo& t, size_t begin, size_t n, void* out) const;
  // Keeps `owner` (a buffer that weight views point into, at `data`) as long
  // as the File, or until drop(data): for a copy no one reads any more.
  void keep(std::shared_ptr<const void> owner, const void* data = nullptr) const;
  void drop(const void* data) const;
  bool on_demand() const { return !on_demand_->parts.empty(); }

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const;
  // Throws Error(kCorruptFile) "missing tensor 'name'" when absent.
  const TensorInfo& tensor(std::string_view name) const;

 private:
  static File open_split(File first, Mapping mapping);
  // available != SIZE_MAX: data holds only that many bytes (a prefix, the
  // header on demand); tensors then get no data pointer.
  static File parse_impl(const uint8_t* data, size_t size, std::string name, size_t available = SIZE_MAX);
  static std::optional<File> parse_on_demand(const std::shared_ptr<RangeFile>& file, uint32_t part);
  File() = default;
  // What File::bytes maps and File::keep holds (shared: a File is moved).
  struct OnDemand {
    std::vector<std::shared_ptr<RangeFile>> parts;  // empty: mapped whole
    std::mutex mu;
    std::vector<std::pair<const void*, std::shared_ptr<const void>>> kept;
    std::map<std::pair<uint32_t, uint64_t>, const uint8_t*> whole;  // (part, file offset) -> whole tensor
  };
  std::shared_ptr<OnDemand> on_demand_ = std::make_shared<OnDemand>();
  std::string path_;
  std::vector<std::shared_ptr<const void>> owners_;  // what tensor data points into
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, Value>> kv_;
  std::map<std::string, size_t, std::less<>> kv_index_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

// Integer accessors over an Array whatever its element width; throw on a
// non-integer array or values out of the target range.
std::vector<int64_t> array_as_ints(const Array& a, std::string_view what);
std::vector<float> array_as_floats(const Array& a, std::string_view what);

}  // namespace tessera::gguf
