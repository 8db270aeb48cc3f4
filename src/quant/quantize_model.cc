#include "quant/quantize_model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include "core/error.h"
#include "core/log.h"
#include "kernels/quant.h"
#include "kernels/w8a8.h"
#include "format/gguf_writer.h"
#include "model/weights.h"
#include "quant/qmoe.h"
#include "kernels/sparse.h"

namespace tessera::quant {

std::vector<float> read_f32(const gguf::TensorInfo& t) {
  TESSERA_CHECK(kernels::can_dequantize(t.type), kInvalidArgument, "tensor '{}' has type {}, which Tessera cannot read",
                t.name, dtype_name(t.type));
  const int64_t cols = t.ne[0], rows = t.n_elements() / cols;
  const size_t rb = row_bytes(t.type, cols);
  TESSERA_CHECK(rb * static_cast<size_t>(rows) <= t.n_bytes, kCorruptFile, "tensor '{}' is shorter than its shape",
                t.name);
  std::vector<float> out(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) kernels::dequantize_row(t.type, t.data + r * rb, out.data() + r * cols, cols);
  for (size_t i = 0; i < out.size(); ++i) {
    TESSERA_CHECK(std::isfinite(out[i]), kCorruptFile, "tensor '{}' holds a non-finite value (row {}, column {})",
                  t.name, static_cast<int64_t>(i) / cols, static_cast<int64_t>(i) % cols);
  }
  return out;
}

namespace {

int64_t round_up(int64_t a, int64_t b) { return (a + b - 1) / b * b; }

bool ends_with(const std::string& s, std::string_view tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// A mixture's experts: [cols, rows, experts].
bool is_experts(const gguf::TensorInfo& t) { return t.n_dims == 3 && ends_with(t.name, "_exps.weight"); }

bool is_matrix(const gguf::TensorInfo& t) {
  return ((t.n_dims == 2 && t.ne[1] > 1) || is_experts(t)) && ends_with(t.name, ".weight");
}

int64_t matrix_rows(const gguf::TensorInfo& t) { return t.n_elements() / t.ne[0]; }


std::vector<float> pad_columns(const std::vector<float>& w, int64_t rows, int64_t cols, int64_t cols_p) {
  if (cols_p == cols) return w;
  std::vector<float> out(static_cast<size_t>(rows * cols_p), 0.0f);
  for (int64_t r = 0; r < rows; ++r) std::copy_n(w.data() + r * cols, cols, out.data() + r * cols_p);
  return out;
}

// Statistics of an input widened by zero channels (padding never seen: H = 0 there).
InputStats pad_stats(const InputStats& s, int64_t dim_p) {
  if (s.dim == dim_p) return s;
  InputStats p;
  p.dim = dim_p;
  p.n = s.n;
  p.abs_sum.assign(static_cast<size_t>(dim_p), 0.0);
  std::copy(s.abs_sum.begin(), s.abs_sum.end(), p.abs_sum.begin());
  p.abs_max.assign(static_cast<size_t>(dim_p), 0.0f);
  std::copy(s.abs_max.begin(), s.abs_max.end(), p.abs_max.begin());
  p.h.assign(static_cast<size_t>(dim_p * dim_p), 0.0);
  for (int64_t i = 0; i < s.dim; ++i) std::copy_n(s.h.data() + i * s.dim, s.dim, p.h.data() + i * dim_p);
  return p;
}

// What is done to one tensor besides its type: AWQ's scales.
struct Plan {
  DType type = DType::kF32;
  bool matrix = false;
  int64_t cols_p = 0;              // stored width (padded) for matrices
  std::vector<float> col_scale;    // [cols] multiply columns (AWQ s)
  std::vector<float> row_div;      // [rows] divide rows (1/s of ffn_down folded into ffn_up)
  std::vector<float> vec_div;      // [n] divide a norm vector (1/s folded into RMSNorm)
  bool awq_norm = false;           // a norm AWQ may fold into: written as F32
  bool prune = false;              // pruned before rounding (QuantizeOptions::prune)
  std::vector<float> w8_scale;     // W8A8 (type I8): the rows' scales, written after the matrix as its .scale
  std::vector<uint8_t> encoded;    // a variable-size type's bytes (QMOE experts, a sparse matrix),
  std::string encoded_how;         // how they were made,
  double encoded_seconds = 0.0;    // and in how long
};

struct AwqGroup {
  std::vector<std::string> linears;
  std::string tap;
  int64_t layer;
  std::string norm;      // vector to divide by s, or
  std::string producer;  // matrix whose rows are divided by s
};

std::vector<AwqGroup> awq_groups(const gguf::File& in) {
  std::vector<AwqGroup> g;
  for (int64_t il = 0;; ++il) {
    const std::string b = fmt::format("blk.{}.", il);
    if (in.find_tensor(b + "attn_q.weight") == nullptr) break;
    g.push_back({{b + "attn_q.weight", b + "attn_k.weight", b + "attn_v.weight"}, "attn_norm", il, b + "attn_norm.weight", ""});
    g.push_back({{b + "ffn_gate.weight", b + "ffn_up.weight"}, "ffn_norm", il, b + "ffn_norm.weight", ""});
    g.push_back({{b + "ffn_down.weight"}, "ffn_act", il, "", b + "ffn_up.weight"});
  }
  if (in.find_tensor("output.weight") != nullptr) g.push_back({{"output.weight"}, "result_norm", -1, "output_norm.weight", ""});
  return g;
}

// The groups whose every linear is stored in a block grid (AWQ's scales
// only help what is rounded to a grid) or in W8A8 (SmoothQuant's).
bool awq_applies(const AwqGroup& grp, const std::map<std::string, Plan>& plans) {
  for (const std::string& n : grp.linears) {
    auto it = plans.find(n);
    if (it == plans.end() || !it->second.matrix || !(is_grid_type(it->second.type) || it->second.type == DType::kI8)) {
      return false;
    }
  }
  return true;
}

// The layers' matrices the decoder reads as W8A8 (model/decoder.cc
// load_linear); a W8A8 file keeps every other tensor as it was.
bool w8a8_linear(const std::string& name) {
  if (name.rfind("blk.", 0) != 0) return false;
  for (const char* s : {".attn_q.weight", ".attn_k.weight", ".attn_v.weight", ".attn_output.weight", ".ffn_gate.weight",
                        ".ffn_up.weight", ".ffn_down.weight"}) {
    const std::string suffix(s);
    if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) return true;
  }
  return false;
}

// SmoothQuant's scales of each group of `layer`: s_j = max|X_j|^alpha /
// max|W_j|^(1 - alpha) over the group's linears (1 where either is 0),
// recorded as AWQ's are (columns multiplied, the norm or producer divided).
void plan_smooth(const gguf::File& in, StatsSource& stats, float alpha, std::map<std::string, Plan>& plans,
                 int64_t layer) {
  for (const AwqGroup& grp : awq_groups(in)) {
    if (grp.layer != layer || !w8a8_linear(grp.linears[0])) continue;  // the output matrix keeps its type
    const InputStats* st = stats.find(grp.tap, grp.layer);
    const std::string& producer = grp.norm.empty() ? grp.producer : grp.norm;
    const bool ok = st != nullptr && st->n > 0 && awq_applies(grp, plans) && plans.count(producer) != 0 &&
                    (!grp.producer.empty() ? plans[producer].matrix : !plans[producer].matrix);
    if (!ok) {
      TESSERA_LOG_WARN("smoothquant: leaving {} unsmoothed (no statistics, or not every linear in W8A8)", grp.linears[0]);
      continue;
    }
    const int64_t cols = in.tensor(grp.linears[0]).ne[0];
    TESSERA_CHECK(st->dim == cols, kCorruptFile, "smoothquant: statistics of {} inputs for '{}', which has {}", st->dim,
                  grp.linears[0], cols);
    std::vector<float> wmax(static_cast<size_t>(cols), 0.0f);
    for (const std::string& n : grp.linears) {
      const gguf::TensorInfo& t = in.tensor(n);
      TESSERA_CHECK(t.ne[0] == cols, kCorruptFile, "smoothquant: '{}' has {} inputs, expected {}", n, t.ne[0], cols);
      const std::vector<float> w = read_f32(t);
      for (int64_t r = 0; r < t.ne[1]; ++r) {
        for (int64_t j = 0; j < cols; ++j) wmax[j] = std::max(wmax[j], std::fabs(w[static_cast<size_t>(r * cols + j)]));
      }
    }
    std::vector<float> s(static_cast<size_t>(cols), 1.0f);
    float lo = 1e30f, hi = 0.0f;
    for (int64_t j = 0; j < cols; ++j) {
      const float x = st->abs_max[static_cast<size_t>(j)];
      if (x > 0.0f && wmax[j] > 0.0f) {
        s[j] = std::clamp(std::pow(x, alpha) / std::pow(wmax[j], 1.0f - alpha), 1e-4f, 1e4f);
      }
      lo = std::min(lo, s[j]);
      hi = std::max(hi, s[j]);
    }
    for (const std::string& n : grp.linears) plans[n].col_scale = s;
    if (!grp.norm.empty()) {
      plans[grp.norm].vec_div = s;
    } else {
      plans[grp.producer].row_div = s;
    }
    TESSERA_LOG_INFO("smoothquant: {} alpha {:.2f}, scales {:.3g}..{:.3g}", grp.linears[0], alpha, lo, hi);
  }
}

// Searches AWQ's scale of each group of `layer` (-1: the output's) and
// records it in the plans of the group's linears and of what produces
// their input.
void plan_awq(const gguf::File& in, const Grid& g, StatsSource& stats, const AwqOptions& opt,
              std::map<std::string, Plan>& plans, int64_t layer) {
  for (const AwqGroup& grp : awq_groups(in)) {
    if (grp.layer != layer) continue;
    const InputStats* st = stats.find(grp.tap, grp.layer);
    bool ok = st != nullptr && awq_applies(grp, plans);
    const std::string& producer = grp.norm.empty() ? grp.producer : grp.norm;
    ok = ok && plans.count(producer) != 0 && (!grp.producer.empty() ? plans[producer].matrix : !plans[producer].matrix);
    if (!ok) {
      TESSERA_LOG_WARN("awq: leaving {} unscaled (no statistics or a type that is not a block grid)", grp.linears[0]);
      continue;
    }
    const int64_t cols = in.tensor(grp.linears[0]).ne[0];
    const int64_t cols_p = round_up(cols, g.unit());
    std::vector<std::vector<float>> ws;
    std::vector<LinearRef> refs;
    for (const std::string& n : grp.linears) {
      const gguf::TensorInfo& t = in.tensor(n);
      TESSERA_CHECK(t.ne[0] == cols && st->dim == cols, kCorruptFile, "awq: '{}' has {} inputs, expected {}", n,
                    t.ne[0], cols);
      ws.push_back(pad_columns(read_f32(t), t.ne[1], cols, cols_p));
      refs.push_back({ws.back().data(), t.ne[1]});
    }
    const AwqScale s = awq_search_scale(g, refs, cols_p, pad_stats(*st, cols_p), opt);
    std::vector<float> sv(s.s.begin(), s.s.begin() + cols);
    for (const std::string& n : grp.linears) plans[n].col_scale = sv;
    if (!grp.norm.empty()) {
      plans[grp.norm].vec_div = sv;
    } else {
      plans[grp.producer].row_div = sv;
    }
    TESSERA_LOG_INFO("awq: {} alpha {:.2f}, output error {:.4g} (rounding alone {:.4g})", grp.linears[0], s.alpha,
                     s.error, s.rtn_error);
  }
}

// Prunes a matrix of the blocks (QuantizeOptions::prune) and says how.
std::string prune_in_place(const std::string& name, float* w, int64_t rows, int64_t cols, const InputStats* stats,
                           const PruneOptions& opt) {
  std::vector<float> norms;
  if (opt.method == PruneMethod::kWanda) {
    TESSERA_CHECK(stats != nullptr && stats->n > 0, kInvalidArgument,
                  "wanda: no calibration statistics for '{}' (its input was never seen)", name);
    norms = input_norms(*stats);
  }
  const int64_t kept = prune_matrix(w, rows, cols, norms, opt);
  return fmt::format("{} {:.0f}%", prune_method_name(opt.method),
                     100.0 * static_cast<double>(rows * cols - kept) / static_cast<double>(rows * cols));
}

// The stored bytes of a matrix: method-chosen levels packed into its grid type.
void quantize_matrix(const gguf::TensorInfo& t, Plan& p, const InputStats* stats, const QuantizeOptions& opt,
                     ThreadPool& pool, uint8_t* out, std::string* how) {
  const int64_t cols = t.ne[0], rows = matrix_rows(t);
  std::vector<float> w = read_f32(t);
  if (!p.col_scale.empty()) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < cols; ++i) w[static_cast<size_t>(r * cols + i)] *= p.col_scale[static_cast<size_t>(i)];
    }
  }
  if (!p.row_div.empty()) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < cols; ++i) w[static_cast<size_t>(r * cols + i)] /= p.row_div[static_cast<size_t>(r)];
    }
  }
  *how = p.col_scale.empty() && p.row_div.empty() ? "" : opt.method == Method::kSmoothQuant ? "smoothed " : "awq-scaled ";
  if (p.prune) *how += prune_in_place(t.name, w.data(), rows, cols, stats, *opt.prune) + " ";
  if (p.type == DType::kI8) {  // W8A8 / W4A8: codes per output channel, the scales to the .scale tensor
    p.w8_scale.assign(static_cast<size_t>(rows), 0.0f);
    int8_t* q = reinterpret_cast<int8_t*>(out);
    if (opt.bits != 4) {
      kernels::quantize_rows_w8(w.data(), rows, cols, q, p.w8_scale.data());
      *how += "w8a8";
    } else if (opt.method == Method::kGptq && stats != nullptr && stats->n > 0) {
      gptq_w4(w.data(), rows, cols, stats->h, opt.gptq, q, p.w8_scale.data(), &pool);
      *how += "gptq w4a8";
    } else {
      kernels::quantize_rows_w4(w.data(), rows, cols, q, p.w8_scale.data());
      *how += "w4a8";
    }
    return;
  }
  if (!is_grid_type(p.type)) {  // a float type, or a block type written by round to nearest (kernels/quant.h)
    const int64_t cols_p = p.cols_p;
    w = pad_columns(w, rows, cols, cols_p);
    const size_t rb = row_bytes(p.type, cols_p);
    for (int64_t r = 0; r < rows; ++r) kernels::quantize_row(p.type, w.data() + r * cols_p, out + r * rb, cols_p);
    *how += dtype_traits(p.type).block_size > 1 ? "rtn" : "convert";
    return;
  }
  const Grid g = make_grid(p.type, opt.bits);
  const int64_t cols_p = p.cols_p, nb = cols_p / g.block;
  w = pad_columns(w, rows, cols, cols_p);
  std::vector<int8_t> levels(static_cast<size_t>(rows * cols_p));
  std::vector<float> scales(static_cast<size_t>(rows * nb)), mins(g.affine ? scales.size() : 0);
  float* const mins_at = g.affine ? mins.data() : nullptr;  // row r's: mins_at + r * nb
  const bool gptq_method = opt.method == Method::kGptq || opt.method == Method::kAwqGptq;
  const bool awq_method = opt.method == Method::kAwq || opt.method == Method::kAwqGptq;
  // H as gathered, or a padded / AWQ-scaled copy (no copy otherwise: a 1B
  // model's ffn_down H is half a gigabyte).
  std::vector<double> h_own;
  std::span<const double> h;
  if (stats != nullptr && (gptq_method || (awq_method && opt.awq.clip))) {
    if (cols_p != stats->dim) h_own = pad_stats(*stats, cols_p).h;
    if (!p.col_scale.empty()) {
      std::vector<float> s(static_cast<size_t>(cols_p), 1.0f);
      std::copy(p.col_scale.begin(), p.col_scale.end(), s.begin());
      h_own = scale_hessian(h_own.empty() ? stats->h : h_own, s);
    }
    h = h_own.empty() ? std::span<const double>(stats->h) : std::span<const double>(h_own);
  }
  if (gptq_method && !h.empty()) {
    gptq(g, w.data(), rows, cols_p, h, opt.gptq, levels.data(), scales.data(), &pool, mins_at);
    *how += opt.gptq.act_order ? "gptq act-order" : "gptq";
  } else {
    std::vector<float> clip;
    // Super-block grids (Q3_K, Q4_K, Q5_K, Q6_K) fit each block's scale (and min) to
    // its values instead of searching a clipped scale.
    const bool fitted = g.super > 0;
    if (awq_method && opt.awq.clip && !h.empty() && !fitted) clip = awq_search_clip(g, w.data(), rows, cols_p, h, opt.awq);
    if (opt.method != Method::kRtn && h.empty() && !fitted) {
      // No statistics (token_embd): scales searched by plain squared error.
      clip.resize(static_cast<size_t>(rows * nb));
      for (int64_t b = 0; b < rows * nb; ++b) {
        clip[static_cast<size_t>(b)] = search_block_scale(g, w.data() + b * g.block, g.block, nullptr, 0, opt.awq.clip_steps);
      }
    }
    // Super-block grids fit each value weighted by H_ii when there are statistics.
    const std::vector<float> importance = fitted && !h.empty() ? hessian_diagonal(h, cols_p) : std::vector<float>();
    pool.parallel_for(rows, 8, [&](int64_t r0, int64_t r1) {  // each row alone: the same bytes for any thread count
      for (int64_t r = r0; r < r1; ++r) {
        const std::span<const float> c = clip.empty() ? std::span<const float>() : std::span<const float>(clip).subspan(static_cast<size_t>(r * nb), static_cast<size_t>(nb));
        rtn_row(g, w.data() + r * cols_p, cols_p, c, levels.data() + r * cols_p, scales.data() + r * nb,
                g.affine ? mins_at + r * nb : nullptr, importance.empty() ? nullptr : importance.data());
      }
    });
    *how += !importance.empty() ? "rtn+H-weighted fit" : clip.empty() ? "rtn" : h.empty() ? "rtn+mse scales" : "rtn+clip";
  }
  const size_t rb = row_bytes(p.type, cols_p);
  for (int64_t r = 0; r < rows; ++r) {
    pack_row(g, levels.data() + r * cols_p, scales.data() + r * nb, cols_p, out + r * rb,
             g.affine ? mins_at + r * nb : nullptr);
  }
}

