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
  Calibration cal;
  engine::SequenceRunner runner(model, {.n_ctx = n_ctx, .kv_type = DType::kF32, .max_batch_tokens = n_ctx}, pool);
  runner.state().tap = [&cal, &opt](std::string_view name, int64_t layer, const float* data, int64_t rows, int64_t cols,
                              int64_t stride) {
    if (!Calibration::wanted(name)) return;
    const bool keep = layer < 0 ? opt.result_norm : layer >= opt.layer_begin && layer < opt.layer_end;
    if (keep) cal.at(std::string(name), layer).add(data, rows, cols, stride);
  };
  std::vector<int32_t> chunk;
  for (int64_t at = 0; at < total; at += n_ctx) {
    const int64_t n = std::min(n_ctx, total - at);
    chunk.assign(tokens.begin() + at, tokens.begin() + at + n);
    if (opt.bos >= 0) chunk[0] = opt.bos;
    runner.reset();
    runner.append(chunk, /*all_logits=*/true);  // every row reaches result_norm
    cal.n_tokens += n;
    if (progress) progress(at + n, total);
  }
  runner.state().tap = nullptr;
  cal.finish();
  return cal;
}

}  // namespace tessera::quant
