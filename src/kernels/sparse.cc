// The sparse tensor layout (kernels/sparse.h): encoding, checking, and the
// scalar decoders the loader, the tests and the reference kernel use.
#include "kernels/sparse.h"

#include <algorithm>
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

DType value_dtype(uint32_t v) { return v == 2 ? DType::kSpQ4_0 : DType::kSpQ8_0; }
uint32_t value_code(DType t) { return t == DType::kSpQ4_0 ? 2 : 8; }

constexpr int kG = static_cast<int>(kSparseGroupRows);

int64_t groups_of(int64_t rows) { return (rows + kG - 1) / kG; }

// Where the streams start, and the end of the tensor.
size_t streams_at(int64_t rows) { return kSparseHeaderBytes + 8 * (static_cast<size_t>(groups_of(rows)) + 1); }
size_t tensor_end(int64_t rows, uint64_t stream_bytes) {
  return streams_at(rows) + sp_align8(stream_bytes + kSparseValuePad);
}

}  // namespace

SparseView sparse_view(const uint8_t* data) {
  SparseView w;
  w.type = value_dtype(sp_read<uint32_t>(data + 16));
  w.n_bytes = sp_read<uint64_t>(data + 8);
  w.rows = static_cast<int64_t>(sp_read<uint64_t>(data + 24));
  w.cols = static_cast<int64_t>(sp_read<uint64_t>(data + 32));
  w.stream_bytes = sp_read<uint64_t>(data + 40);
  w.kept = sp_read<uint64_t>(data + 48);
  w.group_start = reinterpret_cast<const uint64_t*>(data + kSparseHeaderBytes);
  w.streams = data + streams_at(w.rows);
  return w;
}

uint8_t* sparse_scratch(size_t bytes) {
  thread_local AlignedBuffer<uint8_t> buf;
  buf.ensure(bytes);
  return buf.data();
}

int64_t sparse_blocks(const SparseView& w) { return w.cols / kSparseBlock; }
int64_t sparse_groups(const SparseView& w) { return groups_of(w.rows); }

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
  const uint64_t stream_bytes = sp_read<uint64_t>(data + 40);
  if (stream_bytes > n_bytes || tensor_end(rows, stream_bytes) != n_bytes) {
    bad(fmt::format("{} bytes, the layout of {} x {} with {} stream bytes takes {}", n_bytes, rows, cols, stream_bytes,
                    stream_bytes > n_bytes ? 0 : tensor_end(rows, stream_bytes)));
  }
  SparseView w = sparse_view(data);
  const int64_t nb = sparse_blocks(w), groups = sparse_groups(w);
  if (w.group_start[0] != 0 || w.group_start[groups] != stream_bytes) bad("group starts do not span the streams");
  uint64_t kept = 0;
  for (int64_t g = 0; g < groups; ++g) {
    const uint64_t begin = w.group_start[g], end = w.group_start[g + 1];
    if (end < begin || end > stream_bytes) bad(fmt::format("group {} runs from {} to {}", g, begin, end));
    uint64_t at = begin;
    for (int64_t b = 0; b < nb; ++b) {
      if (end - at < kSparseBlockHead) bad(fmt::format("group {} ends inside super-block {}", g, b));
      const uint8_t* head = w.streams + at;
      uint64_t bytes = 0, padding_bits = 0;
      for (int r = 0; r < kG; ++r) {
        const float d = fp16_to_f32(sp_read<uint16_t>(head + 8 * kG + 2 * r));
        if (g * kG + r >= rows) {
          padding_bits |= uint64_t{15} << (4 * r);
          if (d != 0.0f) bad(fmt::format("padding row {} of group {} has a scale", r, g));
        }
        if (!std::isfinite(d)) bad(fmt::format("row {} block {}: scale {}", g * kG + r, b, d));
      }
      for (int j = 0; j < kG; ++j) {
        const uint64_t m = sp_read<uint64_t>(head + 8 * j);
        if (m & padding_bits) bad(fmt::format("group {} keeps weights of rows past the last", g));
        kept += static_cast<uint64_t>(std::popcount(m));
        bytes += sparse_block_value_bytes(w.type, std::popcount(m));
      }
      at += kSparseBlockHead;
      if (end - at < bytes) bad(fmt::format("group {} ends inside the values of super-block {}", g, b));
      at += bytes;
    }
    if (at != end) bad(fmt::format("group {} holds {} bytes, its masks need {}", g, end - begin, at - begin));
  }
  if (kept != w.kept) bad(fmt::format("{} values kept, the header says {}", kept, w.kept));
  for (size_t i = stream_bytes; i < stream_bytes + kSparseValuePad; ++i) {
    if (w.streams[i] != 0) bad("the padding after the streams is not zero");
  }
  return w;
}