// The types quantize writes: the grids' (any method) and the others
// kernels::quantize_row writes (round to nearest).
constexpr const char* kWritable =
    "Q2_K, Q3_K, Q4_0, Q4_K, Q5_K, Q6_K, Q8_0 (every method); Q4_1, Q5_0, Q5_1, IQ4_NL, IQ4_XS, MXFP4, TQ1_0, TQ2_0 (rtn); "
    "F16, BF16, F32; W8A8 (rtn, smoothquant)";
bool writable(DType t) { return is_grid_type(t) || kernels::can_quantize(t) || kernels::is_sparse(t) || t == DType::kI8; }
bool rtn_only(DType t) { return !is_grid_type(t) && dtype_traits(t).block_size > 1; }

// Refuses requests the writer cannot honour, before anything is written.
void check_request(const gguf::File& in, const std::string& out_path, const QuantizeOptions& opt,
                   const StatsSource* stats) {
  TESSERA_CHECK(writable(opt.type), kInvalidArgument, "tessera quantize cannot write {} (it writes {})",
                dtype_name(opt.type), kWritable);
  TESSERA_CHECK(opt.method == Method::kRtn || opt.method == Method::kQmoeRtn || !rtn_only(opt.type), kInvalidArgument,
                "--method {} chooses levels on the grids of Q2_K, Q3_K, Q4_0, Q4_K, Q5_K, Q6_K and Q8_0; {} is written by rtn only",
                method_name(opt.method), dtype_name(opt.type));
  TESSERA_CHECK(!needs_calibration(opt.method) || stats != nullptr, kInvalidArgument,
                "method {} needs calibration statistics", method_name(opt.method));
  TESSERA_CHECK(!kernels::is_sparse(opt.type) || opt.prune, kInvalidArgument,
                "{} holds pruned matrices: write it with tessera prune", dtype_name(opt.type));
  TESSERA_CHECK(!opt.prune || opt.method == Method::kRtn, kInvalidArgument,
                "pruning rounds the kept weights to nearest (--method rtn), not {}", method_name(opt.method));
  TESSERA_CHECK(!opt.prune || opt.prune->method != PruneMethod::kWanda || stats != nullptr, kInvalidArgument,
                "wanda needs calibration statistics");
  TESSERA_CHECK(opt.method != Method::kSmoothQuant || opt.type == DType::kI8, kInvalidArgument,
                "--method smoothquant writes W8A8 (--type w8a8), not {}", dtype_name(opt.type));
  TESSERA_CHECK(opt.type != DType::kI8 || opt.bits == 0 || opt.bits == 4, kInvalidArgument,
                "W8A8 files hold 8-bit codes (--type w8a8) or 4-bit ones (--type w4a8), not --bits {}", opt.bits);
  TESSERA_CHECK(opt.type != DType::kI8 || opt.bits == 4 || opt.method == Method::kRtn ||
                    opt.method == Method::kSmoothQuant,
                kInvalidArgument, "W8A8 is written by rtn or smoothquant, not {}", method_name(opt.method));
  TESSERA_CHECK(opt.type != DType::kI8 || opt.bits != 4 || opt.method == Method::kRtn || opt.method == Method::kGptq,
                kInvalidArgument, "W4A8 is written by rtn or gptq, not {}", method_name(opt.method));
  TESSERA_CHECK(opt.type != DType::kI8 || (!opt.prune && !opt.experts_type && opt.keep.empty()),
                kInvalidArgument, "--type w8a8 / w4a8 takes no pruning, --experts-type or --keep");
  TESSERA_CHECK(out_path != in.path(), kInvalidArgument, "the output would overwrite the input '{}'", out_path);
}

