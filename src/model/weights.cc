#include "model/weights.h"

#include <cmath>
#include <cstring>
#include <memory>

#include "core/aligned_buffer.h"
#include "core/error.h"
#include "core/mmap_file.h"
#include "kernels/qmoe.h"
#include "kernels/quant.h"
#include "kernels/sparse.h"

namespace tessera {
namespace {

const gguf::TensorInfo& checked(const gguf::File& f, const std::string& name, int n_dims, const int64_t* ne) {
  const gguf::TensorInfo& t = f.tensor(name);
  bool ok = true;
  for (int d = 0; d < 4; ++d) ok = ok && t.ne[d] == (d < n_dims ? ne[d] : 1);
  if (!ok) {
    std::string want = "[";
    for (int d = 0; d < n_dims; ++d) want += fmt::format("{}{}", d ? ", " : "", ne[d]);
    fail(ErrorCode::kCorruptFile, "{}: tensor '{}' has shape {}, expected {}]", f.path(), name,
         t.shape_string(), want);
  }
  return t;
}

kernels::WeightView matrix_view(const gguf::File& f, const gguf::TensorInfo& t, int64_t cols, int64_t rows) {
  if (!kernels::matmul_supports(t.type)) {
    fail(ErrorCode::kCorruptFile, "{}: tensor '{}' has type {}, which Tessera cannot multiply "
         "(docs/FORMATS.md lists the types it can)", f.path(), t.name, dtype_name(t.type));
  }
  kernels::WeightView w;
  w.type = t.type;
  w.data = f.bytes(t);
  w.rows = rows;
  w.cols = cols;
  w.row_bytes = row_bytes(t.type, cols);  // 0 for the sparse types: their rows are variable
  if (kernels::is_sparse(t.type)) {
    kernels::parse_sparse(w.data, t.n_bytes, cols, rows, fmt::format("{}: {}", f.path(), t.name).c_str());
    w.n_bytes = t.n_bytes;
  }
  return w;
}

}  // namespace

kernels::WeightView load_matrix(const gguf::File& f, const std::string& name, int64_t cols, int64_t rows) {
  const int64_t ne[2] = {cols, rows};
  return matrix_view(f, checked(f, name, 2, ne), cols, rows);
}

kernels::WeightView matrix_rows(kernels::WeightView w, int64_t r0, int64_t n) {
  if (r0 == 0 && n == w.rows) return w;  // all of it (whatever its layout)
  TESSERA_CHECK(w.row_bytes > 0, kCorruptFile, "a {} matrix cannot be split by rows (a fused tensor, or tensor "
                "parallelism): its rows vary in size", dtype_name(w.type));
  w.data += static_cast<size_t>(r0) * w.row_bytes;
  w.rows = n;
  return w;
}

namespace {
void check_cols(const kernels::WeightView& w, int64_t c0, int64_t n) {
  const DTypeTraits tr = dtype_traits(w.type);
  TESSERA_CHECK(w.row_bytes > 0 && w.x_cols == 0, kInvalidArgument,
                "a {} matrix cannot be split by columns (its rows are not whole blocks of a fixed size)", dtype_name(w.type));
  TESSERA_CHECK(c0 % tr.block_size == 0 && n % tr.block_size == 0, kInvalidArgument,
                "a {} matrix's columns cannot be split at {} (blocks of {} values)", dtype_name(w.type), n, tr.block_size);
}
}  // namespace

kernels::WeightView matrix_cols(kernels::WeightView w, int64_t c0, int64_t n) {
  if (c0 == 0 && (n == w.cols || n == w.input_cols())) return w;  // all of it (an any-shape matrix: its true width)
  check_cols(w, c0, n);
  const DTypeTraits tr = dtype_traits(w.type);
  w.data += static_cast<size_t>(c0 / tr.block_size) * tr.type_size;
  w.cols = n;
  return w;
}

namespace {
// A matrix's view without its bytes (they come from a file opened on demand):
// a type Tessera multiplies, in rows of a fixed size.
kernels::WeightView shape_only(const gguf::File& f, const gguf::TensorInfo& t, int64_t cols, int64_t rows) {
  TESSERA_CHECK(kernels::matmul_supports(t.type) && row_bytes(t.type, cols) > 0, kCorruptFile,
                "{}: tensor '{}' of type {} cannot be split (Tessera cannot multiply it, or its rows vary in size)",
                f.path(), t.name, dtype_name(t.type));
  kernels::WeightView w;
  w.type = t.type;
  w.rows = rows;
  w.cols = cols;
  w.row_bytes = row_bytes(t.type, cols);
  return w;
}
}  // namespace

namespace {

// A part of a sparse matrix (SP_Q8_0, SP_Q4_0: rows of variable size) as a
// sparse tensor of its own (kernels::sparse_part), kept by the File; the
// whole tensor's pages are released once it is copied out.
kernels::WeightView sparse_part_view(const gguf::File& f, const gguf::TensorInfo& t, int64_t cols, int64_t rows,
                                     int64_t r0, int64_t n_rows, int64_t c0, int64_t n_cols) {
  kernels::WeightView w = matrix_view(f, t, cols, rows);  // checked whole
  if (r0 == 0 && n_rows == rows && c0 == 0 && n_cols == cols) return w;
  const std::vector<uint8_t> part = kernels::sparse_part(kernels::sparse_view(w.data), r0, n_rows, c0, n_cols);
  release_pages(w.data, t.n_bytes);
  auto copy = std::make_shared<AlignedBuffer<uint8_t>>(part.size());
  std::memcpy(copy->data(), part.data(), part.size());
  w.data = copy->data();
  w.rows = n_rows;
  w.cols = n_cols;
  w.n_bytes = part.size();
  f.keep(std::move(copy), w.data);
  return w;
}

// Rows [r0, r0 + n) of tensor t seen as `rows` rows of `cols` (a matrix, or
// every expert's matrices one after the other), as load_matrix_rows says.
kernels::WeightView rows_of(const gguf::File& f, const gguf::TensorInfo& t, int64_t cols, int64_t rows, int64_t r0,
                            int64_t n) {
  if (kernels::is_sparse(t.type)) return sparse_part_view(f, t, cols, rows, r0, n, 0, cols);
  if (!f.on_demand() || (r0 == 0 && n == rows)) return matrix_rows(matrix_view(f, t, cols, rows), r0, n);
  kernels::WeightView w = shape_only(f, t, cols, n);
  TESSERA_CHECK(r0 >= 0 && n >= 0 && r0 + n <= rows, kInvalidArgument, "rows [{}, {}) of {}", r0, r0 + n, rows);
  w.data = f.bytes(t, static_cast<size_t>(r0) * w.row_bytes, static_cast<size_t>(n) * w.row_bytes);
  return w;
}

// Columns [c0, c0 + n) of rows [r0, r0 + n_rows) of tensor t seen as `rows`
// rows of `cols`, as load_matrix_cols says.
kernels::WeightView cols_of(const gguf::File& f, const gguf::TensorInfo& t, int64_t cols, int64_t rows, int64_t r0,
                            int64_t n_rows, int64_t c0, int64_t n) {
  if (kernels::is_sparse(t.type)) return sparse_part_view(f, t, cols, rows, r0, n_rows, c0, n);
  if (!f.on_demand() || (r0 == 0 && n_rows == rows && c0 == 0 && n == cols)) {
    return matrix_cols(matrix_rows(matrix_view(f, t, cols, rows), r0, n_rows), c0, n);
  }
  kernels::WeightView w = shape_only(f, t, cols, n_rows);
  TESSERA_CHECK(r0 >= 0 && n_rows >= 0 && r0 + n_rows <= rows, kInvalidArgument, "rows [{}, {}) of {}", r0,
                r0 + n_rows, rows);
  check_cols(w, c0, n);
  w.cols = n;
  // Each row's piece is read into a copy of just those columns: mapping them
  // would take the whole tensor's pages.
  const DTypeTraits tr = dtype_traits(t.type);
  const size_t piece = row_bytes(t.type, n), skip = static_cast<size_t>(c0 / tr.block_size) * tr.type_size;
  auto copy = std::make_shared<AlignedBuffer<uint8_t>>(piece * static_cast<size_t>(n_rows));
  for (int64_t r = 0; r < n_rows; ++r) {
    f.read(t, static_cast<size_t>(r0 + r) * w.row_bytes + skip, piece, copy->data() + r * piece);
  }
  w.data = copy->data();
  w.row_bytes = piece;
  f.keep(std::move(copy), w.data);
  return w;
}

}  // namespace

kernels::WeightView load_matrix_rows(const gguf::File& f, const std::string& name, int64_t cols, int64_t rows,
                                     int64_t r0, int64_t n) {
  const int64_t ne[2] = {cols, rows};
  return rows_of(f, checked(f, name, 2, ne), cols, rows, r0, n);
}

kernels::WeightView load_matrix_cols(const gguf::File& f, const std::string& name, int64_t cols, int64_t rows,
                                     int64_t c0, int64_t n) {
  const int64_t ne[2] = {cols, rows};
  return cols_of(f, checked(f, name, 2, ne), cols, rows, 0, rows, c0, n);
}

kernels::WeightView load_expert_rows(const gguf::File& f, const std::string& name, int64_t cols, int64_t rows,
                                     int64_t n_expert, int64_t e, int64_t r0, int64_t n) {
  const int64_t ne[3] = {cols, rows, n_expert};
  const gguf::TensorInfo& t = checked(f, name, 3, ne);
  TESSERA_CHECK(e >= 0 && e < n_expert && r0 >= 0 && n >= 0 && r0 + n <= rows, kInvalidArgument,
                "{}: rows [{}, {}) of expert {} of '{}' ({} experts of {} rows)", f.path(), r0, r0 + n, e, name, n_expert,
                rows);
  return rows_of(f, t, cols, rows * n_expert, e * rows + r0, n);
}

kernels::WeightView load_expert_cols(const gguf::File& f, const std::string& name, int64_t cols, int64_t rows,
                                     int64_t n_expert, int64_t e, int64_t c0, int64_t n) {
  const int64_t ne[3] = {cols, rows, n_expert};
  const gguf::TensorInfo& t = checked(f, name, 3, ne);
  TESSERA_CHECK(e >= 0 && e < n_expert, kInvalidArgument, "{}: expert {} of '{}' ({} experts)", f.path(), e, name,
                n_expert);
  return cols_of(f, t, cols, rows * n_expert, e * rows, rows, c0, n);
}

kernels::QmoeView load_qmoe_experts(const gguf::File& f, const std::string& name, int64_t cols, int64_t rows,
                                    int64_t n_expert) {
  const int64_t ne[3] = {cols, rows, n_expert};
  const gguf::TensorInfo& t = checked(f, name, 3, ne);
  TESSERA_CHECK(t.type == DType::kQMoE, kCorruptFile, "{}: tensor '{}' has type {}, not QMOE", f.path(), name,
                dtype_name(t.type));
  return kernels::parse_qmoe(f.bytes(t), t.n_bytes, cols, rows, n_expert, name.c_str());
}

std::string w8a8_scale_name(const std::string& name) {
  const std::string suffix = ".weight";
  const bool has = name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  return (has ? name.substr(0, name.size() - suffix.size()) : name) + ".scale";
}

kernels::PreparedWeight load_w8a8_matrix(const gguf::File& f, const std::string& name, int64_t cols, int64_t rows,
                                         int bits, MatrixPart part) {
  const int64_t ne[2] = {cols, rows};
  const gguf::TensorInfo& t = checked(f, name, 2, ne);
  TESSERA_CHECK(t.type == DType::kI8, kCorruptFile, "{}: tensor '{}' has type {}, not I8 (W8A8)", f.path(), name,
                dtype_name(t.type));
  const std::string sname = w8a8_scale_name(name);
  const int64_t sne[1] = {rows};
  const gguf::TensorInfo& s = checked(f, sname, 1, sne);
  TESSERA_CHECK(s.type == DType::kF32, kCorruptFile, "{}: W8A8 scales '{}' have type {}, not F32", f.path(), sname,
                dtype_name(s.type));
  const int64_t r0 = part.r0, nr = part.rows > 0 ? part.rows : rows;
  const int64_t c0 = part.c0, nc = part.cols > 0 ? part.cols : cols;
  TESSERA_CHECK(r0 >= 0 && r0 + nr <= rows && c0 >= 0 && c0 + nc <= cols, kInvalidArgument,
                "{}: rows [{}, {}) and columns [{}, {}) of '{}' ({} x {})", f.path(), r0, r0 + nr, c0, c0 + nc, name,
                rows, cols);
  std::vector<float> sw(static_cast<size_t>(nr));
  f.read(s, static_cast<size_t>(r0) * sizeof(float), sw.size() * sizeof(float), sw.data());
  for (int64_t r = 0; r < nr; ++r) {
    TESSERA_CHECK(std::isfinite(sw[r]) && sw[r] >= 0.0f, kCorruptFile, "{}: W8A8 scale {} of '{}' is {}", f.path(),
                  r0 + r, name, sw[r]);
  }
  // Whole rows stay in the file (the view points at them); a part of each
  // row is read into a copy that packing replaces.
  const uint8_t* bytes = nullptr;
  std::vector<int8_t> copy;
  const int8_t* q = nullptr;
  if (nc == cols) {
    bytes = f.bytes(t, static_cast<size_t>(r0 * cols), static_cast<size_t>(nr * cols));
    q = reinterpret_cast<const int8_t*>(bytes);
  } else {
    copy.resize(static_cast<size_t>(nr * nc));
    for (int64_t r = 0; r < nr; ++r) f.read(t, static_cast<size_t>((r0 + r) * cols + c0), nc, copy.data() + r * nc);
    q = copy.data();
  }
  const int lo = bits == 4 ? -8 : -127, hi = bits == 4 ? 7 : 127;
  for (int64_t i = 0; i < nr * nc; ++i) {
    TESSERA_CHECK(q[i] >= lo && q[i] <= hi, kCorruptFile, "{}: W{}A8 code {} of '{}' is {} (codes are {}..{})", f.path(),
                  bits, (r0 + i / nc) * cols + c0 + i % nc, name, q[i], lo, hi);
  }
  kernels::PreparedWeight p;
  p.view = {DType::kI8, bytes, nr, nc, static_cast<size_t>(nc)};
  p.w8 = std::make_shared<const kernels::W8Matrix>(bits == 4 ? kernels::pack_w4(q, sw.data(), nr, nc)
                                                             : kernels::pack_w8(q, sw.data(), nr, nc));
  return p;
}

kernels::WeightView load_padded_matrix(const gguf::File& f, const std::string& name, int64_t cols, int64_t rows) {
  const std::string key = kPaddedColsKey + name;
  const uint64_t width = f.get_uint(key);
  TESSERA_CHECK(width == static_cast<uint64_t>(cols), kCorruptFile, "{}: '{}' = {}, but the model's width is {}",
                f.path(), key, width, cols);
  const gguf::TensorInfo* t = f.find_tensor(name);
  TESSERA_CHECK(t != nullptr, kCorruptFile, "{}: missing tensor '{}'", f.path(), name);
  const int64_t bs = dtype_traits(t->type).block_size;
  const int64_t stored = (cols + bs - 1) / bs * bs;
  TESSERA_CHECK(stored > cols, kCorruptFile, "{}: '{}' pads {} columns of {}, which need no padding", f.path(),
                key, cols, dtype_name(t->type));
  kernels::WeightView w = load_matrix(f, name, stored, rows);
  w.x_cols = cols;
  return w;
}

namespace {
std::vector<float> dequantized(const gguf::File& f, const gguf::TensorInfo& t, int64_t n) {
  if (!kernels::can_dequantize(t.type)) {
    fail(ErrorCode::kCorruptFile, "{}: tensor '{}' has unsupported type {}", f.path(), t.name, dtype_name(t.type));
  }
  std::vector<float> out(static_cast<size_t>(n));
  kernels::dequantize_row(t.type, f.bytes(t), out.data(), n);
  return out;
}
}  // namespace

std::vector<float> load_vector(const gguf::File& f, const std::string& name, int64_t n) {
  return dequantized(f, checked(f, name, 1, &n), n);
}

std::vector<float> load_vectors(const gguf::File& f, const std::string& name, int64_t n, int64_t count) {
  const int64_t ne[2] = {n, count};
  return dequantized(f, checked(f, name, 2, ne), n * count);
}

}  // namespace tessera
