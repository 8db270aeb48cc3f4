#include "format/gguf.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>

#include "core/error.h"

namespace tessera::gguf {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" little-endian
constexpr int kMaxArrayDepth = 8;
constexpr uint64_t kMaxStringLength = uint64_t{1} << 30;
constexpr int kMaxDims = 4;

// Thrown by a Cursor over a prefix of the file (File::open on demand) that
// needs bytes past the prefix: the caller maps a longer one and parses again.
struct NeedLongerPrefix {};

// A bounds-checked reader over the file image. Every read names what it was
// reading so the error says where the file went wrong.
class Cursor {
 public:
  // `available` bytes at data of a file of `size` bytes (available < size: a
  // prefix, see NeedLongerPrefix).
  Cursor(const uint8_t* data, size_t size, const std::string& file, size_t available = SIZE_MAX)
      : data_(data), size_(size), available_(std::min(available, size)), file_(file) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }

  void need(uint64_t n, std::string_view what) const {
    if (n <= remaining() && n > available_ - pos_) throw NeedLongerPrefix{};
    if (n > remaining()) {
      fail(ErrorCode::kCorruptFile, "{}: truncated reading {} at offset {} (need {} bytes, {} left)",
           file_, what, pos_, n, remaining());
    }
  }

  template <class T>
  T read(std::string_view what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  std::string read_string(std::string_view what) {
    const uint64_t len = read<uint64_t>(what);
    if (len > kMaxStringLength) {
      fail(ErrorCode::kCorruptFile, "{}: {} has absurd length {} at offset {}", file_, what, len,
           pos_ - 8);
    }
    need(len, what);
    std::string s(reinterpret_cast<const char*>(data_ + pos_), len);
    pos_ += len;
    return s;
  }

  [[noreturn]] void corrupt(std::string_view message) const {
    fail(ErrorCode::kCorruptFile, "{}: {} (at offset {})", file_, message, pos_);
  }

  const std::string& file() const { return file_; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t available_;
  size_t pos_ = 0;
  const std::string& file_;
};

// Smallest encoding of one element, to reject counts the file cannot hold
// before reserving memory for them.
uint64_t min_encoded_size(ValueType t) {
  switch (t) {
    case ValueType::kU8: case ValueType::kI8: case ValueType::kBool: return 1;
    case ValueType::kU16: case ValueType::kI16: return 2;
    case ValueType::kU32: case ValueType::kI32: case ValueType::kF32: return 4;
    case ValueType::kU64: case ValueType::kI64: case ValueType::kF64: return 8;
    case ValueType::kString: return 8;
    case ValueType::kArray: return 12;
  }
  return 1;
}

bool valid_value_type(uint32_t t) { return t <= 12; }

// Counts are checked against the bytes left before anything is reserved, but
// an element in memory is up to ~10x its smallest encoding (a std::string for
// an 8-byte length, an Array for 12 bytes), so at most this many are reserved
// up front; elements that really are there grow the vector as they are read.
constexpr uint64_t kMaxReserve = uint64_t{1} << 16;
size_t reserve_count(uint64_t n) { return static_cast<size_t>(std::min(n, kMaxReserve)); }

Array read_array(Cursor& c, const std::string& key, int depth);

// Reads one scalar into `v`.
void read_scalar(Cursor& c, ValueType t, Value& v, const std::string& key) {
  switch (t) {
    case ValueType::kU8: v.u = c.read<uint8_t>(key); break;
    case ValueType::kI8: v.i = c.read<int8_t>(key); break;
    case ValueType::kU16: v.u = c.read<uint16_t>(key); break;
    case ValueType::kI16: v.i = c.read<int16_t>(key); break;
    case ValueType::kU32: v.u = c.read<uint32_t>(key); break;
    case ValueType::kI32: v.i = c.read<int32_t>(key); break;
    case ValueType::kU64: v.u = c.read<uint64_t>(key); break;
    case ValueType::kI64: v.i = c.read<int64_t>(key); break;
    case ValueType::kF32: v.f = c.read<float>(key); break;
    case ValueType::kF64: v.f = c.read<double>(key); break;
    case ValueType::kBool: {
      const uint8_t b = c.read<uint8_t>(key);
      if (b > 1) c.corrupt(fmt::format("bool '{}' has value {}", key, b));
      v.i = b;
      break;
    }
    case ValueType::kString: v.s = c.read_string(key); break;
    case ValueType::kArray: break;  // handled by the caller
  }
}

Array read_array(Cursor& c, const std::string& key, int depth) {
  if (depth > kMaxArrayDepth) c.corrupt(fmt::format("'{}' nests arrays deeper than {}", key, kMaxArrayDepth));
  const uint32_t raw = c.read<uint32_t>(key);
  if (!valid_value_type(raw)) c.corrupt(fmt::format("'{}' has unknown array element type {}", key, raw));
  const uint64_t n = c.read<uint64_t>(key);
  Array a;
  a.elem_type = static_cast<ValueType>(raw);
  if (n > c.remaining() / min_encoded_size(a.elem_type)) {
    c.corrupt(fmt::format("array '{}' claims {} elements, more than the file can hold", key, n));
  }
  switch (a.elem_type) {
    case ValueType::kString:
      a.strings.reserve(reserve_count(n));
      for (uint64_t i = 0; i < n; ++i) a.strings.push_back(c.read_string(key));
      break;
    case ValueType::kArray:
      a.arrays.reserve(reserve_count(n));
      for (uint64_t i = 0; i < n; ++i) a.arrays.push_back(read_array(c, key, depth + 1));
      break;
    case ValueType::kF32: case ValueType::kF64:
      a.floats.reserve(reserve_count(n));
      for (uint64_t i = 0; i < n; ++i) {
        Value v;
        read_scalar(c, a.elem_type, v, key);
        a.floats.push_back(v.f);
      }
      break;
    case ValueType::kU8: case ValueType::kU16: case ValueType::kU32: case ValueType::kU64:
      a.uints.reserve(reserve_count(n));
      for (uint64_t i = 0; i < n; ++i) {
        Value v;
        read_scalar(c, a.elem_type, v, key);
        a.uints.push_back(v.u);
      }
      break;
    default:
      a.ints.reserve(reserve_count(n));
      for (uint64_t i = 0; i < n; ++i) {
        Value v;
        read_scalar(c, a.elem_type, v, key);
        a.ints.push_back(v.i);
      }
      break;
  }
  return a;
}

bool is_unsigned(ValueType t) {
  return t == ValueType::kU8 || t == ValueType::kU16 || t == ValueType::kU32 || t == ValueType::kU64;
}
bool is_signed(ValueType t) {
  return t == ValueType::kI8 || t == ValueType::kI16 || t == ValueType::kI32 || t == ValueType::kI64;
}
bool is_float(ValueType t) { return t == ValueType::kF32 || t == ValueType::kF64; }

}  // namespace

std::string_view value_type_name(ValueType t) {
  static const char* const kNames[] = {"u8",  "i8",   "u16",    "i16",   "u32", "i32", "f32",
                                       "bool", "string", "array", "u64", "i64", "f64"};
  const auto i = static_cast<uint32_t>(t);
  return i < 13 ? kNames[i] : "?";
}

size_t Array::size() const {
  switch (elem_type) {
    case ValueType::kString: return strings.size();
    case ValueType::kArray: return arrays.size();
    default:
      if (is_float(elem_type)) return floats.size();
      if (is_unsigned(elem_type)) return uints.size();
      return ints.size();
  }
}

std::string TensorInfo::shape_string() const {
  std::string s = "[";
  for (int d = 0; d < n_dims; ++d) s += fmt::format("{}{}", d ? ", " : "", ne[d]);
  return s + "]";
}

namespace {

// The byte size of a tensor of a variable-size type (QMOE: "QMOE", the
// sparse types: "SPRS"; then u32 version, u64 size), read from its first
// bytes.
uint64_t variable_size(const std::string& path, const TensorInfo& t, const uint8_t* data, uint64_t data_size) {
  if (t.offset > data_size || data_size - t.offset < 16) {
    fail(ErrorCode::kCorruptFile, "{}: tensor '{}' ({}) starts past the end of the file", path, t.name,
         dtype_name(t.type));
  }
  const uint8_t* p = data + t.offset;
  const char* magic = t.type == DType::kQMoE ? "QMOE" : "SPRS";  // QMOE, or a sparse type (kernels/sparse.h)
  if (std::memcmp(p, magic, 4) != 0) {
    fail(ErrorCode::kCorruptFile, "{}: tensor '{}' of type {} does not start with its header", path, t.name,
         dtype_name(t.type));
  }
  uint64_t n = 0;
  std::memcpy(&n, p + 8, sizeof(n));
  if (n < 32 || n % 8 != 0) {
    fail(ErrorCode::kCorruptFile, "{}: tensor '{}' of type {} declares {} bytes", path, t.name, dtype_name(t.type), n);
  }
  return n;
}

// A split model's part names, as llama.cpp's gguf-split writes them:
// PREFIX-00001-of-00005.gguf ... PREFIX-00005-of-00005.gguf.
std::string split_part_path(const std::string& prefix, uint64_t no, uint64_t count) {
  return fmt::format("{}-{:05}-of-{:05}.gguf", prefix, no, count);
}

// The prefix of part `no` (1-based)'s path, or "" when the name is not one.
std::string split_prefix(const std::string& path, uint64_t no, uint64_t count) {
  const std::string tail = fmt::format("-{:05}-of-{:05}.gguf", no, count);
  if (path.size() <= tail.size() || path.compare(path.size() - tail.size(), tail.size(), tail) != 0) return "";
  return path.substr(0, path.size() - tail.size());
}

}  // namespace

File File::open(const std::string& path, Mapping mapping) {
  if (mapping == Mapping::kOnDemand) {
    auto file = std::make_shared<RangeFile>(path);
    std::optional<File> f = parse_on_demand(file, 0);
    if (f) {
      if (f->has("split.count") && f->get_uint("split.count") > 1) return open_split(std::move(*f), mapping);
      return std::move(*f);
    }
    // A variable-size tensor's bytes are measured by reading them: map it all.
  }
  auto whole = std::make_shared<MappedFile>(path);
  File f = parse(whole->data(), whole->size(), path);
  f.owners_.push_back(std::move(whole));
  if (f.has("split.count") && f.get_uint("split.count") > 1) return open_split(std::move(f), Mapping::kWhole);
  return f;
}

// The header parsed from a mapped prefix of the file (doubled until it holds
// the metadata and tensor infos); tensors get their place in the file, not a
// pointer. nullopt for a file with variable-size tensors.
std::optional<File> File::parse_on_demand(const std::shared_ptr<RangeFile>& file, uint32_t part) {
  for (size_t prefix = size_t{1} << 20;; prefix *= 2) {
    const size_t n = std::min(prefix, file->size());
    std::shared_ptr<const void> owner;
    const uint8_t* data = n > 0 ? file->map(0, n, owner) : nullptr;
    try {
      File f = parse_impl(data, file->size(), file->path(), n);
      for (const TensorInfo& t : f.tensors_) {
        if (!dtype_fixed_size(t.type)) return std::nullopt;
      }
      f.on_demand_->parts.push_back(file);
      for (TensorInfo& t : f.tensors_) {
        t.part = part;
        t.file_offset = f.data_offset_ + t.offset;
      }
      return f;
    } catch (const NeedLongerPrefix&) {
      TESSERA_ASSERT(n < file->size());
    }
  }
}

// Part 1 holds the metadata and some tensors; parts 2..N hold the split.*
// keys and the rest of the tensors. Each part stays mapped.
File File::open_split(File first, Mapping mapping) {
  const std::string& path = first.path_;
  const uint64_t count = first.get_uint("split.count");
  TESSERA_CHECK(count <= 9999, kCorruptFile, "{}: 'split.count' = {} is out of range", path, count);
  const uint64_t no = first.get_uint_or("split.no", 0);
  if (no != 0) {
    const std::string other = split_prefix(path, no + 1, count);
    fail(ErrorCode::kInvalidArgument, "{} is part {} of a model split in {} files: open the first part ({})", path,
         no + 1, count, split_part_path(other.empty() ? "PREFIX" : other, 1, count));
  }
  const std::string prefix = split_prefix(path, 1, count);
  TESSERA_CHECK(!prefix.empty(), kCorruptFile, "{}: 'split.count' = {}, but the name does not end in "
                "-00001-of-{:05}.gguf, so its other parts cannot be found", path, count, count);
  std::vector<TensorInfo> tensors = first.tensors_;
  std::vector<std::shared_ptr<const void>> owners = first.owners_;
  for (uint64_t i = 1; i < count; ++i) {
    const std::string part_path = split_part_path(prefix, i + 1, count);
    std::error_code ec;
    TESSERA_CHECK(std::filesystem::exists(part_path, ec), kIo, "{}: part {} of {} is missing ({})", path, i + 1,
                  count, part_path);
    std::shared_ptr<MappedFile> whole;
    std::optional<File> lazy;
    if (mapping == Mapping::kOnDemand) {
      lazy = parse_on_demand(std::make_shared<RangeFile>(part_path), static_cast<uint32_t>(first.on_demand_->parts.size()));
      TESSERA_CHECK(lazy.has_value(), kCorruptFile, "{}: variable-size tensors in a split model", part_path);
    } else {
      whole = std::make_shared<MappedFile>(part_path);
    }
    const File part = lazy ? std::move(*lazy) : parse(whole->data(), whole->size(), part_path);
    TESSERA_CHECK(part.get_uint_or("split.count", 0) == count && part.get_uint_or("split.no", count) == i,
                  kCorruptFile, "{}: part {} of {} says it is part {} of {} (split.no, split.count)", part_path, i + 1,
                  count, part.get_uint_or("split.no", count) + 1, part.get_uint_or("split.count", 0));
    tensors.insert(tensors.end(), part.tensors_.begin(), part.tensors_.end());
    if (whole) owners.push_back(std::move(whole));
    if (lazy) first.on_demand_->parts.push_back(part.on_demand_->parts.front());
  }
  if (first.has("split.tensors.count")) {
    const uint64_t want = first.get_uint("split.tensors.count");
    TESSERA_CHECK(want == tensors.size(), kCorruptFile, "{}: 'split.tensors.count' = {}, but the {} parts hold {} "
                  "tensors", path, want, count, tensors.size());
  }
  File f = assemble(path, first.kv_, std::move(tensors), std::move(owners));
  f.version_ = first.version_;
  f.alignment_ = first.alignment_;
  if (mapping == Mapping::kOnDemand) f.on_demand_->parts = first.on_demand_->parts;
  return f;
}

File File::assemble(std::string path, std::vector<std::pair<std::string, Value>> metadata,
                    std::vector<TensorInfo> tensors, std::vector<std::shared_ptr<const void>> owners) {
  File f;
  f.path_ = std::move(path);
  f.owners_ = std::move(owners);
  for (auto& [key, value] : metadata) {
    if (!f.kv_index_.emplace(key, f.kv_.size()).second) {
      fail(ErrorCode::kCorruptFile, "{}: duplicate metadata key '{}'", f.path_, key);
    }
    f.kv_.emplace_back(std::move(key), std::move(value));
  }
  for (TensorInfo& t : tensors) {
    if (!f.tensor_index_.emplace(t.name, f.tensors_.size()).second) {
      fail(ErrorCode::kCorruptFile, "{}: duplicate tensor '{}'", f.path_, t.name);
    }
    f.tensors_.push_back(std::move(t));
  }
  return f;
}

File File::parse(const uint8_t* data, size_t size, std::string name) { return parse_impl(data, size, std::move(name)); }

File File::parse_impl(const uint8_t* data, size_t size, std::string name, size_t available) {
  File f;
  f.path_ = std::move(name);
  const bool header_only = available != SIZE_MAX;  // data holds a prefix: no tensor points into it
  Cursor c(data, size, f.path_, available);

  const uint32_t magic = c.read<uint32_t>("magic");
  if (magic != kMagic) {
    // The bytes found are not quoted: the message can reach a client
    // (/v1/load_lora_adapter), and a path may name any file.
    fail(ErrorCode::kCorruptFile, "{}: not a GGUF file (bad magic: it does not start with 'GGUF')", f.path_);
  }
  f.version_ = c.read<uint32_t>("version");
  if (f.version_ == 0x02000000 || f.version_ == 0x03000000) {
    // The version reads byte-swapped: the file was written big-endian.
    fail(ErrorCode::kCorruptFile, "{}: big-endian GGUF (version {}) is not supported", f.path_,
         f.version_ >> 24);
  }
  if (f.version_ != 2 && f.version_ != 3) {
    fail(ErrorCode::kCorruptFile, "{}: unsupported GGUF version {} (supported: 2, 3)", f.path_, f.version_);
  }
  const uint64_t n_tensors = c.read<uint64_t>("tensor count");
  const uint64_t n_kv = c.read<uint64_t>("metadata count");
  // Each metadata entry takes at least 12 bytes (key length + type), each
  // tensor info at least 24: reject counts the file cannot hold.
  if (n_kv > c.remaining() / 12) c.corrupt(fmt::format("metadata count {} exceeds what the file can hold", n_kv));
  if (n_tensors > c.remaining() / 24) c.corrupt(fmt::format("tensor count {} exceeds what the file can hold", n_tensors));

  f.kv_.reserve(reserve_count(n_kv));
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key = c.read_string("metadata key");
    const uint32_t raw = c.read<uint32_t>(key);
    if (!valid_value_type(raw)) c.corrupt(fmt::format("metadata '{}' has unknown value type {}", key, raw));
    Value v;
    v.type = static_cast<ValueType>(raw);
    if (v.type == ValueType::kArray) {
      v.array = std::make_shared<Array>(read_array(c, key, 0));
    } else {
      read_scalar(c, v.type, v, key);
    }
    if (f.kv_index_.count(key)) c.corrupt(fmt::format("duplicate metadata key '{}'", key));
    f.kv_index_.emplace(key, f.kv_.size());
    f.kv_.emplace_back(std::move(key), std::move(v));
  }