// Refuses options the grid cannot hold and inputs that are not originals.
void check_options(const gguf::File& in, const QuantizeOptions& opt, const Grid& g) {
  TESSERA_CHECK(opt.bits == 0 || is_grid_type(opt.type) || opt.type == DType::kI8 ||
                    (opt.experts_type && is_grid_type(*opt.experts_type)),
                kInvalidArgument, "--bits needs a block type");
  TESSERA_CHECK(opt.group == 0 || (is_grid_type(opt.type) && opt.group == g.block), kInvalidArgument,
                "group size {}: {} blocks hold {} weights (other group sizes need another storage type)", opt.group,
                dtype_name(opt.type), is_grid_type(opt.type) ? g.block : 1);
  for (const auto& [k, v] : in.metadata()) {
    TESSERA_CHECK(k.rfind(kPaddedColsKey, 0) != 0, kInvalidArgument,
                  "{} holds padded matrices (it was quantized by Tessera); quantize from the original model", in.path());
  }
  TESSERA_CHECK(!opt.experts_type || !is_qmoe(opt.method), kInvalidArgument,
                "--experts-type and --method {}: the experts are QMoE codes", method_name(opt.method));
  TESSERA_CHECK(!opt.experts_type || writable(*opt.experts_type), kInvalidArgument,
                "--experts-type {}: Tessera writes {}", dtype_name(*opt.experts_type), kWritable);
  TESSERA_CHECK(!opt.experts_type || opt.method == Method::kRtn || !rtn_only(*opt.experts_type), kInvalidArgument,
                "--experts-type {} is written by rtn only", dtype_name(*opt.experts_type));
  for (const auto& [name, type] : opt.keep) {
    TESSERA_CHECK(in.find_tensor(name) != nullptr, kInvalidArgument, "--keep {}: the model has no such tensor", name);
    TESSERA_CHECK(writable(type), kInvalidArgument, "--keep {}={}: Tessera writes {}", name, dtype_name(type),
                  kWritable);
  }
}

