// W8A8: weight quantization and packing, the activations' quantization and
// the split of a product across threads. The kernels are in w8a8_ref.cc and
// w8a8_<isa>.cc.
#include "kernels/w8a8.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"

namespace tessera::kernels {
namespace {

const W8A8Kernels& w8a8_table(Isa isa) {
  switch (isa) {
    case Isa::kAvx512: return amx_usable() ? w8a8_kernels_amx() : w8a8_kernels_avx512();
    case Isa::kAvx2: return w8a8_kernels_avx2();
    case Isa::kScalar: break;
  }
  return w8a8_kernels_ref();
}

// Work units: row groups in blocks of kGroupsPerUnit, tokens in tiles of
// kTokensPerUnit (a unit's weights stay in L2 while its tokens pass).
constexpr int64_t kGroupsPerUnit = 4;
constexpr int64_t kTokensPerUnit = 64;

// max_k |row[k]|; a non-finite weight is refused.
float row_absmax(const float* row, int64_t cols, int64_t r, const char* what) {
  float amax = 0.0f;
  for (int64_t k = 0; k < cols; ++k) {
    TESSERA_CHECK(std::isfinite(row[k]), kInvalidArgument, "{}: weight ({}, {}) is not finite", what, r, k);
    amax = std::max(amax, std::fabs(row[k]));
  }
  return amax;
}

}  // namespace

void quantize_rows_w8(const float* w, int64_t rows, int64_t cols, int8_t* q, float* sw) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = w + r * cols;
    const float amax = row_absmax(row, cols, r, "W8A8");
    sw[r] = amax / 127.0f;
    const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
    for (int64_t k = 0; k < cols; ++k) {
      q[r * cols + k] = static_cast<int8_t>(std::clamp(std::nearbyint(row[k] * id), -127.0f, 127.0f));
    }
  }
}

W8Matrix pack_w8(const int8_t* q, const float* sw, int64_t rows, int64_t cols) {
  TESSERA_CHECK(rows > 0 && cols > 0 && cols <= 65536, kInvalidArgument,
                "W8A8: a {} x {} matrix (1..65536 columns: the int32 sums must not overflow)", rows, cols);
  W8Matrix m;
  m.rows = rows;
  m.cols = cols;
  m.cols4 = (cols + 3) / 4;
  m.groups = (rows + kW8Group - 1) / kW8Group;
  m.q.resize(static_cast<size_t>(m.groups * m.cols4 * kW8Group * 4));
  m.sw.resize(static_cast<size_t>(m.groups * kW8Group));
  m.wsum128.resize(m.sw.size());
  std::fill(m.q.data(), m.q.data() + m.q.size(), int8_t{0});
  std::fill(m.sw.data(), m.sw.data() + m.sw.size(), 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t g = r / kW8Group, i = r % kW8Group;
    int32_t sum = 0;
    for (int64_t k = 0; k < cols; ++k) {
      const int8_t v = q[r * cols + k];
      TESSERA_CHECK(v >= -127, kInvalidArgument, "W8A8: weight ({}, {}) is -128 (codes are -127..127)", r, k);
      m.q[static_cast<size_t>(((g * m.cols4 + k / 4) * kW8Group + i) * 4 + k % 4)] = v;
      sum += v;
    }
    m.sw[static_cast<size_t>(r)] = sw[r];
    m.wsum128[static_cast<size_t>(r)] = 128 * sum;
  }
  for (int64_t r = rows; r < m.groups * kW8Group; ++r) m.wsum128[static_cast<size_t>(r)] = 0;
  return m;
}

void quantize_rows_w4(const float* w, int64_t rows, int64_t cols, int8_t* q, float* sw) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = w + r * cols;
    const float amax = row_absmax(row, cols, r, "W4A8");
    float best_s = amax / 7.0f;
    double best_err = -1.0;
    for (int step = 0; step <= 6 && amax > 0.0f; ++step) {
      const float s = (1.0f - 0.05f * static_cast<float>(step)) * amax / 7.0f;
      double err = 0.0;
      for (int64_t k = 0; k < cols; ++k) {
        const float v = std::clamp(std::nearbyint(row[k] / s), -8.0f, 7.0f);
        const double d = static_cast<double>(row[k]) - static_cast<double>(v) * s;
        err += d * d;
      }
      if (best_err < 0.0 || err < best_err) {
        best_err = err;
        best_s = s;
      }
    }
    sw[r] = best_s;
    for (int64_t k = 0; k < cols; ++k) {
      q[r * cols + k] = best_s > 0.0f ? static_cast<int8_t>(std::clamp(std::nearbyint(row[k] / best_s), -8.0f, 7.0f)) : 0;
    }
  }
}

W8Matrix pack_w4(const int8_t* q, const float* sw, int64_t rows, int64_t cols) {
  W8Matrix m = pack_w8(q, sw, rows, cols);  // checks, scales and sums; codes repacked below
  const int64_t cols8 = (m.cols4 + 1) / 2;
  m.bits = 4;
  m.nib.resize(static_cast<size_t>(m.groups * cols8 * kW8Group * 4));
  std::fill(m.nib.data(), m.nib.data() + m.nib.size(), uint8_t{0x88});  // codes 0
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t g = r / kW8Group, i = r % kW8Group;
    for (int64_t k = 0; k < cols; ++k) {
      const int8_t v = q[r * cols + k];
      TESSERA_CHECK(v >= -8 && v <= 7, kInvalidArgument, "W4A8: weight ({}, {}) is {} (codes are -8..7)", r, k, v);
      const int64_t c = k / 4;
      uint8_t& b = m.nib[static_cast<size_t>(((g * cols8 + c / 2) * kW8Group + i) * 4 + k % 4)];
      const uint8_t code = static_cast<uint8_t>(v + 8);
      b = c % 2 == 0 ? static_cast<uint8_t>((b & 0xf0) | code) : static_cast<uint8_t>((b & 0x0f) | (code << 4));
    }
  }
  m.q = AlignedBuffer<int8_t>();
  return m;
}

