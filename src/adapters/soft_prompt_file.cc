#include "adapters/soft_prompt_file.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string_view>

#include "core/error.h"
#include "core/fp16.h"
#include "core/mmap_file.h"
#include "kernels/quant.h"
#include "format/gguf.h"

namespace tessera::adapters {
namespace {

constexpr std::string_view kNpyMagic = "\x93NUMPY";

// The value of `key` in a .npy header (a Python dict literal), up to the
// next ',' at nesting depth 0 or the closing '}'; empty when absent.
std::string npy_field(std::string_view header, std::string_view key) {
  std::string quoted(1, '\'');
  quoted.append(key);
  quoted.push_back('\'');
  size_t at = header.find(quoted);
  if (at == std::string_view::npos) return {};
  at = header.find(':', at + quoted.size());
  if (at == std::string_view::npos) return {};
  int depth = 0;
  size_t end = at + 1;
  for (; end < header.size(); ++end) {
    const char c = header[end];
    if (c == '(' || c == '[') {
      ++depth;
    } else if (c == ')' || c == ']') {
      --depth;
    } else if (depth == 0 && (c == ',' || c == '}')) {
      break;
    }
  }
  std::string v(header.substr(at + 1, end - at - 1));
  const size_t b = v.find_first_not_of(" \t"), e = v.find_last_not_of(" \t");
  return b == std::string::npos ? std::string() : v.substr(b, e - b + 1);
}

void check_rows(SoftPrompt& sp, const std::string& path, const ModelConfig& base) {
  TESSERA_CHECK(sp.n_virtual >= 1, kInvalidArgument, "{}: the soft prompt has no rows", path);
  TESSERA_CHECK(sp.n_embd == base.n_embd, kInvalidArgument,
                "{}: soft prompt rows have {} values; this model's embeddings have {}", path, sp.n_embd, base.n_embd);
  for (float v : sp.embd) TESSERA_CHECK(std::isfinite(v), kCorruptFile, "{}: the soft prompt holds {}", path, v);
}

std::shared_ptr<SoftPrompt> from_npy(const MappedFile& f) {
  const std::string& path = f.path();
  const uint8_t* d = f.data();
  TESSERA_CHECK(f.size() >= 10, kCorruptFile, "{}: truncated .npy header", path);
  const int major = d[6];
  TESSERA_CHECK(major >= 1 && major <= 3, kCorruptFile, "{}: .npy version {} is not supported (1-3)", path, major);
  size_t header_len = 0, offset = 0;
  if (major == 1) {
    header_len = d[8] | (static_cast<size_t>(d[9]) << 8);
    offset = 10;
  } else {
    TESSERA_CHECK(f.size() >= 12, kCorruptFile, "{}: truncated .npy header", path);
    header_len = d[8] | (static_cast<size_t>(d[9]) << 8) | (static_cast<size_t>(d[10]) << 16) |
                 (static_cast<size_t>(d[11]) << 24);
    offset = 12;
  }
  TESSERA_CHECK(header_len <= f.size() - offset, kCorruptFile, "{}: truncated .npy header", path);
  const std::string_view header(reinterpret_cast<const char*>(d + offset), header_len);
  const std::string descr = npy_field(header, "descr"), order = npy_field(header, "fortran_order"),
                    shape = npy_field(header, "shape");
  TESSERA_CHECK(!descr.empty() && !order.empty() && !shape.empty(), kCorruptFile,
                "{}: .npy header lacks descr, fortran_order or shape", path);
  TESSERA_CHECK(order == "False", kInvalidArgument, "{}: Fortran-ordered arrays are not supported (save C order)", path);
  const bool f32 = descr == "'<f4'", f16 = descr == "'<f2'";
  TESSERA_CHECK(f32 || f16, kInvalidArgument, "{}: dtype {} is not supported (little-endian float32 or float16)", path,
                descr);
  // "(rows, cols)"
  long long rows = -1, cols = -1;
  char tail = 0;
  TESSERA_CHECK(std::sscanf(shape.c_str(), "(%lld ,%lld %c", &rows, &cols, &tail) == 3 && tail == ')' && rows >= 0 &&
                    cols >= 1,
                kInvalidArgument, "{}: shape {} is not 2-D [n_virtual, n_embd]", path, shape);
  TESSERA_CHECK(rows <= (1ll << 24) && cols <= (1ll << 24), kInvalidArgument, "{}: shape {} is too large", path, shape);
  const size_t n = static_cast<size_t>(rows) * static_cast<size_t>(cols), esize = f32 ? 4 : 2;
  const size_t data_at = offset + header_len;
  TESSERA_CHECK(f.size() - data_at >= n * esize, kCorruptFile, "{}: {} values declared, {} bytes of data", path, n,
                f.size() - data_at);
  auto sp = std::make_shared<SoftPrompt>();
  sp->n_virtual = rows;
  sp->n_embd = cols;
  sp->embd.resize(n);
  const uint8_t* p = d + data_at;
  for (size_t i = 0; i < n; ++i) {
    if (f32) {
      std::memcpy(&sp->embd[i], p + 4 * i, 4);
    } else {
      fp16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      sp->embd[i] = fp16_to_f32(h);
    }
  }
  stamp_content_hash(*sp);
  return sp;
}

std::shared_ptr<SoftPrompt> from_gguf(const std::string& path) {
  const gguf::File f = gguf::File::open(path);
  const gguf::TensorInfo* t = f.find_tensor("soft_prompt");
  if (t == nullptr) {
    TESSERA_CHECK(f.tensors().size() == 1, kInvalidArgument,
                  "{}: a soft prompt GGUF holds one tensor, or one named 'soft_prompt' ({} tensors here)", path,
                  f.tensors().size());
    t = &f.tensors()[0];
  }
  TESSERA_CHECK(t->n_dims == 2, kInvalidArgument, "{}: soft prompt tensor '{}' is {}, not 2-D [n_embd, n_virtual]",
                path, t->name, t->shape_string());
  TESSERA_CHECK(t->type == DType::kF32 || t->type == DType::kF16 || t->type == DType::kBF16, kInvalidArgument,
                "{}: soft prompt tensor '{}' has type {} (F32, F16 or BF16)", path, t->name, dtype_name(t->type));
  const int64_t cols = t->ne[0], rows = t->ne[1];
  const size_t rb = row_bytes(t->type, cols);
  TESSERA_CHECK(t->n_bytes >= rb * static_cast<size_t>(rows), kCorruptFile, "{}: tensor '{}' is truncated", path,
                t->name);
  auto sp = std::make_shared<SoftPrompt>();
  sp->n_virtual = rows;
  sp->n_embd = cols;
  sp->embd.resize(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) kernels::dequantize_row(t->type, t->data + r * rb, sp->embd.data() + r * cols, cols);
  stamp_content_hash(*sp);
  return sp;
}

}  // namespace

std::shared_ptr<const SoftPrompt> load_soft_prompt(const std::string& path, const ModelConfig& base) {
  std::shared_ptr<SoftPrompt> sp;
  {
    const MappedFile f(path);
    const std::string_view head(reinterpret_cast<const char*>(f.data()), std::min<size_t>(f.size(), 6));
    if (head == kNpyMagic) {
      sp = from_npy(f);
    } else {
      TESSERA_CHECK(head.substr(0, 4) == "GGUF", kInvalidArgument,
                    "{}: not a soft prompt (.npy or GGUF; the file starts with neither magic)", path);
    }
  }
  if (!sp) sp = from_gguf(path);
  check_rows(*sp, path, base);
  sp->name = path;
  stamp_content_hash(*sp);
  return sp;
}

std::string npy_bytes(const std::string& descr, const std::string& shape, const void* data, size_t bytes,
                      bool fortran_order) {
  std::string header = "{'descr': '" + descr + "', 'fortran_order': " + (fortran_order ? "True" : "False") +
                       ", 'shape': " + shape + ", }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  out += header;
  out.append(static_cast<const char*>(data), bytes);
  return out;
}

}  // namespace tessera::adapters