// Each tensor's stored type and width: matrices take the target type (or
// their --keep type), padded to whole blocks; everything else is copied.
std::map<std::string, Plan> plan_types(const gguf::File& in, const QuantizeOptions& opt, bool awq) {
  std::map<std::string, Plan> plans;
  for (const gguf::TensorInfo& t : in.tensors()) {
    Plan p;
    p.matrix = is_matrix(t);
    p.type = t.type;
    if (p.matrix && opt.type == DType::kI8 && !w8a8_linear(t.name)) p.matrix = false;  // W8A8: the rest is copied
    if (p.matrix) {
      p.type = is_experts(t) && opt.experts_type ? *opt.experts_type : opt.type;
      p.prune = opt.prune && !is_experts(t) && prunable(t.name);
      // Only pruned matrices are sparse; the others take the dense type.
      if (kernels::is_sparse(p.type) && !p.prune) p.type = kernels::sparse_dense_type(p.type);
      for (const auto& [name, type] : opt.keep) {
        if (name == t.name) p.type = type;
      }
      const int64_t bs = dtype_traits(p.type).block_size;
      p.cols_p = round_up(t.ne[0], bs);
      if (p.cols_p != t.ne[0] && t.name == "token_embd.weight") {
        // Rows of the embedding are looked up, not multiplied: keep them unpadded.
        TESSERA_LOG_WARN("{}: {} columns is not a multiple of {}; stored as F16", t.name, t.ne[0], bs);
        p.type = DType::kF16;
        p.cols_p = t.ne[0];
      }
    }
    plans[t.name] = std::move(p);
  }
  if (awq) {
    // Norms AWQ may divide are F32 in the output whether or not their scale
    // is found (known before any statistics: the header is written first).
    for (const AwqGroup& grp : awq_groups(in)) {
      auto it = plans.find(grp.norm);
      if (!grp.norm.empty() && it != plans.end() && !it->second.matrix && awq_applies(grp, plans)) {
        it->second.awq_norm = true;
      }
    }
  }
  return plans;
}

