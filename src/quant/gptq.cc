#include "quant/gptq.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "kernels/w8a8.h"
#include "quant/linalg.h"

namespace tessera::quant {
GptqHessian gptq_hessian(std::span<const double> h_in, int64_t n, const GptqOptions& opt, ThreadPool* pool) {
  TESSERA_CHECK(static_cast<int64_t>(h_in.size()) == n * n, kInvalidArgument, "gptq: H has {} values for {} columns",
                h_in.size(), n);
  TESSERA_CHECK(opt.damp >= 0.0 && opt.batch > 0, kInvalidArgument, "gptq: damp {} / batch {}", opt.damp,
                opt.batch);
  GptqHessian hs;
  hs.n = n;
  hs.h.assign(h_in.begin(), h_in.end());
  hs.dead.assign(static_cast<size_t>(n), false);
  double mean_diag = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    double& d = hs.h[static_cast<size_t>(i * n + i)];
    if (d == 0.0) {
      d = 1.0;
      hs.dead[static_cast<size_t>(i)] = true;
    }
    mean_diag += d / static_cast<double>(n);
  }
  // Column order: storage order, or by decreasing H_ii (act-order).
  hs.perm.resize(static_cast<size_t>(n));
  std::iota(hs.perm.begin(), hs.perm.end(), 0);
  if (opt.act_order) {
    std::stable_sort(hs.perm.begin(), hs.perm.end(), [&](int64_t a, int64_t b) {
      return hs.h[static_cast<size_t>(a * n + a)] > hs.h[static_cast<size_t>(b * n + b)];
    });
  }
  hs.u.resize(static_cast<size_t>(n * n));  // the permuted, damped H, then U (quant/linalg.h)
  bool ok = false;
  for (double damp = opt.damp; !ok && damp <= opt.damp * 100.0 + 0.01; damp = damp > 0 ? damp * 10.0 : 0.01) {
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        hs.u[static_cast<size_t>(i * n + j)] = hs.h[static_cast<size_t>(hs.perm[i] * n + hs.perm[j])];
      }
      hs.u[static_cast<size_t>(i * n + i)] += damp * mean_diag;
    }
    ok = inverse_cholesky_upper(hs.u.data(), n, pool);
  }
  TESSERA_CHECK(ok, kInvalidArgument, "gptq: the calibration Hessian is not positive definite even with dampening");
  return hs;
}

void gptq_sweep(const GptqHessian& hs, const float* w, int64_t rows, int64_t batch, ThreadPool* pool,
                const GptqRowStart& start_row, const GptqQuantize& quantize) {
  const int64_t n = hs.n;
  // Rows in groups of kGroup: each row of U is read once for the group
  // (U of an 8192-wide input is 537 MB: per row, the batch updates would
  // stream it from memory). Each row's own arithmetic, and so its result,
  // is that of quantizing it alone.
  constexpr int64_t kGroup = 8;
  const auto row_fn = [&](int64_t r0, int64_t r1) {
    std::vector<double> xs(static_cast<size_t>(kGroup * n)), errs(static_cast<size_t>(kGroup * batch));
    for (int64_t rg = r0; rg < r1; rg += kGroup) {
      const int64_t m = std::min(kGroup, r1 - rg);
      for (int64_t k = 0; k < m; ++k) {
        const float* wr = w + (rg + k) * n;
        if (start_row) start_row(rg + k);
        double* x = xs.data() + k * n;
        for (int64_t i = 0; i < n; ++i) x[i] = hs.dead[static_cast<size_t>(hs.perm[i])] ? 0.0 : wr[hs.perm[i]];
      }
      for (int64_t b0 = 0; b0 < n; b0 += batch) {
        const int64_t b1 = std::min(n, b0 + batch);
        for (int64_t i = b0; i < b1; ++i) {
          const double* ui = hs.u.data() + i * n;
          for (int64_t k = 0; k < m; ++k) {
            double* x = xs.data() + k * n;
            const double e = (x[i] - quantize(rg + k, i, x)) / ui[i];
            errs[static_cast<size_t>(k * batch + i - b0)] = e;
            for (int64_t j = i + 1; j < b1; ++j) x[j] -= e * ui[j];
          }
        }
        for (int64_t i = b0; i < b1; ++i) {  // the batch's errors, onto every later column at once
          const double* ui = hs.u.data() + i * n;
          for (int64_t k = 0; k < m; ++k) {
            const double e = errs[static_cast<size_t>(k * batch + i - b0)];
            double* x = xs.data() + k * n;
            for (int64_t j = b1; j < n; ++j) x[j] -= e * ui[j];
          }
        }
      }
    }
  };
  if (pool != nullptr) {
    pool->parallel_for(rows, kGroup, row_fn);
  } else {
    row_fn(0, rows);
  }
}

