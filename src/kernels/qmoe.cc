// QMOE products (kernels/qmoe.h): their threads and kernel table. The
// kernels: qmoe_ref.cc and qmoe_<isa>.cc; the layout: qmoe_layout.cc.
#include "kernels/qmoe.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "kernels/qmoe_kernels.h"

namespace tessera::kernels {
namespace {

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

}  // namespace

void qmoe_matmul(const QmoeView& w, int64_t m, const float* x, int64_t x_stride, int64_t n_tokens, float* y,
                 int64_t y_stride, const KernelContext& ctx) {
  const QmoeJob job{&w, m, x, x_stride, n_tokens, y, y_stride};
  qmoe_matmul_grouped(std::span(&job, 1), ctx);
}

void qmoe_matmul_grouped(std::span<const QmoeJob> jobs, const KernelContext& ctx) {
  if (jobs.empty()) return;
  const QmoeKernels& k = qmoe_table(ctx.isa);
  // Inputs padded with 16 zeros per token (a codeword reads 16 lanes). The
  // bookkeeping lives in the workspace: no allocation once it has grown.
  Workspace own_ws;
  Workspace& ws = ctx.ws != nullptr ? *ctx.ws : own_ws;
  size_t padded = 0;
  std::vector<size_t>& x_at = ws.qmoe_x_at;
  x_at.resize(jobs.size());
  for (size_t j = 0; j < jobs.size(); ++j) {
    const QmoeJob& q = jobs[j];
    TESSERA_CHECK(q.m >= 0 && q.m < q.w->matrices && q.n_tokens >= 0 &&
                      (q.n_tokens <= 1 || (q.x_stride >= q.w->cols && q.y_stride >= q.w->rows)),
                  kInvalidArgument, "qmoe_matmul: matrix {} of {}, {} tokens, strides {} / {} do not fit", q.m,
                  q.w->matrices, q.n_tokens, q.x_stride, q.y_stride);
    x_at[j] = padded;
    padded += static_cast<size_t>(q.n_tokens * (q.w->cols + kQmoeMaxLength));
  }
  AlignedBuffer<float>& buf = ws.padded_x;
  buf.ensure(padded);
  // Work units: (job, row group of the matrix).
  std::vector<std::pair<size_t, int64_t>>& units = ws.qmoe_units;
  units.clear();
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
