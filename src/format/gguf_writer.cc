#include "format/gguf_writer.h"

#include <cerrno>
#include <cstring>
#include <memory>

#include "core/error.h"

namespace tessera::gguf {
namespace {

template <class T>
void put(std::vector<uint8_t>& out, T v) {
  const size_t at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &v, sizeof(T));
}

void put_string(std::vector<uint8_t>& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}

void put_scalar(std::vector<uint8_t>& out, ValueType t, int64_t i, uint64_t u, double f) {
  switch (t) {
    case ValueType::kU8: put<uint8_t>(out, static_cast<uint8_t>(u)); break;
    case ValueType::kI8: put<int8_t>(out, static_cast<int8_t>(i)); break;
    case ValueType::kU16: put<uint16_t>(out, static_cast<uint16_t>(u)); break;
    case ValueType::kI16: put<int16_t>(out, static_cast<int16_t>(i)); break;
    case ValueType::kU32: put<uint32_t>(out, static_cast<uint32_t>(u)); break;
    case ValueType::kI32: put<int32_t>(out, static_cast<int32_t>(i)); break;
    case ValueType::kU64: put<uint64_t>(out, u); break;
    case ValueType::kI64: put<int64_t>(out, i); break;
    case ValueType::kF32: put<float>(out, static_cast<float>(f)); break;
    case ValueType::kF64: put<double>(out, f); break;
    case ValueType::kBool: put<uint8_t>(out, i ? 1 : 0); break;
    default: TESSERA_ASSERT(false);
  }
}

void put_array(std::vector<uint8_t>& out, const Array& a) {
  put<uint32_t>(out, static_cast<uint32_t>(a.elem_type));
  put<uint64_t>(out, a.size());
  switch (a.elem_type) {
    case ValueType::kString:
      for (const auto& s : a.strings) put_string(out, s);
      break;
    case ValueType::kArray:
      for (const auto& sub : a.arrays) put_array(out, sub);
      break;
    case ValueType::kF32: case ValueType::kF64:
      for (double f : a.floats) put_scalar(out, a.elem_type, 0, 0, f);
      break;
    case ValueType::kU8: case ValueType::kU16: case ValueType::kU32: case ValueType::kU64:
      for (uint64_t u : a.uints) put_scalar(out, a.elem_type, 0, u, 0);
      break;
    default:
      for (int64_t i : a.ints) put_scalar(out, a.elem_type, i, 0, 0);
      break;
  }
}

Value scalar(ValueType t) {
  Value v;
  v.type = t;
  return v;
}

bool power_of_two(uint64_t x) { return x != 0 && (x & (x - 1)) == 0; }

}  // namespace

uint32_t llama_file_type(DType t) {
  switch (t) {
    case DType::kF32: return 0;
    case DType::kF16: return 1;
    case DType::kQ4_0: return 2;
    case DType::kQ4_1: return 3;
    case DType::kQ8_0: return 7;
    case DType::kQ5_0: return 8;
    case DType::kQ5_1: return 9;
    case DType::kQ2_K: return 10;
    case DType::kQ3_K: return 11;   // Q3_K_S: every matrix Q3_K
    case DType::kQ4_K: return 14;   // Q4_K_S
    case DType::kQ5_K: return 16;   // Q5_K_S
    case DType::kQ6_K: return 18;
    case DType::kIQ4_NL: return 25;
    case DType::kIQ4_XS: return 30;
    case DType::kBF16: return 32;
    case DType::kTQ1_0: return 36;
    case DType::kTQ2_0: return 37;
    case DType::kMXFP4: return 38;
    default: return 0;
  }
}

Writer::Writer(uint64_t alignment) : alignment_(alignment) {
  TESSERA_CHECK(power_of_two(alignment) && alignment <= 65536, kInvalidArgument,
                "GGUF alignment {} is not a power of two <= 65536", alignment);
}