  if (const Value* a = f.find("general.alignment")) {
    if (!is_unsigned(a->type) && !is_signed(a->type)) {
      fail(ErrorCode::kCorruptFile, "{}: general.alignment has type {}", f.path_, value_type_name(a->type));
    }
    const uint64_t al = is_unsigned(a->type) ? a->u : static_cast<uint64_t>(a->i);
    if (al == 0 || (al & (al - 1)) != 0 || al > 65536) {
      fail(ErrorCode::kCorruptFile, "{}: general.alignment {} is not a power of two <= 65536", f.path_, al);
    }
    f.alignment_ = al;
  }

  f.tensors_.reserve(reserve_count(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    TensorInfo t;
    t.name = c.read_string("tensor name");
    const uint32_t n_dims = c.read<uint32_t>(t.name);
    if (n_dims < 1 || n_dims > kMaxDims) c.corrupt(fmt::format("tensor '{}' has {} dimensions", t.name, n_dims));
    t.n_dims = static_cast<int>(n_dims);
    int64_t total = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t ne = c.read<uint64_t>(t.name);
      if (ne == 0 || ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / static_cast<uint64_t>(total)) {
        c.corrupt(fmt::format("tensor '{}' has invalid dimension {} = {}", t.name, d, ne));
      }
      t.ne[d] = static_cast<int64_t>(ne);
      total *= t.ne[d];
    }
    const uint32_t raw_type = c.read<uint32_t>(t.name);
    const auto traits = dtype_traits(raw_type);
    if (!traits) c.corrupt(fmt::format("tensor '{}' has unknown type {}", t.name, raw_type));
    t.type = static_cast<DType>(raw_type);
    if (t.ne[0] % traits->block_size != 0) {
      c.corrupt(fmt::format("tensor '{}' row of {} elements is not a multiple of the {} block size {}",
                            t.name, t.ne[0], traits->name, traits->block_size));
    }
    const uint64_t blocks = static_cast<uint64_t>(total / traits->block_size);
    if (dtype_fixed_size(t.type) && blocks > size / traits->type_size) {
      c.corrupt(fmt::format("tensor '{}' {} of {} is larger than the file", t.name, t.shape_string(), traits->name));
    }
    t.n_bytes = blocks * traits->type_size;  // a variable-size type's: from its bytes, below
    t.offset = c.read<uint64_t>(t.name);
    if (t.offset % f.alignment_ != 0) {
      c.corrupt(fmt::format("tensor '{}' offset {} is not a multiple of the alignment {}", t.name, t.offset, f.alignment_));
    }
    if (f.tensor_index_.count(t.name)) c.corrupt(fmt::format("duplicate tensor '{}'", t.name));
    f.tensor_index_.emplace(t.name, f.tensors_.size());
    f.tensors_.push_back(std::move(t));
  }

