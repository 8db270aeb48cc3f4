// QMOE tensors' layout (kernels/qmoe.h): parsing and checking it, and
// reading a row back. Apart from the products (qmoe.cc) so that the GGUF
// fuzz target (tests/fuzz) builds it without the ISA kernels.
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/fp16.h"
#include "kernels/qmoe.h"

namespace tessera::kernels {
namespace {

template <class T>
T read_le(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

size_t align8(size_t n) { return (n + 7) / 8 * 8; }

// Walks the codewords of rows [g * 32, ...) of group g: where each row's
// end falls. False if a row runs out of codewords or the group does not end
// exactly at the next group's start.
bool group_covers_rows(const QmoeView& w, int64_t g) {
  uint64_t k = w.group_start[g];
  const int64_t r_end = std::min(w.n_rows(), (g + 1) * kQmoeGroupRows);
  for (int64_t r = g * kQmoeGroupRows; r < r_end; ++r) {
    int64_t c = 0;
    while (c < w.cols) {
      if (k >= w.group_start[g + 1]) return false;
      c += w.dict[w.codes[k++]].length;
    }
  }
  return k == w.group_start[g + 1];
}

}  // namespace

uint64_t qmoe_size(const uint8_t* data, size_t avail) {
  if (avail < 16 || std::memcmp(data, "QMOE", 4) != 0) return 0;
  return read_le<uint64_t>(data + 8);
}

QmoeView parse_qmoe(const uint8_t* data, size_t avail, int64_t cols, int64_t rows, int64_t matrices,
                    const char* what, bool check_codes) {
  auto bad = [&](const std::string& why) { fail(ErrorCode::kCorruptFile, "QMOE tensor '{}': {}", what, why); };
  if (avail < kQmoeHeaderBytes + 256 * sizeof(QmoeEntry) || std::memcmp(data, "QMOE", 4) != 0) {
    bad("no QMOE header");
  }
  const uint32_t version = read_le<uint32_t>(data + 4);
  if (version != kQmoeVersion) bad(fmt::format("version {} (this build reads {})", version, kQmoeVersion));
  QmoeView w;
  w.cols = cols;
  w.rows = rows;
  w.matrices = matrices;
  w.n_bytes = read_le<uint64_t>(data + 8);
  if (w.n_bytes > avail) bad(fmt::format("{} bytes declared, {} in the file", w.n_bytes, avail));
  if (read_le<uint32_t>(data + 16) != kQmoeGroupRows) bad("group_rows is not 32");
  w.n_codes = read_le<uint64_t>(data + 24);
  size_t at = kQmoeHeaderBytes;
  w.dict = reinterpret_cast<const QmoeEntry*>(data + at);
  at += 256 * sizeof(QmoeEntry);
  for (int i = 0; i < 256; ++i) {
    const QmoeEntry& e = w.dict[i];
    const uint32_t inside = e.length >= 16 ? 0xffffu : (1u << e.length) - 1u;
    if (e.length < 1 || e.length > kQmoeMaxLength || (e.lo_mask & e.hi_mask) != 0 ||
        ((e.lo_mask | e.hi_mask) & ~inside) != 0) {
      bad(fmt::format("dictionary entry {} (length {}, masks {:#06x} {:#06x}) is not a codeword", i, e.length,
                      e.lo_mask, e.hi_mask));
    }
  }
  const size_t n_rows = static_cast<size_t>(w.n_rows());
  const size_t scales_bytes = n_rows * 4, starts_bytes = (static_cast<size_t>(w.groups()) + 1) * 4;
  if (cols <= 0 || rows <= 0 || matrices <= 0 || w.n_codes > w.n_bytes ||
      at + scales_bytes + starts_bytes + w.n_codes > w.n_bytes) {
    bad(fmt::format("{} bytes cannot hold {} rows of {} and {} codewords", w.n_bytes, n_rows, cols, w.n_codes));
  }
  w.scales = reinterpret_cast<const uint16_t*>(data + at);
  at += scales_bytes;
  w.group_start = reinterpret_cast<const uint32_t*>(data + at);
  at += starts_bytes;
  w.codes = data + at;
  if (align8(at + w.n_codes) != w.n_bytes) bad(fmt::format("{} bytes, the layout takes {}", w.n_bytes, align8(at + w.n_codes)));
  if (w.group_start[0] != 0 || w.group_start[w.groups()] != w.n_codes) bad("group starts do not span the codes");
  for (int64_t g = 0; g < w.groups(); ++g) {
    if (w.group_start[g + 1] < w.group_start[g]) bad(fmt::format("group {} starts before group {}", g + 1, g));
  }
  for (int64_t g = 0; check_codes && g < w.groups(); ++g) {
    if (!group_covers_rows(w, g)) bad(fmt::format("the codewords of row group {} do not cover its rows", g));
  }
  return w;
}

void qmoe_dequantize_row(const QmoeView& w, int64_t m, int64_t r, float* out) {
  const int64_t global = m * w.rows + r;
  const int64_t g = global / kQmoeGroupRows;
  uint64_t k = w.group_start[g];
  std::vector<float> row(static_cast<size_t>(w.cols + kQmoeMaxLength), 0.0f);
  const float lo = fp16_to_f32(w.scales[2 * global]), hi = fp16_to_f32(w.scales[2 * global + 1]);
  for (int64_t rr = g * kQmoeGroupRows; rr <= global; ++rr) {
    int64_t c = 0;
    while (c < w.cols) {
      const QmoeEntry& e = w.dict[w.codes[k++]];
      for (int j = 0; rr == global && j < e.length; ++j) {
        row[c + j] = (e.lo_mask >> j & 1) ? lo : (e.hi_mask >> j & 1) ? hi : 0.0f;
      }
      c += e.length;
    }
  }
  std::copy_n(row.data(), w.cols, out);
}

}  // namespace tessera::kernels