void Writer::set_u32(const std::string& key, uint32_t x) { Value v = scalar(ValueType::kU32); v.u = x; set_value(key, v); }
void Writer::set_i32(const std::string& key, int32_t x) { Value v = scalar(ValueType::kI32); v.i = x; set_value(key, v); }
void Writer::set_u64(const std::string& key, uint64_t x) { Value v = scalar(ValueType::kU64); v.u = x; set_value(key, v); }
void Writer::set_f32(const std::string& key, float x) { Value v = scalar(ValueType::kF32); v.f = x; set_value(key, v); }
void Writer::set_bool(const std::string& key, bool x) { Value v = scalar(ValueType::kBool); v.i = x; set_value(key, v); }
void Writer::set_string(const std::string& key, const std::string& x) { Value v = scalar(ValueType::kString); v.s = x; set_value(key, v); }

void Writer::set_strings(const std::string& key, const std::vector<std::string>& x) {
  Value v = scalar(ValueType::kArray);
  v.array = std::make_shared<Array>();
  v.array->elem_type = ValueType::kString;
  v.array->strings = x;
  set_value(key, v);
}

void Writer::set_f32s(const std::string& key, const std::vector<float>& x) {
  Value v = scalar(ValueType::kArray);
  v.array = std::make_shared<Array>();
  v.array->elem_type = ValueType::kF32;
  v.array->floats.assign(x.begin(), x.end());
  set_value(key, v);
}

void Writer::set_i32s(const std::string& key, const std::vector<int32_t>& x) {
  Value v = scalar(ValueType::kArray);
  v.array = std::make_shared<Array>();
  v.array->elem_type = ValueType::kI32;
  v.array->ints.assign(x.begin(), x.end());
  set_value(key, v);
}

void Writer::set_value(const std::string& key, const Value& v) {
  TESSERA_CHECK(v.type != ValueType::kArray || v.array != nullptr, kInvalidArgument,
                "metadata '{}': array value without an array", key);
  for (auto& [k, old] : kv_) {
    if (k == key) {
      old = v;
      return;
    }
  }
  kv_.emplace_back(key, v);
}

void Writer::add_tensor(const std::string& name, DType type, std::vector<int64_t> ne, Fill fill) {
  TESSERA_CHECK(!ne.empty() && ne.size() <= 4, kInvalidArgument, "tensor '{}' needs 1..4 dims", name);
  for (int64_t n : ne) TESSERA_CHECK(n > 0, kInvalidArgument, "tensor '{}' has a dimension of {}", name, n);
  for (const Tensor& t : tensors_) TESSERA_CHECK(t.name != name, kInvalidArgument, "duplicate tensor '{}'", name);
  const DTypeTraits tr = dtype_traits(type);
  TESSERA_CHECK(ne[0] % tr.block_size == 0, kInvalidArgument,
                "tensor '{}': row of {} is not a multiple of the {} block size {}", name, ne[0],
                tr.name, tr.block_size);
  int64_t rows = 1;
  for (size_t d = 1; d < ne.size(); ++d) rows *= ne[d];
  TESSERA_CHECK(dtype_fixed_size(type), kInvalidArgument, "tensor '{}': {} has no fixed size (add_sized_tensor)", name,
                tr.name);
  tensors_.push_back({name, type, std::move(ne), 0, std::move(fill)});
  tensors_.back().n_bytes = row_bytes(type, tensors_.back().ne[0]) * static_cast<size_t>(rows);
}

void Writer::add_sized_tensor(const std::string& name, DType type, std::vector<int64_t> ne, size_t n_bytes,
                              Fill fill) {
  TESSERA_CHECK(!dtype_fixed_size(type), kInvalidArgument, "tensor '{}': {} has a fixed size (add_tensor)", name,
                dtype_name(type));
  TESSERA_CHECK(!ne.empty() && ne.size() <= 4, kInvalidArgument, "tensor '{}' needs 1..4 dims", name);
  for (int64_t n : ne) TESSERA_CHECK(n > 0, kInvalidArgument, "tensor '{}' has a dimension of {}", name, n);
  for (const Tensor& t : tensors_) TESSERA_CHECK(t.name != name, kInvalidArgument, "duplicate tensor '{}'", name);
  tensors_.push_back({name, type, std::move(ne), n_bytes, std::move(fill)});
}