namespace {

// One row's 64 weights of a super-block: its fp16 scale and the level of
// each weight, SP_Q8_0's q (as a byte) or SP_Q4_0's q in 0..15.
void row_levels(bool q4, const float* x, uint16_t* scale, uint8_t* level) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < kSparseBlock; ++j) {
    if (x[j] != 0.0f && std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  const float d = q4 ? max / -8.0f : amax / 127.0f;
  *scale = f32_to_fp16(d);
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (int j = 0; j < kSparseBlock; ++j) {
    level[j] = q4 ? static_cast<uint8_t>(std::min(15, static_cast<int>(x[j] * id + 8.5f)))
                  : static_cast<uint8_t>(static_cast<int8_t>(std::nearbyint(x[j] * id)));
  }
}

// The 16 rows x 64 columns of a group's super-block at p: levels (SP_Q8_0:
// q; SP_Q4_0: q - 8; 0 where pruned), kept masks per row (bit c: column c),
// scales. Returns the end of its bytes.
const uint8_t* decode_superblock(bool q4, const uint8_t* p, int8_t (*q)[kSparseBlock], uint64_t* row_mask,
                                 uint16_t* d) {
  const uint8_t* v = p + kSparseBlockHead;
  for (int r = 0; r < kG; ++r) {
    d[r] = sp_read<uint16_t>(p + 8 * kG + 2 * r);
    row_mask[r] = 0;
    for (int c = 0; c < kSparseBlock; ++c) q[r][c] = 0;
  }
  for (int j = 0; j < kG; ++j) {
    const uint64_t m = sp_read<uint64_t>(p + 8 * j);
    int n = 0;
    for (int pos = 0; pos < 64; ++pos) {
      if (!(m >> pos & 1)) continue;
      const int r = pos / 4, c = 4 * j + pos % 4;
      q[r][c] = q4 ? static_cast<int8_t>(((n % 2 == 0 ? v[n / 2] : v[n / 2] >> 4) & 15) - 8) : static_cast<int8_t>(v[n] - 128);
      row_mask[r] |= uint64_t{1} << c;
      ++n;
    }
    v += sparse_block_value_bytes(q4 ? DType::kSpQ4_0 : DType::kSpQ8_0, n);
  }
  return v;
}

}  // namespace

namespace {

// The tensor's bytes: header, group starts, streams, padding.
std::vector<uint8_t> assemble(DType type, int64_t rows, int64_t cols, const std::vector<uint64_t>& group_start,
                              const std::vector<uint8_t>& streams, uint64_t kept) {
  const size_t end = tensor_end(rows, streams.size());
  std::vector<uint8_t> out(end, 0);
  std::memcpy(out.data(), "SPRS", 4);
  sp_write<uint32_t>(out.data() + 4, kSparseVersion);
  sp_write<uint64_t>(out.data() + 8, end);
  sp_write<uint32_t>(out.data() + 16, value_code(type));
  sp_write<uint32_t>(out.data() + 20, static_cast<uint32_t>(kSparseBlock));
  sp_write<uint64_t>(out.data() + 24, static_cast<uint64_t>(rows));
  sp_write<uint64_t>(out.data() + 32, static_cast<uint64_t>(cols));
  sp_write<uint64_t>(out.data() + 40, streams.size());
  sp_write<uint64_t>(out.data() + 48, kept);
  std::memcpy(out.data() + kSparseHeaderBytes, group_start.data(), 8 * group_start.size());
  if (!streams.empty()) std::memcpy(out.data() + streams_at(rows), streams.data(), streams.size());
  return out;
}

}  // namespace

