#include "format/safetensors.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace tessera::safetensors {
namespace {

using nlohmann::json;

// The reference implementation refuses headers over 100 MB; the deepest
// valid nesting is 3 (file object, tensor object, shape array).
constexpr uint64_t kMaxHeader = 100u << 20;
constexpr int kMaxDepth = 3;
constexpr size_t kMaxDims = 8;

struct DtypeInfo {
  std::string_view name;
  size_t size;
};
constexpr DtypeInfo kDtypes[] = {
    {"BOOL", 1}, {"U8", 1},   {"I8", 1},   {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"I16", 2}, {"U16", 2},
    {"F16", 2},  {"BF16", 2}, {"I32", 4},  {"U32", 4},     {"F32", 4},     {"F64", 8}, {"I64", 8},
    {"U64", 8},
};

json parse_header(const uint8_t* begin, const uint8_t* end, const std::string& file) {
  // A callback that refuses deep nesting before the parser builds it.
  const json::parser_callback_t depth_limit = [&file](int depth, json::parse_event_t, json&) {
    if (depth > kMaxDepth) fail(ErrorCode::kCorruptFile, "{}: header JSON nests deeper than {}", file, kMaxDepth);
    return true;
  };
  try {
    return json::parse(begin, end, depth_limit);
  } catch (const json::exception& e) {
    // The parser's message quotes what it last read: file bytes, which a
    // client loading an arbitrary path must not get back. The offset only.
    const auto* pe = dynamic_cast<const json::parse_error*>(&e);
    fail(ErrorCode::kCorruptFile, "{}: not a safetensors file (its header is not valid JSON{})", file,
         pe != nullptr ? fmt::format(" at byte {}", pe->byte + 8) : "");
  }
}

// One tensor entry, checked against the data section [data, data + size).
Tensor read_entry(const std::string& name, const json& j, const uint8_t* data, uint64_t size,
                  const std::string& file) {
  auto bad = [&](std::string_view what) -> void {
    fail(ErrorCode::kCorruptFile, "{}: tensor '{}': {}", file, name, what);
  };
  if (!j.is_object()) bad("entry is not an object");
  Tensor t;
  t.name = name;
  const auto dtype = j.find("dtype");
  if (dtype == j.end() || !dtype->is_string()) bad("no \"dtype\" string");
  t.dtype = dtype->get<std::string>();
  const size_t elem = dtype_size(t.dtype);
  if (elem == 0) bad(fmt::format("unknown dtype '{}'", t.dtype));
  const auto shape = j.find("shape");
  if (shape == j.end() || !shape->is_array() || shape->size() > kMaxDims) {
    bad(fmt::format("\"shape\" must be an array of at most {} dimensions", kMaxDims));
  }
  uint64_t n = 1;
  for (const json& d : *shape) {
    if (!d.is_number_unsigned()) bad(fmt::format("shape {} holds a value that is not a non-negative integer", shape->dump()));
    const uint64_t v = d.get<uint64_t>();
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) || (v != 0 && n > size / v)) {
      bad(fmt::format("shape {} is larger than the file", shape->dump()));
    }
    n *= v;
    t.shape.push_back(static_cast<int64_t>(v));
  }
  const auto offsets = j.find("data_offsets");
  if (offsets == j.end() || !offsets->is_array() || offsets->size() != 2 || !(*offsets)[0].is_number_unsigned() ||
      !(*offsets)[1].is_number_unsigned()) {
    bad("\"data_offsets\" must be [begin, end] with non-negative integers");
  }
  const uint64_t b = (*offsets)[0].get<uint64_t>(), e = (*offsets)[1].get<uint64_t>();
  if (b > e || e > size) {
    bad(fmt::format("data_offsets [{}, {}] lie outside the data section of {} bytes", b, e, size));
  }
  if (n > size / elem || e - b != n * elem) {
    bad(fmt::format("data_offsets [{}, {}] hold {} bytes, but {} of {} take {}", b, e, e - b, shape->dump(), t.dtype,
                    n > size / elem ? std::string("more than the file") : std::to_string(n * elem)));
  }
  t.data = data + b;
  t.n_bytes = static_cast<size_t>(e - b);
  return t;
}

}  // namespace

int64_t Tensor::n_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

size_t dtype_size(std::string_view dtype) {
  for (const DtypeInfo& d : kDtypes) {
    if (d.name == dtype) return d.size;
  }
  return 0;
}