void Writer::put_header_value(std::vector<uint8_t>& out, const Value& v) const {
  put<uint32_t>(out, static_cast<uint32_t>(v.type));
  if (v.type == ValueType::kString) {
    put_string(out, v.s);
  } else if (v.type == ValueType::kArray) {
    put_array(out, *v.array);
  } else {
    put_scalar(out, v.type, v.i, v.u, v.f);
  }
}

// A general.alignment key set as metadata (e.g. copied from another file)
// decides the padding, since readers go by it.
std::optional<uint64_t> Writer::alignment_key() const {
  for (const auto& [k, v] : kv_) {
    if (k != "general.alignment") continue;
    const bool is_uint = v.type == ValueType::kU8 || v.type == ValueType::kU16 ||
                         v.type == ValueType::kU32 || v.type == ValueType::kU64;
    const bool is_int = v.type == ValueType::kI8 || v.type == ValueType::kI16 ||
                        v.type == ValueType::kI32 || v.type == ValueType::kI64;
    const uint64_t a = is_uint ? v.u : is_int && v.i > 0 ? static_cast<uint64_t>(v.i) : 0;
    TESSERA_CHECK(power_of_two(a) && a <= 65536, kInvalidArgument,
                  "general.alignment must be an integer power of two <= 65536");
    return a;
  }
  return std::nullopt;
}

void Writer::write(const std::string& path) const {
  const std::optional<uint64_t> key = alignment_key();
  const uint64_t alignment = key.value_or(alignment_);
  const bool add_alignment_key = !key && alignment != 32;
  std::vector<uint8_t> head;
  put<uint32_t>(head, 0x46554747);
  put<uint32_t>(head, 3);
  put<uint64_t>(head, tensors_.size());
  put<uint64_t>(head, kv_.size() + (add_alignment_key ? 1 : 0));
  for (const auto& [k, v] : kv_) {
    put_string(head, k);
    put_header_value(head, v);
  }
  if (add_alignment_key) {
    put_string(head, "general.alignment");
    put<uint32_t>(head, static_cast<uint32_t>(ValueType::kU32));
    put<uint32_t>(head, static_cast<uint32_t>(alignment));
  }
  uint64_t offset = 0;
  std::vector<uint64_t> offsets;
  for (const Tensor& t : tensors_) {
    put_string(head, t.name);
    put<uint32_t>(head, static_cast<uint32_t>(t.ne.size()));
    for (int64_t n : t.ne) put<uint64_t>(head, static_cast<uint64_t>(n));
    put<uint32_t>(head, static_cast<uint32_t>(t.type));
    put<uint64_t>(head, offset);
    offsets.push_back(offset);
    offset = (offset + t.n_bytes + alignment - 1) / alignment * alignment;
  }
  head.resize((head.size() + alignment - 1) / alignment * alignment, 0);

  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "wb"), &std::fclose);
  TESSERA_CHECK(f != nullptr, kIo, "cannot create '{}': {}", path, std::strerror(errno));
  auto write_all = [&](const void* p, size_t n) {
    TESSERA_CHECK(std::fwrite(p, 1, n, f.get()) == n, kIo, "write to '{}' failed: {}", path,
                  std::strerror(errno));
  };
  write_all(head.data(), head.size());
  std::vector<uint8_t> buf;
  uint64_t written = 0;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const Tensor& t = tensors_[i];
    if (written < offsets[i]) {
      const std::vector<uint8_t> pad(offsets[i] - written, 0);
      write_all(pad.data(), pad.size());
      written = offsets[i];
    }
    buf.assign(t.n_bytes, 0);
    t.fill(buf.data(), buf.size());
    write_all(buf.data(), buf.size());
    written += t.n_bytes;
  }
  TESSERA_CHECK(std::fflush(f.get()) == 0, kIo, "write to '{}' failed: {}", path, std::strerror(errno));
}

}  // namespace tessera::gguf
