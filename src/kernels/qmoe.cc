// QMOE tensors (kernels/qmoe.h): parsing and checking the layout, and the
// products' threads and kernel table. The kernels: qmoe_ref.cc and
// qmoe_<isa>.cc.
#include "kernels/qmoe.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/fp16.h"
#include "kernels/qmoe_kernels.h"

namespace tessera::kernels {
namespace {

template <class T>
T read_le(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

const QmoeKernels& qmoe_table(Isa isa) {
  TESSERA_CHECK(isa_supported(isa), kInvalidArgument, "QMoE kernels: ISA {} is not supported by this CPU",
                isa_name(isa));
  switch (isa) {
    case Isa::kAvx2: return qmoe_kernels_avx2();
    case Isa::kAvx512: return qmoe_kernels_avx512();
    case Isa::kScalar: break;
  }
  return qmoe_kernels_ref();
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

void qmoe_matmul(const QmoeView& w, int64_t m, const float* x, int64_t x_stride, int64_t n_tokens, float* y,
                 int64_t y_stride, const KernelContext& ctx) {
  const QmoeJob job{&w, m, x, x_stride, n_tokens, y, y_stride};
  qmoe_matmul_grouped(std::span(&job, 1), ctx);
}

void qmoe_matmul_grouped(std::span<const QmoeJob> jobs, const KernelContext& ctx) {
  if (jobs.empty()) return;
  const QmoeKernels& k = qmoe_table(ctx.isa);
  // Inputs padded with 16 zeros per token (a codeword reads 16 lanes).
  size_t padded = 0;
  std::vector<size_t> x_at(jobs.size());
  for (size_t j = 0; j < jobs.size(); ++j) {
    const QmoeJob& q = jobs[j];
    TESSERA_CHECK(q.m >= 0 && q.m < q.w->matrices && q.n_tokens >= 0 &&
                      (q.n_tokens <= 1 || (q.x_stride >= q.w->cols && q.y_stride >= q.w->rows)),
                  kInvalidArgument, "qmoe_matmul: matrix {} of {}, {} tokens, strides {} / {} do not fit", q.m,
                  q.w->matrices, q.n_tokens, q.x_stride, q.y_stride);
    x_at[j] = padded;
    padded += static_cast<size_t>(q.n_tokens * (q.w->cols + kQmoeMaxLength));
  }
  AlignedBuffer<float> own;
  AlignedBuffer<float>& buf = ctx.ws != nullptr ? ctx.ws->padded_x : own;
  buf.ensure(padded);
  // Work units: (job, row group of the matrix).
  std::vector<std::pair<size_t, int64_t>> units;
  int64_t macs = 0;
  for (size_t j = 0; j < jobs.size(); ++j) {
    const QmoeJob& q = jobs[j];
    const int64_t stride = q.w->cols + kQmoeMaxLength;
    for (int64_t t = 0; t < q.n_tokens; ++t) {
      float* dst = buf.data() + x_at[j] + t * stride;
      std::copy_n(q.x + t * q.x_stride, q.w->cols, dst);
      std::fill_n(dst + q.w->cols, kQmoeMaxLength, 0.0f);
    }
    // Rows of matrix m are global rows [m * rows, (m + 1) * rows): groups
    // of 32 global rows, clipped to the matrix.
    const int64_t first = q.m * q.w->rows, last = first + q.w->rows;
    for (int64_t g = first / kQmoeGroupRows; g * kQmoeGroupRows < last; ++g) units.push_back({j, g});
    macs += q.w->rows * q.w->cols * q.n_tokens;
  }
  auto run_unit = [&](size_t u) {
    const auto [j, g] = units[u];
    const QmoeJob& q = jobs[j];
    const QmoeView& w = *q.w;
    const int64_t first = q.m * w.rows;
    const int64_t g_begin = std::max(first, g * kQmoeGroupRows);
    const int64_t g_end = std::min(first + w.rows, (g + 1) * kQmoeGroupRows);
    uint64_t code = w.group_start[g];
    // A group that starts before the matrix (rows of the previous one):
    // skip their codewords.
    for (int64_t r = g * kQmoeGroupRows; r < g_begin; ++r) {
      for (int64_t c = 0; c < w.cols;) c += w.dict[w.codes[code++]].length;
    }
    QmoeRowsArgs a;
    a.w = &w;
    a.m = q.m;
    a.row_begin = g_begin - first;
    a.row_end = g_end - first;
    a.code_begin = code;
    a.x = buf.data() + x_at[j];
    a.x_stride = w.cols + kQmoeMaxLength;
    a.n_tokens = q.n_tokens;
    a.y = q.y;
    a.y_stride = q.n_tokens <= 1 ? w.rows : q.y_stride;
    k.rows(a);
  };
  ThreadPool* pool = parallel_pool(ctx, macs, kMinParallelFloatMatmulMacs);
  if (pool == nullptr) {
    for (size_t u = 0; u < units.size(); ++u) run_unit(u);
    return;
  }
  pool->parallel_for(static_cast<int64_t>(units.size()), 1, [&](int64_t b, int64_t e) {
    for (int64_t u = b; u < e; ++u) run_unit(static_cast<size_t>(u));
  });
}

}  // namespace tessera::kernels