std::vector<uint8_t> encode_sparse(DType type, const float* w, int64_t rows, int64_t cols) {
  TESSERA_CHECK(is_sparse(type), kInvalidArgument, "encode_sparse: {} is not a sparse type", dtype_name(type));
  TESSERA_CHECK(rows > 0 && cols > 0 && cols % kSparseBlock == 0, kInvalidArgument,
                "encode_sparse: {} x {} (columns must be a positive multiple of 64)", rows, cols);
  const int64_t nb = cols / kSparseBlock, groups = groups_of(rows);
  const bool q4 = type == DType::kSpQ4_0;
  std::vector<uint64_t> group_start(static_cast<size_t>(groups) + 1, 0);
  std::vector<uint8_t> streams;
  uint64_t kept = 0;
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t b = 0; b < nb; ++b) {
      uint16_t scales[kG] = {};
      uint8_t level[kG][kSparseBlock] = {};
      bool keep[kG][kSparseBlock] = {};
      for (int r = 0; r < kG && g * kG + r < rows; ++r) {
        const float* x = w + (g * kG + r) * cols + b * kSparseBlock;
        row_levels(q4, x, &scales[r], level[r]);
        for (int c = 0; c < kSparseBlock; ++c) keep[r][c] = x[c] != 0.0f;
      }
      const size_t head = streams.size();
      streams.resize(head + kSparseBlockHead, 0);
      std::memcpy(streams.data() + head + 8 * kG, scales, sizeof scales);
      for (int j = 0; j < kG; ++j) {
        uint64_t m = 0;
        int n = 0;
        for (int pos = 0; pos < 64; ++pos) {
          const int r = pos / 4, c = 4 * j + pos % 4;
          if (!keep[r][c]) continue;
          m |= uint64_t{1} << pos;
          if (!q4) {
            streams.push_back(static_cast<uint8_t>(level[r][c] ^ 0x80));  // q + 128
          } else if (n % 2 == 0) {
            streams.push_back(level[r][c]);
          } else {
            streams.back() = static_cast<uint8_t>(streams.back() | level[r][c] << 4);
          }
          ++n;
        }
        std::memcpy(streams.data() + head + 8 * j, &m, 8);
        kept += static_cast<uint64_t>(n);
      }
    }
    group_start[static_cast<size_t>(g) + 1] = streams.size();
  }
  return assemble(type, rows, cols, group_start, streams, kept);
}