  const uint64_t pos = c.pos();
  f.data_offset_ = (pos + f.alignment_ - 1) / f.alignment_ * f.alignment_;
  if (!f.tensors_.empty() && f.data_offset_ > size) {
    fail(ErrorCode::kCorruptFile, "{}: data section starts at {} past the end of the file ({} bytes)",
         f.path_, f.data_offset_, size);
  }
  const uint64_t data_size = size - std::min<uint64_t>(f.data_offset_, size);
  for (TensorInfo& t : f.tensors_) {
    if (!dtype_fixed_size(t.type)) {
      if (header_only) continue;  // parse_on_demand maps the whole file for it
      t.n_bytes = variable_size(f.path_, t, data + f.data_offset_, data_size);
    }
    if (t.offset > data_size || t.n_bytes > data_size - t.offset) {
      fail(ErrorCode::kCorruptFile,
           "{}: tensor '{}' ({} bytes at data offset {}) extends past the end of the file "
           "(data section holds {} bytes)",
           f.path_, t.name, t.n_bytes, t.offset, data_size);
    }
    if (!header_only) t.data = data + f.data_offset_ + t.offset;
  }
  return f;
}

const uint8_t* File::bytes(const TensorInfo& t, size_t begin, size_t n) const {
  TESSERA_CHECK(begin <= t.n_bytes && n <= t.n_bytes - begin, kInternal, "{}: bytes {}..{} of tensor '{}' ({} bytes)",
                path_, begin, begin + n, t.name, t.n_bytes);
  if (t.data != nullptr) return t.data + begin;
  TESSERA_CHECK(on_demand(), kInternal, "{}: tensor '{}' has no bytes", path_, t.name);
  OnDemand& od = *on_demand_;
  std::lock_guard<std::mutex> lock(od.mu);
  const bool whole = begin == 0 && n == t.n_bytes;
  if (whole) {
    if (auto it = od.whole.find({t.part, t.file_offset}); it != od.whole.end()) return it->second;
  }
  std::shared_ptr<const void> owner;
  const uint8_t* p = od.parts.at(t.part)->map(t.file_offset + begin, n, owner);
  od.kept.emplace_back(nullptr, std::move(owner));  // a mapping: never dropped
  if (whole) od.whole.emplace(std::make_pair(t.part, t.file_offset), p);
  return p;
}

