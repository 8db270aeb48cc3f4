// The sparse tensor layout (kernels/sparse.h): encoding, checking, and the
// scalar decoders the loader, the tests and the reference kernel use.
#include "kernels/sparse.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <string>

#include "core/aligned_buffer.h"
#include "core/error.h"
#include "core/fp16.h"
#include "kernels/blocks.h"

namespace tessera::kernels {
namespace {

template <class T>
T sp_read(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <class T>
void sp_write(uint8_t* p, T v) {
  std::memcpy(p, &v, sizeof v);
}

size_t sp_align8(size_t n) { return (n + 7) / 8 * 8; }

// Where each part starts, from the shape and the values' size.
struct SparseOffsets {
  size_t masks, scales, row_start, values, end;
};

SparseOffsets sparse_offsets(int64_t rows, int64_t cols, uint64_t value_bytes) {
  const size_t blocks = static_cast<size_t>(rows) * static_cast<size_t>(cols / kSparseBlock);
  SparseOffsets o;
  o.masks = kSparseHeaderBytes;
  o.scales = o.masks + 8 * blocks;
  o.row_start = o.scales + sp_align8(2 * blocks);
  o.values = o.row_start + sp_align8(4 * (static_cast<size_t>(rows) + 1));
  o.end = o.values + sp_align8(value_bytes + kSparseValuePad);
  return o;
}

DType value_dtype(uint32_t v) { return v == 2 ? DType::kSpQ4_0 : DType::kSpQ8_0; }
uint32_t value_code(DType t) { return t == DType::kSpQ4_0 ? 2 : 8; }

}  // namespace

SparseView sparse_view(const uint8_t* data) {
  SparseView w;
  w.type = value_dtype(sp_read<uint32_t>(data + 16));
  w.n_bytes = sp_read<uint64_t>(data + 8);
  w.rows = static_cast<int64_t>(sp_read<uint64_t>(data + 24));
  w.cols = static_cast<int64_t>(sp_read<uint64_t>(data + 32));
  w.value_bytes = sp_read<uint64_t>(data + 40);
  w.kept = sp_read<uint64_t>(data + 48);
  const SparseOffsets o = sparse_offsets(w.rows, w.cols, w.value_bytes);
  w.masks = reinterpret_cast<const uint64_t*>(data + o.masks);
  w.scales = reinterpret_cast<const uint16_t*>(data + o.scales);
  w.row_start = reinterpret_cast<const uint32_t*>(data + o.row_start);
  w.values = data + o.values;
  return w;
}

uint8_t* sparse_scratch(size_t bytes) {
  thread_local AlignedBuffer<uint8_t> buf;
  buf.ensure(bytes);
  return buf.data();
}

int64_t sparse_blocks(const SparseView& w) { return w.cols / kSparseBlock; }

uint64_t sparse_size(const uint8_t* data, size_t avail) {
  if (avail < 16 || std::memcmp(data, "SPRS", 4) != 0) return 0;
  return sp_read<uint64_t>(data + 8);
}

SparseView parse_sparse(const uint8_t* data, size_t avail, int64_t cols, int64_t rows, const char* what) {
  auto bad = [&](const std::string& why) { fail(ErrorCode::kCorruptFile, "sparse tensor '{}': {}", what, why); };
  if (avail < kSparseHeaderBytes || std::memcmp(data, "SPRS", 4) != 0) bad("no SPRS header");
  const uint32_t version = sp_read<uint32_t>(data + 4);
  if (version != kSparseVersion) bad(fmt::format("version {} (this build reads {})", version, kSparseVersion));
  const uint32_t vt = sp_read<uint32_t>(data + 16);
  if (vt != 8 && vt != 2) bad(fmt::format("value type {} (8: Q8_0, 2: Q4_0)", vt));
  if (sp_read<uint32_t>(data + 20) != kSparseBlock) bad(fmt::format("block {} is not 64", sp_read<uint32_t>(data + 20)));
  const uint64_t n_bytes = sp_read<uint64_t>(data + 8);
  const uint64_t r = sp_read<uint64_t>(data + 24), c = sp_read<uint64_t>(data + 32);
  if (r != static_cast<uint64_t>(rows) || c != static_cast<uint64_t>(cols) || cols % kSparseBlock != 0 || rows <= 0) {
    bad(fmt::format("header says {} x {}, the model {} x {} (columns a multiple of 64)", r, c, rows, cols));
  }
  if (n_bytes > avail) bad(fmt::format("{} bytes declared, {} in the file", n_bytes, avail));
  const uint64_t value_bytes = sp_read<uint64_t>(data + 40);
  if (value_bytes > n_bytes) bad(fmt::format("{} value bytes in a tensor of {}", value_bytes, n_bytes));
  const SparseOffsets o = sparse_offsets(rows, cols, value_bytes);
  if (o.end != n_bytes) bad(fmt::format("{} bytes, the layout of {} x {} takes {}", n_bytes, rows, cols, o.end));
  SparseView w = sparse_view(data);
  if (w.type != DType::kSpQ8_0 && w.type != DType::kSpQ4_0) bad("value type");
  const int64_t nb = sparse_blocks(w);
  uint64_t kept = 0;
  if (w.row_start[0] != 0) bad("row 0 does not start at the values");
  for (int64_t row = 0; row < rows; ++row) {
    uint64_t bytes = 0;
    for (int64_t b = 0; b < nb; ++b) {
      const size_t i = static_cast<size_t>(row * nb + b);
      const int k = std::popcount(w.masks[i]);
      kept += static_cast<uint64_t>(k);
      bytes += sparse_block_value_bytes(w.type, k);
      const float d = fp16_to_f32(w.scales[i]);
      if (!std::isfinite(d)) bad(fmt::format("row {} block {}: scale {}", row, b, d));
    }
    if (w.row_start[row + 1] < w.row_start[row] || w.row_start[row + 1] - w.row_start[row] != bytes) {
      bad(fmt::format("row {} holds {} value bytes, its masks need {}", row,
                      static_cast<int64_t>(w.row_start[row + 1]) - static_cast<int64_t>(w.row_start[row]), bytes));
    }
  }
  if (w.row_start[rows] != value_bytes) bad(fmt::format("rows end at {}, the values at {}", w.row_start[rows], value_bytes));
  if (kept != w.kept) bad(fmt::format("{} values kept, the header says {}", kept, w.kept));
  for (size_t i = value_bytes; i < value_bytes + kSparseValuePad; ++i) {
    if (w.values[i] != 0) bad("the padding after the values is not zero");
  }
  return w;
}

std::vector<uint8_t> encode_sparse(DType type, const float* w, int64_t rows, int64_t cols) {
  TESSERA_CHECK(is_sparse(type), kInvalidArgument, "encode_sparse: {} is not a sparse type", dtype_name(type));
  TESSERA_CHECK(rows > 0 && cols > 0 && cols % kSparseBlock == 0, kInvalidArgument,
                "encode_sparse: {} x {} (columns must be a positive multiple of 64)", rows, cols);
  const int64_t nb = cols / kSparseBlock;
  const bool q4 = type == DType::kSpQ4_0;
  std::vector<uint64_t> masks(static_cast<size_t>(rows * nb));
  std::vector<uint16_t> scales(masks.size());
  std::vector<uint32_t> row_start(static_cast<size_t>(rows) + 1, 0);
  std::vector<uint8_t> values;
  uint64_t kept = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < nb; ++b) {
      const float* x = w + r * cols + b * kSparseBlock;
      uint64_t m = 0;
      float amax = 0.0f, max = 0.0f;
      for (int j = 0; j < kSparseBlock; ++j) {
        if (x[j] == 0.0f) continue;
        m |= uint64_t{1} << j;
        if (std::fabs(x[j]) > amax) {
          amax = std::fabs(x[j]);
          max = x[j];
        }
      }
      const size_t i = static_cast<size_t>(r * nb + b);
      masks[i] = m;
      const float d = q4 ? max / -8.0f : amax / 127.0f;
      const fp16_t dh = f32_to_fp16(d);
      scales[i] = dh;
      const float id = d != 0.0f ? 1.0f / d : 0.0f;
      int n = 0;
      uint8_t pending = 0;
      for (int j = 0; j < kSparseBlock; ++j) {
        if (!(m >> j & 1)) continue;
        if (q4) {
          const int q = std::min(15, static_cast<int>(x[j] * id + 8.5f));
          if (n % 2 == 0) {
            pending = static_cast<uint8_t>(q);
          } else {
            values.push_back(static_cast<uint8_t>(pending | q << 4));
          }
        } else {
          values.push_back(static_cast<uint8_t>(static_cast<int8_t>(std::nearbyint(x[j] * id))));
        }
        ++n;
      }
      if (q4 && n % 2 == 1) values.push_back(pending);
      kept += static_cast<uint64_t>(n);
    }
    TESSERA_CHECK(values.size() <= UINT32_MAX, kInvalidArgument,
                  "encode_sparse: {} x {} keeps more than 4 GiB of values (split the tensor)", rows, cols);
    row_start[static_cast<size_t>(r) + 1] = static_cast<uint32_t>(values.size());
  }
  const SparseOffsets o = sparse_offsets(rows, cols, values.size());
  std::vector<uint8_t> out(o.end, 0);
  std::memcpy(out.data(), "SPRS", 4);
  sp_write<uint32_t>(out.data() + 4, kSparseVersion);
  sp_write<uint64_t>(out.data() + 8, o.end);
  sp_write<uint32_t>(out.data() + 16, value_code(type));
  sp_write<uint32_t>(out.data() + 20, static_cast<uint32_t>(kSparseBlock));
  sp_write<uint64_t>(out.data() + 24, static_cast<uint64_t>(rows));
  sp_write<uint64_t>(out.data() + 32, static_cast<uint64_t>(cols));
  sp_write<uint64_t>(out.data() + 40, values.size());
  sp_write<uint64_t>(out.data() + 48, kept);
  std::memcpy(out.data() + o.masks, masks.data(), 8 * masks.size());
  std::memcpy(out.data() + o.scales, scales.data(), 2 * scales.size());
  std::memcpy(out.data() + o.row_start, row_start.data(), 4 * row_start.size());
  if (!values.empty()) std::memcpy(out.data() + o.values, values.data(), values.size());
  return out;
}