// The input's metadata, with the new file type and how it was made.
void copy_header(gguf::Writer& w, const gguf::File& in, const QuantizeOptions& opt) {
  for (const auto& [k, v] : in.metadata()) {
    if (k != "general.file_type" && k != "general.quantized_by") w.set_value(k, v);
  }
  const DType file_type = kernels::is_sparse(opt.type) ? kernels::sparse_dense_type(opt.type) : opt.type;
  w.set_u32("general.file_type", gguf::llama_file_type(file_type));
  if (opt.metadata) opt.metadata(w);
  if (opt.prune) {
    const PruneOptions& pr = *opt.prune;
    w.set_string("general.quantized_by",
                 fmt::format("tessera prune --method {} {} --type {}", prune_method_name(pr.method),
                             pr.structured() ? fmt::format("--nm {}:{}", pr.n, pr.m) : fmt::format("--sparsity {}", pr.sparsity),
                             dtype_name(opt.type)));
    return;
  }
  if (opt.type == DType::kI8 && opt.bits == 4) w.set_bool(kW4A8Key, true);
  w.set_string("general.quantized_by",
               fmt::format("tessera quantize --type {} --method {}{}", dtype_name(opt.type), method_name(opt.method),
                           opt.bits ? fmt::format(" --bits {}", opt.bits) : ""));
}

