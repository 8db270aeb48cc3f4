// The statistics side of calibration (quant/calibration.h): accumulating
// a linear's inputs and finding the entry of a tensor. Kept apart from
// calibrate(), which runs the model, so that what reads them (the
// quantizer, tests/fuzz/quant_fuzz.cc) does not need the engine.
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "quant/calibration.h"
#include "quant/linalg.h"

namespace tessera::quant {

void InputStats::add(const float* x, int64_t rows, int64_t cols, int64_t stride) {
  if (dim == 0) {
    dim = cols;
    h.assign(static_cast<size_t>(cols * cols), 0.0);
    abs_sum.assign(static_cast<size_t>(cols), 0.0);
    abs_max.assign(static_cast<size_t>(cols), 0.0f);
  }
  TESSERA_CHECK(cols == dim, kInternal, "calibration input of {} columns, then {}", dim, cols);
  // Up to kBatch rows transposed (channel-major), then one sweep of H's
  // upper triangle for all of them (mirrored when read: finish()).
  constexpr int64_t kBatch = 64;
  std::vector<double> xt(static_cast<size_t>(cols * std::min(rows, kBatch)));
  for (int64_t t0 = 0; t0 < rows; t0 += kBatch) {
    const int64_t k = std::min(kBatch, rows - t0);
    for (int64_t t = 0; t < k; ++t) {
      const float* r = x + (t0 + t) * stride;
      for (int64_t i = 0; i < cols; ++i) {
        xt[static_cast<size_t>(i * k + t)] = r[i];
        abs_sum[static_cast<size_t>(i)] += std::fabs(static_cast<double>(r[i]));
        abs_max[static_cast<size_t>(i)] = std::max(abs_max[static_cast<size_t>(i)], std::fabs(r[i]));
      }
    }
    add_gram_upper(h.data(), xt.data(), cols, k);
  }
  n += rows;
}

std::vector<float> InputStats::mean_abs() const {
  std::vector<float> m(abs_sum.size());
  for (size_t i = 0; i < m.size(); ++i) m[i] = n > 0 ? static_cast<float>(abs_sum[i] / static_cast<double>(n)) : 0.0f;
  return m;
}

bool Calibration::wanted(std::string_view tap) {
  return tap == "attn_norm" || tap == "ffn_norm" || tap == "attn_out" || tap == "ffn_act" || tap == "result_norm" ||
         tap.rfind("ffn_moe_in.", 0) == 0 || tap.rfind("ffn_moe_act.", 0) == 0;
}

void Calibration::finish() {
  for (auto& [key, s] : stats_) {
    for (int64_t i = 0; i < s.dim; ++i) {
      for (int64_t j = 0; j < i; ++j) s.h[static_cast<size_t>(i * s.dim + j)] = s.h[static_cast<size_t>(j * s.dim + i)];
    }
  }
}

const InputStats* Calibration::find(const std::string& name, int64_t layer) const {
  auto it = stats_.find({name, layer});
  return it == stats_.end() ? nullptr : &it->second;
}

std::optional<int64_t> layer_of_tensor(const std::string& t) {
  if (t == "output.weight" || t == "output_norm.weight") return -1;
  if (t.rfind("blk.", 0) != 0) return std::nullopt;
  const size_t dot = t.find('.', 4);
  if (dot == std::string::npos || dot == 4 || dot > 12) return std::nullopt;
  int64_t layer = 0;
  for (size_t i = 4; i < dot; ++i) {
    if (t[i] < '0' || t[i] > '9') return std::nullopt;
    layer = layer * 10 + (t[i] - '0');
  }
  return layer;
}

std::pair<std::string, int64_t> tap_for_tensor(const std::string& t) {
  if (t == "output.weight") return {"result_norm", -1};
  const std::optional<int64_t> l = layer_of_tensor(t);
  if (!l || *l < 0) return {"", 0};
  const int64_t layer = *l;
  const std::string rest = t.substr(t.find('.', 4) + 1);
  if (rest == "attn_q.weight" || rest == "attn_k.weight" || rest == "attn_v.weight") return {"attn_norm", layer};
  if (rest == "attn_output.weight") return {"attn_out", layer};
  if (rest == "ffn_gate.weight" || rest == "ffn_up.weight") return {"ffn_norm", layer};
  if (rest == "ffn_down.weight") return {"ffn_act", layer};
  return {"", 0};
}

const InputStats* stats_for_tensor(const Calibration& c, const std::string& t) {
  const auto [tap, layer] = tap_for_tensor(t);
  return tap.empty() ? nullptr : c.find(tap, layer);
}

LayerWindows::LayerWindows(Run run, int64_t n_layers, size_t layer_bytes, size_t budget_bytes)
    : run_(std::move(run)), n_layers_(n_layers),
      per_window_(std::max<int64_t>(1, layer_bytes == 0 ? n_layers : static_cast<int64_t>(budget_bytes / layer_bytes))) {}

const InputStats* LayerWindows::find(const std::string& tap, int64_t layer) {
  if (layer < 0) {
    if (!result_norm_) {
      cur_ = Calibration{};  // drop the old window before gathering the next
      cur_ = run_(0, 0, true);
      begin_ = end_ = 0;
      result_norm_ = true;
      ++passes_;
    }
  } else if (result_norm_ || layer < begin_ || layer >= end_) {
    if (layer >= n_layers_) return nullptr;
    cur_ = Calibration{};
    begin_ = layer / per_window_ * per_window_;
    end_ = std::min(n_layers_, begin_ + per_window_);
    cur_ = run_(begin_, end_, false);
    result_norm_ = false;
    ++passes_;
  }
  return cur_.find(tap, layer);
}

size_t input_stats_bytes(std::span<const int64_t> dims) {
  size_t b = 0;
  for (int64_t d : dims) b += static_cast<size_t>(d) * static_cast<size_t>(d + 1) * sizeof(double);
  return b;
}

}  // namespace tessera::quant