void gptq(const Grid& g, const float* w, int64_t rows, int64_t cols, std::span<const double> h_in,
          const GptqOptions& opt, int8_t* levels, float* scales, ThreadPool* pool, float* mins) {
  const int64_t unit = g.unit();  // values whose parameters are chosen together
  TESSERA_CHECK(cols > 0 && cols % unit == 0 && rows >= 0, kInvalidArgument,
                "gptq: {} columns is not a positive multiple of {}", cols, unit);
  TESSERA_CHECK(!g.affine || mins != nullptr, kInternal, "gptq: {} needs mins", dtype_name(g.type));
  const int64_t n = cols, nb = cols / g.block;
  // Whole units per batch, so a unit's parameters see every earlier error.
  const int64_t batch = (opt.batch + unit - 1) / unit * unit;
  const GptqHessian hs = gptq_hessian(h_in, n, opt, pool);

  // The parameters of the unit of values blk starting at first_col: a
  // block's scale, its own or searched against H's diagonal block; or an
  // super-block's scales (and mins) (quant/grid.h super_params).
  // Super-block grids weight each value's fit by H_ii (dead inputs: 0).
  const std::vector<float> diag = g.super > 0 ? hessian_diagonal(h_in, n) : std::vector<float>();
  const auto params_of = [&](const float* blk, int64_t first_col, float* sr, float* mr) {
    const int64_t b = first_col / g.block;
    if (g.super > 0) {
      super_params(g, blk, sr + b, g.affine ? mr + b : nullptr, diag.data() + first_col);
    } else if (opt.scale_steps <= 0) {
      sr[b] = block_scale(g, blk, g.block);
    } else {
      sr[b] = search_block_scale(g, blk, g.block, hs.h.data() + first_col * n + first_col, n, opt.scale_steps);
    }
  };
  GptqRowStart start_row;
  if (opt.act_order) {  // static groups, from the original weights (dead inputs zeroed)
    start_row = [&](int64_t r) {
      std::vector<float> blk(static_cast<size_t>(unit));
      for (int64_t c0 = 0; c0 < n; c0 += unit) {
        for (int64_t j = 0; j < unit; ++j) blk[j] = hs.dead[static_cast<size_t>(c0 + j)] ? 0.0f : w[r * cols + c0 + j];
        params_of(blk.data(), c0, scales + r * nb, g.affine ? mins + r * nb : nullptr);
      }
    };
  }
  gptq_sweep(hs, w, rows, batch, pool, start_row, [&](int64_t r, int64_t i, const double* x) {
    const int64_t col = hs.perm[i];
    float* sr = scales + r * nb;
    float* mr = g.affine ? mins + r * nb : nullptr;
    if (!opt.act_order && col % unit == 0) {
      float blk[256];  // a unit is at most a super-block (256)
      for (int64_t j = 0; j < unit; ++j) blk[j] = static_cast<float>(x[i + j]);
      params_of(blk, col, sr, mr);
    }
    const float d = sr[col / g.block], mn = g.affine ? mr[col / g.block] : 0.0f;
    const int q = level(g, static_cast<float>(x[i]), d, mn);
    levels[r * cols + col] = static_cast<int8_t>(q);
    return static_cast<double>(d) * q - mn;
  });
}

void gptq_w4(const float* w, int64_t rows, int64_t cols, std::span<const double> h, const GptqOptions& opt,
             int8_t* q, float* sw, ThreadPool* pool) {
  kernels::quantize_rows_w4(w, rows, cols, q, sw);  // the scales; the codes are chosen again below
  const GptqHessian hs = gptq_hessian(h, cols, opt, pool);
  gptq_sweep(hs, w, rows, opt.batch, pool, {}, [&](int64_t r, int64_t i, const double* x) {
    const double s = sw[r];
    const double v = s > 0.0 ? std::clamp(std::nearbyint(x[i] / s), -8.0, 7.0) : 0.0;
    q[r * cols + hs.perm[static_cast<size_t>(i)]] = static_cast<int8_t>(v);
    return v * s;
  });
}

double output_error(const float* a, const float* b, int64_t rows, int64_t cols, std::span<const double> h) {
  double total = 0.0;
  std::vector<double> d(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < cols; ++i) d[static_cast<size_t>(i)] = static_cast<double>(a[r * cols + i]) - b[r * cols + i];
    for (int64_t i = 0; i < cols; ++i) {
      if (d[static_cast<size_t>(i)] == 0.0) continue;
      double s = 0.0;
      const double* hi = h.data() + i * cols;
      for (int64_t j = 0; j < cols; ++j) s += hi[j] * d[static_cast<size_t>(j)];
      total += d[static_cast<size_t>(i)] * s;
    }
  }
  return total;
}

}  // namespace tessera::quant