// One tensor's bytes: a quantized matrix, a norm with AWQ's 1/s folded in,
// or a copy. Says which in d->how.
void write_tensor(const gguf::TensorInfo& t, Plan& p, const QuantizeOptions& opt, StatsSource* stats,
                  ThreadPool& pool, uint8_t* out, size_t n_bytes, TensorDone* d) {
  if (p.matrix) {
    if (p.cols_p != t.ne[0]) d->padded_cols = p.cols_p;
    const bool wanda = p.prune && opt.prune->method == PruneMethod::kWanda;
    const InputStats* st = stats != nullptr && (needs_calibration(opt.method) || wanda) ? stats->for_tensor(t.name) : nullptr;
    TESSERA_CHECK(st == nullptr || st->dim == t.ne[0], kInvalidArgument,
                  "calibration statistics of {} inputs for '{}', which has {}", st ? st->dim : 0, t.name, t.ne[0]);
    quantize_matrix(t, p, st, opt, pool, out, &d->how);
  } else if (p.awq_norm) {
    std::vector<float> v = read_f32(t);
    TESSERA_CHECK(p.vec_div.empty() || v.size() == p.vec_div.size(), kCorruptFile,
                  "awq: '{}' has {} values, expected {}", t.name, v.size(), p.vec_div.size());
    for (size_t k = 0; k < p.vec_div.size(); ++k) v[k] /= p.vec_div[k];
    TESSERA_CHECK(n_bytes == v.size() * sizeof(float), kInternal, "awq: '{}' size", t.name);
    std::memcpy(out, v.data(), n_bytes);
    d->how = p.vec_div.empty() ? "convert" : opt.method == Method::kSmoothQuant ? "smoothquant-folded" : "awq-folded";
  } else {
    TESSERA_CHECK(n_bytes <= t.n_bytes, kCorruptFile, "tensor '{}' is shorter than its shape", t.name);
    std::memcpy(out, t.data, n_bytes);
    d->how = "copy";
  }
}