std::vector<uint8_t> sparse_part(const SparseView& w, int64_t r0, int64_t n_rows, int64_t c0, int64_t n_cols) {
  TESSERA_CHECK(r0 >= 0 && n_rows > 0 && r0 + n_rows <= w.rows && r0 % kG == 0 &&
                    (n_rows % kG == 0 || r0 + n_rows == w.rows),
                kInvalidArgument, "a sparse matrix's rows [{}, {}) of {} (groups of {})", r0, r0 + n_rows, w.rows, kG);
  TESSERA_CHECK(c0 >= 0 && n_cols > 0 && c0 + n_cols <= w.cols && c0 % kSparseBlock == 0 && n_cols % kSparseBlock == 0,
                kInvalidArgument, "a sparse matrix's columns [{}, {}) of {} (blocks of {})", c0, c0 + n_cols, w.cols,
                kSparseBlock);
  const bool q4 = w.type == DType::kSpQ4_0;
  const int64_t b0 = c0 / kSparseBlock, b1 = (c0 + n_cols) / kSparseBlock, g0 = r0 / kG;
  const int64_t groups = groups_of(n_rows);
  std::vector<uint64_t> group_start(static_cast<size_t>(groups) + 1, 0);
  std::vector<uint8_t> streams;
  uint64_t kept = 0;
  for (int64_t g = 0; g < groups; ++g) {
    const uint8_t* p = w.streams + w.group_start[g0 + g];
    for (int64_t b = 0; b < b1; ++b) {
      uint64_t masks[kG];
      std::memcpy(masks, p, sizeof masks);
      size_t bytes = kSparseBlockHead;
      uint64_t n = 0;
      for (const uint64_t m : masks) {
        const int pc = std::popcount(m);
        bytes += q4 ? static_cast<size_t>(pc + 1) / 2 : static_cast<size_t>(pc);  // each tile's from a byte
        n += static_cast<uint64_t>(pc);
      }
      if (b >= b0) {
        streams.insert(streams.end(), p, p + bytes);
        kept += n;
      }
      p += bytes;
    }
    group_start[static_cast<size_t>(g) + 1] = streams.size();
  }
  return assemble(w.type, n_rows, n_cols, group_start, streams, kept);
}

namespace {

// Row r's super-blocks in order: f(b, row mask, scale, levels[64]).
template <class F>
void for_row_blocks(const SparseView& w, int64_t r, F f) {
  const uint8_t* p = w.streams + w.group_start[r / kG];
  const int k = static_cast<int>(r % kG);
  int8_t q[kG][kSparseBlock];
  uint64_t masks[kG];
  uint16_t d[kG];
  for (int64_t b = 0; b < sparse_blocks(w); ++b) {
    p = decode_superblock(w.type == DType::kSpQ4_0, p, q, masks, d);
    f(b, masks[k], d[k], q[k]);
  }
}

}  // namespace

void sparse_row_levels(const SparseView& w, int64_t r, int8_t* out) {
  for_row_blocks(w, r, [&](int64_t b, uint64_t, uint16_t, const int8_t* q) {
    std::memcpy(out + b * kSparseBlock, q, kSparseBlock);
  });
}

std::vector<uint64_t> sparse_row_masks(const SparseView& w, int64_t r) {
  std::vector<uint64_t> m(static_cast<size_t>(sparse_blocks(w)));
  for_row_blocks(w, r, [&](int64_t b, uint64_t mask, uint16_t, const int8_t*) { m[static_cast<size_t>(b)] = mask; });
  return m;
}

std::vector<uint16_t> sparse_row_scales(const SparseView& w, int64_t r) {
  std::vector<uint16_t> d(static_cast<size_t>(sparse_blocks(w)));
  for_row_blocks(w, r, [&](int64_t b, uint64_t, uint16_t s, const int8_t*) { d[static_cast<size_t>(b)] = s; });
  return d;
}

void sparse_dequantize_row(const SparseView& w, int64_t r, float* out) {
  std::vector<int8_t> q(static_cast<size_t>(w.cols));
  sparse_row_levels(w, r, q.data());
  const std::vector<uint16_t> d = sparse_row_scales(w, r);
  for (int64_t c = 0; c < w.cols; ++c) out[c] = fp16_to_f32(d[static_cast<size_t>(c / kSparseBlock)]) * q[static_cast<size_t>(c)];
}

void sparse_dense_row(const SparseView& w, int64_t r, uint8_t* out) {
  std::vector<int8_t> q(static_cast<size_t>(w.cols));
  sparse_row_levels(w, r, q.data());
  const std::vector<uint16_t> ds = sparse_row_scales(w, r);
  const bool q4 = w.type == DType::kSpQ4_0;
  for (int64_t b = 0; b < w.cols / kQK; ++b) {
    const uint16_t d = ds[static_cast<size_t>(b / 2)];
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