void sparse_row_levels(const SparseView& w, int64_t r, int8_t* out) {
  const uint8_t* v = w.values + w.row_start[r];
  const bool q4 = w.type == DType::kSpQ4_0;
  for (int64_t b = 0; b < sparse_blocks(w); ++b) {
    const uint64_t m = w.masks[r * sparse_blocks(w) + b];
    int n = 0;
    for (int j = 0; j < kSparseBlock; ++j) {
      int8_t q = 0;
      if (m >> j & 1) {
        q = q4 ? static_cast<int8_t>(((n % 2 == 0 ? v[n / 2] : v[n / 2] >> 4) & 15) - 8) : static_cast<int8_t>(v[n]);
        ++n;
      }
      out[b * kSparseBlock + j] = q;
    }
    v += sparse_block_value_bytes(w.type, n);
  }
}

void sparse_dequantize_row(const SparseView& w, int64_t r, float* out) {
  std::vector<int8_t> q(static_cast<size_t>(w.cols));
  sparse_row_levels(w, r, q.data());
  for (int64_t c = 0; c < w.cols; ++c) out[c] = fp16_to_f32(w.scales[r * sparse_blocks(w) + c / kSparseBlock]) * q[static_cast<size_t>(c)];
}

void sparse_dense_row(const SparseView& w, int64_t r, uint8_t* out) {
  std::vector<int8_t> q(static_cast<size_t>(w.cols));
  sparse_row_levels(w, r, q.data());
  const bool q4 = w.type == DType::kSpQ4_0;
  for (int64_t b = 0; b < w.cols / kQK; ++b) {
    const uint16_t d = w.scales[r * sparse_blocks(w) + b / 2];
    const int8_t* qb = q.data() + b * kQK;
    if (q4) {
      BlockQ4_0 blk;
      blk.d = d;
      for (int i = 0; i < kQK / 2; ++i) blk.qs[i] = static_cast<uint8_t>((qb[i] + 8) | (qb[i + 16] + 8) << 4);
      std::memcpy(out + b * sizeof blk, &blk, sizeof blk);
    } else {
      BlockQ8_0 blk;
      blk.d = d;
      std::memcpy(blk.qs, qb, kQK);
      std::memcpy(out + b * sizeof blk, &blk, sizeof blk);
    }
  }
}

}  // namespace tessera::kernels