float quantize_activation_w8(const float* x, int64_t cols, int64_t cols4, uint8_t* act, float amax_floor) {
  return w8a8_kernels_ref().quantize(x, cols, cols4, amax_floor, act);
}

void matmul_w8a8(const W8Matrix& w, const float* x, int64_t x_stride, int64_t n_tokens, float* y, int64_t y_stride,
                 const KernelContext& ctx, const float* amax_floor) {
  TESSERA_CHECK(isa_supported(ctx.isa), kInvalidArgument, "matmul_w8a8: ISA {} is not supported by this CPU",
                isa_name(ctx.isa));
  matmul_w8a8_with(w8a8_table(ctx.isa), w, x, x_stride, n_tokens, y, y_stride, ctx, amax_floor);
}

void matmul_w8a8_with(const W8A8Kernels& k, const W8Matrix& w, const float* x, int64_t x_stride, int64_t n_tokens,
                      float* y, int64_t y_stride, const KernelContext& ctx, const float* amax_floor) {
  if (n_tokens <= 0) return;
  TESSERA_CHECK(ctx.ws != nullptr, kInvalidArgument, "matmul_w8a8 needs a workspace");
  const int64_t act_stride = (w.cols4 * 4 + 63) / 64 * 64;
  ctx.ws->act.ensure(static_cast<size_t>(n_tokens * act_stride));
  ctx.ws->act_scale.ensure(static_cast<size_t>(n_tokens));
  uint8_t* act = ctx.ws->act.data();
  float* sx = ctx.ws->act_scale.data();
  ThreadPool* pool = parallel_pool(ctx, w.rows * w.cols * n_tokens, kMinParallelQuantMatmulMacs);
  // Phase 1: the tokens' activations, split by token.
  std::atomic<int64_t> next_token{0};
  auto quantize = [&](int, int) {
    for (int64_t t = next_token.fetch_add(1); t < n_tokens; t = next_token.fetch_add(1)) {
      const float floor = amax_floor != nullptr ? amax_floor[t] : 0.0f;
      sx[t] = k.quantize(x + t * x_stride, w.cols, w.cols4, floor, act + t * act_stride);
    }
  };
  // Phase 2: units of row groups x token tiles.
  W8A8Args a;
  a.q = w.q.data();
  a.sw = w.sw.data();
  a.wsum128 = w.wsum128.data();
  a.cols4 = w.cols4;
  a.act = act;
  a.act_stride = act_stride;
  a.sx = sx;
  a.y = y;
  a.y_stride = y_stride;
  a.rows = w.rows;
  a.nib = w.nib.data();
  const int64_t row_units = (w.groups + kGroupsPerUnit - 1) / kGroupsPerUnit;
  const int64_t tok_units = (n_tokens + kTokensPerUnit - 1) / kTokensPerUnit;
  std::atomic<int64_t> next_unit{0};
  const int64_t group_bytes = w.cols4 * kW8Group * 4, nib_bytes = (w.cols4 + 1) / 2 * kW8Group * 4;
  auto multiply = [&](int, int) {
    thread_local std::vector<int8_t> unpacked;  // bits 4: the unit's row groups as int8
    for (int64_t u = next_unit.fetch_add(1); u < row_units * tok_units; u = next_unit.fetch_add(1)) {
      // Token tiles of one row block run one after the other: its weights
      // (4 groups, 64 x cols bytes) stay in L2 while the tokens pass.
      const int64_t g0 = (u / tok_units) * kGroupsPerUnit, t0 = (u % tok_units) * kTokensPerUnit;
      const int64_t g1 = std::min(g0 + kGroupsPerUnit, w.groups), t1 = std::min(t0 + kTokensPerUnit, n_tokens);
      if (w.bits == 8) {
        k.run(a, g0, g1, t0, t1);
        continue;
      }
      if (k.run4 != nullptr && t1 - t0 <= kW4FusedMaxTokens) {  // decode: the nibbles in place
        k.run4(a, g0, g1, t0, t1);
        continue;
      }
      unpacked.resize(static_cast<size_t>((g1 - g0) * group_bytes));
      for (int64_t g = g0; g < g1; ++g) k.unpack4(w.nib.data() + g * nib_bytes, w.cols4, unpacked.data() + (g - g0) * group_bytes);
      W8A8Args s = a;  // the unit's groups as groups 0.. of a smaller matrix
      s.q = unpacked.data();
      s.sw = a.sw + g0 * kW8Group;
      s.wsum128 = a.wsum128 + g0 * kW8Group;
      s.y = a.y + g0 * kW8Group;
      s.rows = w.rows - g0 * kW8Group;
      k.run(s, 0, g1 - g0, t0, t1);
    }
  };
  if (pool == nullptr) {
    quantize(0, 1);
    multiply(0, 1);
    return;
  }
  pool->run_dynamic(quantize);
  pool->run_dynamic(multiply);
}

}  // namespace tessera::kernels