// QMoE: every expert tensor encoded up front (the writer needs its size
// before any data), in file order so that layer windows of statistics run
// once. Expert e of layer N reads tap ffn_moe_in.<e> (gate, up) or
// ffn_moe_act.<e> (down); an expert no calibration token reached is rounded.
void encode_experts(const gguf::File& in, const QuantizeOptions& opt, StatsSource* stats, ThreadPool& pool,
                    std::map<std::string, Plan>& plans) {
  for (const gguf::TensorInfo& t : in.tensors()) {
    if (!is_experts(t)) continue;
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t cols = t.ne[0], rows = t.ne[1], n_expert = t.ne[2];
    const std::vector<float> w = read_f32(t);
    const std::optional<int64_t> layer = layer_of_tensor(t.name);
    const bool down = t.name.find("ffn_down_exps") != std::string::npos;
    std::vector<TernaryMatrix> mats;
    int64_t by_gptq = 0;
    for (int64_t e = 0; e < n_expert; ++e) {
      const float* we = w.data() + e * rows * cols;
      const InputStats* st = nullptr;
      if (opt.method == Method::kQmoe && layer) {
        st = stats->find(fmt::format("{}.{}", down ? "ffn_moe_act" : "ffn_moe_in", e), *layer);
      }
      TESSERA_CHECK(st == nullptr || st->dim == cols, kInvalidArgument,
                    "calibration statistics of {} inputs for expert {} of '{}', which has {}", st ? st->dim : 0, e,
                    t.name, cols);
      if (st != nullptr && st->n > 0) {
        mats.push_back(ternary_gptq(we, rows, cols, st->h, opt.gptq, &pool));
        ++by_gptq;
      } else {
        mats.push_back(ternary_rtn(we, rows, cols));
      }
    }
    Plan& p = plans[t.name];
    p.encoded = encode_qmoe(mats);
    p.type = DType::kQMoE;
    p.encoded_how = fmt::format("qmoe ({} of {} experts by gptq)", by_gptq, n_expert);
    p.encoded_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
}

// Sparse matrices: pruned and encoded up front (the writer needs their
// size before any data), in file order so that layer windows of statistics
// run once.
void encode_sparse_matrices(const gguf::File& in, const QuantizeOptions& opt, StatsSource* stats,
                            std::map<std::string, Plan>& plans) {
  for (const gguf::TensorInfo& t : in.tensors()) {
    Plan& p = plans[t.name];
    if (!p.matrix || !kernels::is_sparse(p.type)) continue;
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t cols = t.ne[0], rows = matrix_rows(t);
    std::vector<float> w = read_f32(t);
    const bool wanda = opt.prune->method == PruneMethod::kWanda;
    const InputStats* st = wanda ? stats->for_tensor(t.name) : nullptr;
    TESSERA_CHECK(st == nullptr || st->dim == cols, kInvalidArgument,
                  "calibration statistics of {} inputs for '{}', which has {}", st ? st->dim : 0, t.name, cols);
    p.encoded_how = prune_in_place(t.name, w.data(), rows, cols, st, *opt.prune);
    w = pad_columns(w, rows, cols, p.cols_p);
    p.encoded = kernels::encode_sparse(p.type, w.data(), rows, p.cols_p);
    p.encoded_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
}

// Writes to a .partial file renamed into place: an error mid-way (bad
// statistics, a corrupt tensor) leaves no partial file. Returns its size.
size_t write_atomically(const gguf::Writer& w, const std::string& out_path) {
  const std::string tmp = out_path + ".partial";
  try {
    w.write(tmp);
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
  TESSERA_CHECK(std::rename(tmp.c_str(), out_path.c_str()) == 0, kIo, "cannot rename '{}' to '{}'", tmp, out_path);
  std::error_code ec;
  const auto size = std::filesystem::file_size(out_path, ec);
  return ec ? 0 : static_cast<size_t>(size);
}

}  // namespace

Method parse_method(const std::string& s) {
  if (s == "rtn") return Method::kRtn;
  if (s == "awq") return Method::kAwq;
  if (s == "gptq") return Method::kGptq;
  if (s == "awq+gptq" || s == "awq-gptq") return Method::kAwqGptq;
  if (s == "qmoe") return Method::kQmoe;
  if (s == "qmoe-rtn") return Method::kQmoeRtn;
  if (s == "smoothquant") return Method::kSmoothQuant;
  fail(ErrorCode::kInvalidArgument, "unknown method '{}' (rtn, awq, gptq, awq+gptq, qmoe, qmoe-rtn, smoothquant)", s);
}

const char* method_name(Method m) {
  switch (m) {
    case Method::kRtn: return "rtn";
    case Method::kAwq: return "awq";
    case Method::kGptq: return "gptq";
    case Method::kAwqGptq: return "awq+gptq";
    case Method::kQmoe: return "qmoe";
    case Method::kQmoeRtn: return "qmoe-rtn";
    case Method::kSmoothQuant: return "smoothquant";
  }
  return "?";
}

QuantizeResult quantize_model(const gguf::File& in, const std::string& out_path, const QuantizeOptions& opt,
                              StatsSource* stats, ThreadPool& pool,
                              const std::function<void(const TensorDone&)>& on_tensor) {
  check_request(in, out_path, opt, stats);
  const Grid g = is_grid_type(opt.type) ? make_grid(opt.type, opt.bits) : Grid{};
  check_options(in, opt, g);
  const bool awq = opt.method == Method::kAwq || opt.method == Method::kAwqGptq;
  const bool smooth = opt.method == Method::kSmoothQuant;
  std::map<std::string, Plan> plans = plan_types(in, opt, awq || smooth);
  if (is_qmoe(opt.method)) encode_experts(in, opt, stats, pool, plans);
  if (kernels::is_sparse(opt.type)) encode_sparse_matrices(in, opt, stats, plans);
  std::set<int64_t> awq_planned;  // layers whose AWQ scales are searched (-1: the output's)
  // AWQ's scales of a tensor's layer, searched when its first tensor is
  // reached (norms and producers are written after their plans exist).
  const auto plan_layer_of = [&](const std::string& name) {
    const std::optional<int64_t> layer = layer_of_tensor(name);
    if (awq && layer && awq_planned.insert(*layer).second) plan_awq(in, g, *stats, opt.awq, plans, *layer);
    if (smooth && layer && awq_planned.insert(*layer).second) plan_smooth(in, *stats, opt.smooth_alpha, plans, *layer);
  };

  gguf::Writer w;
  copy_header(w, in, opt);
  QuantizeResult res;
  const int64_t total = static_cast<int64_t>(in.tensors().size());
  int64_t index = 0;
  for (const gguf::TensorInfo& t : in.tensors()) {
    const Plan& p = plans[t.name];
    std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
    DType type = t.type;
    if (p.matrix) {
      type = p.type;
      ne[0] = p.cols_p;
      if (p.cols_p != t.ne[0]) w.set_u32(kPaddedColsKey + t.name, static_cast<uint32_t>(t.ne[0]));
      res.n_weights += t.n_elements();
      const size_t bytes = p.encoded.empty() ? row_bytes(type, p.cols_p) * static_cast<size_t>(matrix_rows(t)) : p.encoded.size();
      res.weight_bytes += bytes;
      if (is_experts(t)) {
        res.n_expert_weights += t.n_elements();
        res.expert_bytes += bytes;
      }
    } else if (p.awq_norm) {
      type = DType::kF32;  // a norm with AWQ's 1/s folded in
    }
    const int64_t i = ++index;
    if (!p.encoded.empty()) {
      w.add_sized_tensor(t.name, p.type, ne, p.encoded.size(), [&p, &on_tensor, &t, i, total](uint8_t* out, size_t n) {
        std::memcpy(out, p.encoded.data(), n);
        if (on_tensor) {
          on_tensor({i, total, t.name, p.type, p.encoded_how, matrix_rows(t), t.ne[0], p.cols_p != t.ne[0] ? p.cols_p : 0, n,
                     p.encoded_seconds});
        }
      });
      continue;
    }
    w.add_tensor(t.name, type, ne, [&t, &plans, &plan_layer_of, &opt, stats, &pool, &on_tensor, type, i,
                                    total](uint8_t* out, size_t n_bytes) {
      const auto t0 = std::chrono::steady_clock::now();
      plan_layer_of(t.name);
      TensorDone d;
      d.index = i;
      d.total = total;
      d.name = t.name;
      d.type = type;
      d.rows = t.n_dims >= 2 ? t.ne[1] : 1;
      d.cols = t.ne[0];
      d.bytes = n_bytes;
      write_tensor(t, plans[t.name], opt, stats, pool, out, n_bytes, &d);
      d.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (on_tensor) on_tensor(d);
    });
    if (p.matrix && type == DType::kI8) {
      // The rows' scales, filled by the matrix's callback just before.
      const std::vector<int64_t> sne = {matrix_rows(t)};
      w.add_tensor(w8a8_scale_name(t.name), DType::kF32, sne, [&t, &plans](uint8_t* out, size_t n_bytes) {
        const std::vector<float>& sc = plans[t.name].w8_scale;
        TESSERA_CHECK(sc.size() * sizeof(float) == n_bytes, kInternal, "w8a8: scales of '{}' not ready", t.name);
        std::memcpy(out, sc.data(), n_bytes);
      });
    }
  }
  res.file_bytes = write_atomically(w, out_path);

  return res;
}

}  // namespace tessera::quant
