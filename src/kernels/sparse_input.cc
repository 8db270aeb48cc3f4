// transpose_q8_0() and sparse_input_matmul(): the transposed layout, the
// input's quantization (matmul's, so the result matches it), the list of
// nonzero inputs, and the split of output chunks across threads. The
// kernels are in sparse_input_ref.cc and sparse_input_<isa>.cc.
#include "kernels/sparse_input.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <new>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/blocks.h"
#include "kernels/matmul_kernels.h"
#include "kernels/sparse_input_kernels.h"

namespace tessera::kernels {
namespace {

// n bytes aligned to 2 MiB, advised into transparent huge pages before
// their first touch (a no-op where THP is off).
std::shared_ptr<uint8_t> huge_buffer(size_t n) {
  constexpr size_t kHuge = size_t{2} << 20;
  const size_t bytes = (n + kHuge - 1) / kHuge * kHuge;
  void* p = std::aligned_alloc(kHuge, bytes);
  if (p == nullptr) throw std::bad_alloc();
  madvise(p, bytes, MADV_HUGEPAGE);
  return std::shared_ptr<uint8_t>(static_cast<uint8_t*>(p), [](uint8_t* q) { std::free(q); });
}

}  // namespace

TransposedQ8_0 transpose_q8_0(const WeightView& w) {
  TESSERA_CHECK(w.type == DType::kQ8_0 && w.cols % kQK == 0 && w.input_cols() == w.cols && w.rows > 0,
                kInvalidArgument, "transpose_q8_0: a {} weight of {} x {} (Q8_0 without padding only)",
                dtype_name(w.type), w.rows, w.cols);
  TransposedQ8_0 t;
  t.out = w.rows;
  t.in = w.cols;
  t.stride = (w.rows + 63) / 64 * 64;
  t.u = huge_buffer(static_cast<size_t>(t.in * t.stride));
  t.d.resize(static_cast<size_t>(t.in / kQK * t.stride));
  const int64_t nb = w.cols / kQK;
  constexpr int64_t kTile = 64;  // rows of W per pass: each write fills a cache line
  for (int64_t j0 = 0; j0 < w.rows; j0 += kTile) {
    const int64_t j1 = j0 + kTile < w.rows ? j0 + kTile : w.rows;
    for (int64_t g = 0; g < nb; ++g) {
      for (int64_t j = j0; j < j1; ++j) {
        BlockQ8_0 blk;
        std::memcpy(&blk, w.data + static_cast<size_t>(j) * w.row_bytes + g * sizeof(BlockQ8_0), sizeof blk);
        t.d[static_cast<size_t>(g * t.stride + j)] = blk.d;
        for (int i = 0; i < kQK; ++i) {
          t.u.get()[static_cast<size_t>((g * kQK + i) * t.stride + j)] = static_cast<uint8_t>(blk.qs[i] + 128);
        }
      }
    }
  }
  return t;
}

namespace {

const SparseInputKernels& table(Isa isa) {
  switch (isa) {
    case Isa::kAvx512: return sparse_input_kernels_avx512();
    case Isa::kAvx2: return sparse_input_kernels_avx2();
    case Isa::kScalar: break;
  }
  return sparse_input_kernels_ref();
}

}  // namespace

void sparse_input_matmul(const TransposedQ8_0& w, const float* x, int64_t x_stride, int64_t n_tokens, float* y,
                         int64_t y_stride, const KernelContext& ctx) {
  TESSERA_CHECK(isa_supported(ctx.isa), kInvalidArgument, "sparse_input_matmul: ISA {} is not supported by this CPU",
                isa_name(ctx.isa));
  sparse_input_matmul_with(table(ctx.isa), w, x, x_stride, n_tokens, y, y_stride, ctx);
}

namespace {

// The input quantized as matmul quantizes it for Q8_0 (the scalar
// reference's quantize_act: every table's gives the same bits) into ws.act.
ActLayout quantize_input(const float* x, int64_t x_stride, int64_t T, int64_t in, Workspace& ws) {
  const int64_t nb = in / kQK;
  ActLayout lay;
  lay.k = in;
  lay.d_offset = static_cast<size_t>(in);
  lay.sum_offset = lay.d_offset + 4 * static_cast<size_t>(nb);
  lay.row_bytes = (lay.sum_offset + 2 * static_cast<size_t>(nb) + 63) / 64 * 64;
  ws.act.ensure(static_cast<size_t>(T) * lay.row_bytes);
  matmul_kernels_ref().quantize_act(x, x_stride, 0, T, ws.act.data(), lay);
  return lay;
}

// The inputs with a nonzero value in any token, by block, in groups of 4
// (the last of a block padded with its first input and hq = 0), and each
// token's packed values and sums (sparse_input_kernels.h), in
// ws.sparse_index. Fills a's list fields.
void list_inputs(const ActLayout& lay, int64_t T, int64_t in, Workspace& ws, SparseInputArgs& a) {
  const int64_t nb = in / kQK;
  const size_t gstart_at = static_cast<size_t>(nb + 1), rows_at = gstart_at + static_cast<size_t>(nb + 1);
  const size_t hq4_at = rows_at + static_cast<size_t>(in + 4 * nb);
  const size_t hsum_at = hq4_at + static_cast<size_t>(T * (in / 4 + nb));
  ws.sparse_index.ensure(hsum_at + static_cast<size_t>(T * nb));
  int32_t* blocks = ws.sparse_index.data();
  int32_t* gstart = blocks + gstart_at;
  int32_t* rows = blocks + rows_at;
  const auto xq = [&](int64_t t, int64_t i) {
    return static_cast<int32_t>(reinterpret_cast<const int8_t*>(ws.act.data() + t * lay.row_bytes)[i]);
  };
  int64_t n_blocks = 0, n_rows = 0;
  for (int64_t g = 0; g < nb; ++g) {
    const int64_t first = n_rows;
    for (int64_t i = g * kQK; i < (g + 1) * kQK; ++i) {
      bool any = false;
      for (int64_t t = 0; t < T; ++t) any = any || xq(t, i) != 0;
      if (any) rows[n_rows++] = static_cast<int32_t>(i);
    }
    if (n_rows == first) continue;
    while ((n_rows - first) % 4 != 0) rows[n_rows++] = -1 - rows[first];  // padding: marked until its hq is 0
    blocks[n_blocks] = static_cast<int32_t>(g);
    gstart[n_blocks++] = static_cast<int32_t>(first / 4);
  }
  gstart[n_blocks] = static_cast<int32_t>(n_rows / 4);
  const int64_t n_groups = n_rows / 4;
  int32_t* hq4 = blocks + hq4_at;
  int32_t* hsum = blocks + hsum_at;
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t b = 0; b < n_blocks; ++b) {
      int32_t sum = 0;
      for (int64_t grp = gstart[b]; grp < gstart[b + 1]; ++grp) {
        uint32_t packed = 0;
        for (int r = 0; r < 4; ++r) {
          const int32_t i = rows[4 * grp + r];
          const int32_t v = i >= 0 ? xq(t, i) : 0;
          sum += v;
          packed |= static_cast<uint32_t>(static_cast<uint8_t>(static_cast<int8_t>(v))) << (8 * r);
        }
        hq4[t * n_groups + grp] = static_cast<int32_t>(packed);
      }
      hsum[t * n_blocks + b] = 128 * sum;
    }
  }
  for (int64_t k = 0; k < n_rows; ++k) {
    if (rows[k] < 0) rows[k] = -1 - rows[k];
  }
  a.blocks = blocks;
  a.gstart = gstart;
  a.rows = rows;
  a.n_blocks = n_blocks;
  a.n_groups = n_groups;
  a.hq4 = hq4;
  a.hsum = hsum;
}

}  // namespace

