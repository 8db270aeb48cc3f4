#include "quant/calibration.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "engine/sequence_runner.h"

namespace tessera::quant {

Calibration calibrate(const Model& model, std::span<const int32_t> tokens, const CalibrationOptions& opt,
                      ThreadPool& pool, const std::function<void(int64_t, int64_t)>& progress) {
  const int64_t n_ctx = std::min(opt.n_ctx, model.config().n_ctx_train);
  TESSERA_CHECK(n_ctx >= 2, kInvalidArgument, "calibration context {} is too small", n_ctx);
  const int64_t total = std::min<int64_t>(static_cast<int64_t>(tokens.size()), opt.max_tokens);
  TESSERA_CHECK(total >= 2, kInvalidArgument, "the calibration text has {} tokens; it needs at least 2", total);
  const int64_t L = model.config().n_layer, E = model.config().n_embd;
  Calibration cal;
  // Layers [first, end): from where the resumed stream is, if it is not past
  // the first layer wanted, to the last one wanted.
  const bool layers_wanted = opt.layer_begin < std::min(opt.layer_end, L);
  const int64_t first_wanted = layers_wanted ? opt.layer_begin : L;
  ResidualStream* rs = opt.resume;
  const bool resume = rs != nullptr && rs->layer > 0 && rs->layer <= first_wanted &&
                      static_cast<int64_t>(rs->x.size()) == total * E;
  cal.first_layer = resume ? rs->layer : 0;
  cal.end_layer = opt.result_norm ? L : std::min(L, opt.layer_end);
  if (rs != nullptr && !resume) rs->x.assign(static_cast<size_t>(total * E), 0.0f);
  engine::SequenceRunner runner(model, {.n_ctx = n_ctx, .kv_type = DType::kF32, .max_batch_tokens = n_ctx}, pool);
  if (cal.first_layer > 0 || cal.end_layer < L) {
    std::vector<uint8_t> skip(static_cast<size_t>(L));
    for (int64_t il = 0; il < L; ++il) skip[static_cast<size_t>(il)] = il < cal.first_layer || il >= cal.end_layer;
    runner.set_skip_layers(std::move(skip));
  }
  int64_t at = 0;  // the chunk's first token
  runner.state().tap = [&](std::string_view name, int64_t layer, const float* data, int64_t rows, int64_t cols,
                           int64_t stride) {
    if (rs != nullptr && layer == cal.end_layer - 1 && name == "layer_out") {
      for (int64_t r = 0; r < rows; ++r) std::copy_n(data + r * stride, cols, rs->x.data() + (at + r) * E);
    }
    if (!Calibration::wanted(name)) return;
    const bool keep = layer < 0 ? opt.result_norm : layer >= opt.layer_begin && layer < opt.layer_end;
    if (keep) cal.at(std::string(name), layer).add(data, rows, cols, stride);
  };
  std::vector<int32_t> chunk;
  std::vector<const float*> rows;
  for (; at < total; at += n_ctx) {
    const int64_t n = std::min(n_ctx, total - at);
    chunk.assign(tokens.begin() + at, tokens.begin() + at + n);
    if (opt.bos >= 0) chunk[0] = opt.bos;
    rows.clear();
    for (int64_t i = 0; cal.first_layer > 0 && i < n; ++i) rows.push_back(rs->x.data() + (at + i) * E);
    runner.reset();
    runner.append(chunk, /*all_logits=*/opt.result_norm, {}, rows);  // result_norm: every row reaches it
    cal.n_tokens += n;
    if (progress) progress(at + n, total);
  }
  if (rs != nullptr) rs->layer = std::max(cal.first_layer, cal.end_layer);
  runner.state().tap = nullptr;
  cal.finish();
  return cal;
}

}  // namespace tessera::quant