void File::read(const TensorInfo& t, size_t begin, size_t n, void* out) const {
  TESSERA_CHECK(begin <= t.n_bytes && n <= t.n_bytes - begin, kInternal, "{}: bytes {}..{} of tensor '{}' ({} bytes)",
                path_, begin, begin + n, t.name, t.n_bytes);
  if (t.data != nullptr) {
    std::memcpy(out, t.data + begin, n);
    return;
  }
  on_demand_->parts.at(t.part)->read(t.file_offset + begin, n, out);
}

void File::keep(std::shared_ptr<const void> owner, const void* data) const {
  std::lock_guard<std::mutex> lock(on_demand_->mu);
  on_demand_->kept.emplace_back(data, std::move(owner));
}

void File::drop(const void* data) const {
  std::lock_guard<std::mutex> lock(on_demand_->mu);
  auto& kept = on_demand_->kept;
  kept.erase(std::remove_if(kept.begin(), kept.end(), [&](const auto& k) { return data != nullptr && k.first == data; }),
             kept.end());
}

const Value* File::find(std::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

namespace {
[[noreturn]] void wrong_type(const File& f, std::string_view key, const Value& v, std::string_view want) {
  fail(ErrorCode::kCorruptFile, "{}: metadata '{}' has type {}, expected {}", f.path(), key,
       value_type_name(v.type), want);
}
const Value& require(const File& f, std::string_view key) {
  const Value* v = f.find(key);
  if (v == nullptr) fail(ErrorCode::kCorruptFile, "{}: missing metadata key '{}'", f.path(), key);
  return *v;
}
}  // namespace

uint64_t File::get_uint(std::string_view key) const {
  const Value& v = require(*this, key);
  if (is_unsigned(v.type)) return v.u;
  if (is_signed(v.type) && v.i >= 0) return static_cast<uint64_t>(v.i);
  wrong_type(*this, key, v, "a non-negative integer");
}

uint64_t File::get_uint_or(std::string_view key, uint64_t fallback) const {
  return has(key) ? get_uint(key) : fallback;
}

int64_t File::get_int(std::string_view key) const {
  const Value& v = require(*this, key);
  if (is_signed(v.type)) return v.i;
  if (is_unsigned(v.type) && v.u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return static_cast<int64_t>(v.u);
  }
  wrong_type(*this, key, v, "an integer");
}

double File::get_float(std::string_view key) const {
  const Value& v = require(*this, key);
  if (is_float(v.type)) return v.f;
  if (is_signed(v.type)) return static_cast<double>(v.i);
  if (is_unsigned(v.type)) return static_cast<double>(v.u);
  wrong_type(*this, key, v, "a number");
}

double File::get_float_or(std::string_view key, double fallback) const {
  return has(key) ? get_float(key) : fallback;
}

bool File::get_bool_or(std::string_view key, bool fallback) const {
  const Value* v = find(key);
  if (v == nullptr) return fallback;
  if (v->type == ValueType::kBool) return v->i != 0;
  wrong_type(*this, key, *v, "bool");
}

const std::string& File::get_string(std::string_view key) const {
  const Value& v = require(*this, key);
  if (v.type != ValueType::kString) wrong_type(*this, key, v, "string");
  return v.s;
}

std::string File::get_string_or(std::string_view key, std::string fallback) const {
  return has(key) ? get_string(key) : fallback;
}

const Array& File::get_array(std::string_view key) const {
  const Value& v = require(*this, key);
  if (v.type != ValueType::kArray) wrong_type(*this, key, v, "array");
  return *v.array;
}

const Array* File::find_array(std::string_view key) const {
  return has(key) ? &get_array(key) : nullptr;
}

const TensorInfo* File::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const TensorInfo& File::tensor(std::string_view name) const {
  const TensorInfo* t = find_tensor(name);
  if (t == nullptr) fail(ErrorCode::kCorruptFile, "{}: missing tensor '{}'", path_, name);
  return *t;
}

std::vector<int64_t> array_as_ints(const Array& a, std::string_view what) {
  if (is_signed(a.elem_type) || a.elem_type == ValueType::kBool) return a.ints;
  if (is_unsigned(a.elem_type)) {
    std::vector<int64_t> out;
    out.reserve(a.uints.size());
    for (uint64_t u : a.uints) {
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        fail(ErrorCode::kCorruptFile, "{}: value {} out of range", what, u);
      }
      out.push_back(static_cast<int64_t>(u));
    }
    return out;
  }
  fail(ErrorCode::kCorruptFile, "{}: expected an integer array, got an array of {}", what,
       value_type_name(a.elem_type));
}

std::vector<float> array_as_floats(const Array& a, std::string_view what) {
  std::vector<float> out;
  out.reserve(a.size());
  if (is_float(a.elem_type)) {
    for (double d : a.floats) out.push_back(static_cast<float>(d));
  } else if (is_signed(a.elem_type)) {
    for (int64_t i : a.ints) out.push_back(static_cast<float>(i));
  } else if (is_unsigned(a.elem_type)) {
    for (uint64_t u : a.uints) out.push_back(static_cast<float>(u));
  } else {
    fail(ErrorCode::kCorruptFile, "{}: expected a numeric array, got an array of {}", what,
         value_type_name(a.elem_type));
  }
  return out;
}

}  // namespace tessera::gguf