void sparse_input_matmul_with(const SparseInputKernels& k, const TransposedQ8_0& w, const float* x,
                              int64_t x_stride, int64_t n_tokens, float* y, int64_t y_stride,
                              const KernelContext& ctx) {
  TESSERA_CHECK(!w.empty() && n_tokens >= 1 && n_tokens <= kSparseInputMaxTokens &&
                    (n_tokens == 1 || (x_stride >= w.in && y_stride >= w.out)),
                kInvalidArgument, "sparse_input_matmul: {} tokens (1..{}), x stride {}, y stride {} for {} x {}",
                n_tokens, kSparseInputMaxTokens, x_stride, y_stride, w.out, w.in);
  const int64_t T = n_tokens;
  Workspace local;
  Workspace& ws = ctx.ws != nullptr ? *ctx.ws : local;
  const ActLayout lay = quantize_input(x, x_stride, T, w.in, ws);
  SparseInputArgs a;
  list_inputs(lay, T, w.in, ws, a);
  // Outputs in chunks of whole 64 columns into a buffer as wide as the stride.
  ws.sparse_y.ensure(static_cast<size_t>(T * w.stride));
  a.u = w.u.get();
  a.d = w.d.data();
  a.stride = w.stride;
  a.dx = reinterpret_cast<const float*>(ws.act.data() + lay.d_offset);
  a.dx_stride = static_cast<int64_t>(lay.row_bytes / sizeof(float));
  a.n_tokens = T;
  a.y = ws.sparse_y.data();
  a.y_stride = w.stride;
  const int64_t units = (w.stride + kSparseInputChunk - 1) / kSparseInputChunk;
  const auto run_chunks = [&](int64_t u0, int64_t u1) {
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t j0 = u * kSparseInputChunk;
      k.run(a, j0, j0 + kSparseInputChunk < w.stride ? j0 + kSparseInputChunk : w.stride);
    }
  };
  ThreadPool* pool = parallel_pool(ctx, 4 * a.n_groups * w.out * T, kMinParallelQuantMatmulMacs);
  if (pool == nullptr || units == 1) {
    run_chunks(0, units);
  } else {
    GuidedChunks chunks(units, 1);
    pool->run_dynamic([&](int, int nth) {
      int64_t u0 = 0, u1 = 0;
      while (chunks.claim(nth, &u0, &u1)) run_chunks(u0, u1);
    });
  }
  for (int64_t t = 0; t < T; ++t) {
    std::memcpy(y + t * y_stride, ws.sparse_y.data() + t * w.stride, static_cast<size_t>(w.out) * sizeof(float));
  }
}

}  // namespace tessera::kernels