DType to_dtype(std::string_view dtype, std::string_view where) {
  if (dtype == "F32") return DType::kF32;
  if (dtype == "F16") return DType::kF16;
  if (dtype == "BF16") return DType::kBF16;
  fail(ErrorCode::kCorruptFile, "{}: dtype {} is not supported (supported: F32, F16, BF16)", where, dtype);
}

std::string_view dtype_string(DType t) {
  switch (t) {
    case DType::kF32: return "F32";
    case DType::kF16: return "F16";
    case DType::kBF16: return "BF16";
    default: fail(ErrorCode::kInvalidArgument, "safetensors holds F32, F16 or BF16, not {}", dtype_name(t));
  }
}

File File::open(const std::string& path) {
  auto mapping = std::make_shared<MappedFile>(path);
  File f = parse(mapping->data(), mapping->size(), path);
  f.mapping_ = std::move(mapping);
  return f;
}

File File::parse(const uint8_t* data, size_t size, std::string name) {
  File f;
  f.path_ = std::move(name);
  if (size < 8) fail(ErrorCode::kCorruptFile, "{}: {} bytes is too short for a safetensors file", f.path_, size);
  uint64_t n = 0;
  std::memcpy(&n, data, 8);
  if (n > size - 8 || n > kMaxHeader) {
    // n is the file's first 8 bytes: not quoted (see parse_header).
    fail(ErrorCode::kCorruptFile,
         "{}: not a safetensors file (the header length in its first 8 bytes exceeds the file, {} bytes, or the "
         "{}-byte limit)",
         f.path_, size, kMaxHeader);
  }
  const json header = parse_header(data + 8, data + 8 + n, f.path_);
  if (!header.is_object()) fail(ErrorCode::kCorruptFile, "{}: header is not a JSON object", f.path_);
  const uint8_t* section = data + 8 + n;
  const uint64_t section_size = size - 8 - n;
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) fail(ErrorCode::kCorruptFile, "{}: __metadata__ is not an object", f.path_);
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string()) fail(ErrorCode::kCorruptFile, "{}: __metadata__ '{}' is not a string", f.path_, mk);
        f.metadata_.emplace_back(mk, mv.get<std::string>());
      }
      continue;
    }
    f.tensors_.push_back(read_entry(key, value, section, section_size, f.path_));
  }
  // No two tensors share bytes (json objects already have unique keys).
  std::vector<const Tensor*> by_offset;
  for (const Tensor& t : f.tensors_) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(), [](const Tensor* a, const Tensor* b) { return a->data < b->data; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const Tensor& prev = *by_offset[i - 1];
    if (prev.n_bytes > 0 && prev.data + prev.n_bytes > by_offset[i]->data) {
      fail(ErrorCode::kCorruptFile, "{}: tensors '{}' and '{}' overlap", f.path_, prev.name, by_offset[i]->name);
    }
  }
  return f;
}

const Tensor* File::find(std::string_view name) const {
  for (const Tensor& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

void write(const std::string& path, const std::vector<TensorToWrite>& tensors,
           const std::vector<std::pair<std::string, std::string>>& metadata) {
  json header = json::object();
  if (!metadata.empty()) {
    json m = json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    header["__metadata__"] = m;
  }
  std::vector<size_t> sizes;
  uint64_t offset = 0;
  for (const TensorToWrite& t : tensors) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    const size_t bytes = static_cast<size_t>(n) * dtype_traits(t.type).type_size;
    header[t.name] = {{"dtype", dtype_string(t.type)}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    sizes.push_back(bytes);
    offset += bytes;
  }
  std::string text = header.dump();
  text.resize((text.size() + 8 + 7) / 8 * 8 - 8, ' ');
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "wb"), &std::fclose);
  TESSERA_CHECK(f != nullptr, kIo, "cannot create '{}': {}", path, std::strerror(errno));
  auto write_all = [&](const void* p, size_t n) {
    TESSERA_CHECK(std::fwrite(p, 1, n, f.get()) == n, kIo, "write to '{}' failed: {}", path, std::strerror(errno));
  };
  const uint64_t n = text.size();
  write_all(&n, 8);
  write_all(text.data(), text.size());
  for (size_t i = 0; i < tensors.size(); ++i) write_all(tensors[i].data, sizes[i]);
  TESSERA_CHECK(std::fflush(f.get()) == 0, kIo, "write to '{}' failed: {}", path, std::strerror(errno));
}

}  // namespace tessera::safetensors
