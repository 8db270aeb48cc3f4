#include "quant/awq.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "quant/gptq.h"

namespace tessera::quant {

std::vector<double> scale_hessian(std::span<const double> h, std::span<const float> s) {
  const size_t n = s.size();
  TESSERA_ASSERT(h.size() == n * n);
  std::vector<double> out(h.size());
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < n; ++j) out[i * n + j] = h[i * n + j] / (static_cast<double>(s[i]) * s[j]);
  }
  return out;
}

AwqScale awq_search_scale(const Grid& g, std::span<const LinearRef> linears, int64_t cols, const InputStats& st,
                          const AwqOptions& opt) {
  TESSERA_CHECK(st.dim == cols, kInvalidArgument, "awq: statistics of {} channels for a {}-column linear", st.dim,
                cols);
  TESSERA_CHECK(cols % g.unit() == 0 && opt.grid > 0, kInvalidArgument, "awq: {} columns / grid {}", cols, opt.grid);
  std::vector<float> mean = st.mean_abs();
  float top = 0.0f;
  for (float m : mean) top = std::max(top, m);
  for (float& m : mean) m = std::max(m, top * 1e-6f + 1e-12f);  // a channel never seen gets the smallest scale
  AwqScale best;
  std::vector<float> s(static_cast<size_t>(cols)), orig, ws, deq;
  std::vector<int8_t> q;
  std::vector<float> sc, mn;
  for (int k = 0; k < opt.grid; ++k) {
    const float alpha = static_cast<float>(k) / static_cast<float>(opt.grid);
    float lo = INFINITY, hi = 0.0f;
    for (int64_t i = 0; i < cols; ++i) {
      s[static_cast<size_t>(i)] = std::pow(mean[static_cast<size_t>(i)], alpha);
      lo = std::min(lo, s[static_cast<size_t>(i)]);
      hi = std::max(hi, s[static_cast<size_t>(i)]);
    }
    const float norm = std::sqrt(lo * hi);
    for (float& v : s) v /= norm;
    double err = 0.0;
    for (const LinearRef& l : linears) {
      // Every stride-th row (all of them up to opt.max_rows rows).
      const int64_t stride = std::max<int64_t>(1, (l.rows + opt.max_rows - 1) / opt.max_rows);
      const int64_t rows = (l.rows + stride - 1) / stride;
      const size_t n = static_cast<size_t>(rows * cols);
      orig.resize(n);
      ws.resize(n);
      deq.resize(n);
      q.resize(n);
      sc.resize(n / static_cast<size_t>(g.block));
      mn.resize(g.affine ? sc.size() : 0);
      for (int64_t r = 0; r < rows; ++r) {
        const float* src = l.w + r * stride * cols;
        std::copy_n(src, cols, orig.data() + r * cols);
        for (int64_t i = 0; i < cols; ++i) ws[static_cast<size_t>(r * cols + i)] = src[i] * s[static_cast<size_t>(i)];
        float* mr = g.affine ? mn.data() + r * (cols / g.block) : nullptr;
        rtn_row(g, ws.data() + r * cols, cols, {}, q.data() + r * cols, sc.data() + r * (cols / g.block), mr);
        dequant_row(g, q.data() + r * cols, sc.data() + r * (cols / g.block), cols, deq.data() + r * cols, mr);
        for (int64_t i = 0; i < cols; ++i) deq[static_cast<size_t>(r * cols + i)] /= s[static_cast<size_t>(i)];
      }
      err += output_error(orig.data(), deq.data(), rows, cols, st.h);
    }
    if (k == 0) best.rtn_error = err;
    if (k == 0 || err < best.error) {
      best.error = err;
      best.alpha = alpha;
      best.s = s;
    }
  }
  return best;
}

std::vector<float> awq_search_clip(const Grid& g, const float* w, int64_t rows, int64_t cols,
                                   std::span<const double> h, const AwqOptions& opt) {
  TESSERA_CHECK(cols % g.block == 0 && static_cast<int64_t>(h.size()) == cols * cols, kInvalidArgument,
                "awq clip: {} columns, H of {}", cols, h.size());
  TESSERA_CHECK(!g.affine, kInternal, "awq clip: {} blocks have a scale and a min", dtype_name(g.type));
  const int64_t nb = cols / g.block, B = g.block;
  std::vector<float> clip(static_cast<size_t>(rows * nb));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < nb; ++b) {
      const float* x = w + r * cols + b * B;
      clip[static_cast<size_t>(r * nb + b)] = search_block_scale(g, x, B, h.data() + b * B * cols + b * B, cols, opt.clip_steps);
    }
  }
  return clip;
}

}  // namespace tessera::quant
