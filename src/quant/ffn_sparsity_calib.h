// Calibration of contextual sparsity (model/ffn_sparsity.h): each layer's
// threshold of |act(gate)| below which a neuron is skipped, chosen so that
// a fraction `sparsity` of the calibration tokens' neurons fall below it
// (a histogram of log2 |act(gate)|, 64 bins per octave: the threshold is
// within 1.1% of the exact quantile), and the recall of that choice: per
// token, the fraction of the k neurons with the largest |h| = |act(g) * u|
// that the threshold keeps (k = the number it keeps), averaged.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "core/thread_pool.h"
#include "model/model.h"
#include "quant/calibration.h"

namespace tessera::quant {

struct FfnSparsityCalibration {
  double sparsity = 0.0;        // the target
  std::vector<float> threshold;  // [n_layer]
  std::vector<float> recall;     // [n_layer]
  std::vector<float> skipped;    // [n_layer] the fraction skipped on the calibration text
};

// Two passes of `model` (dense) over `tokens` (chunks of opt.n_ctx, BOS
// first when opt.bos >= 0): the thresholds, then their recall.
FfnSparsityCalibration calibrate_ffn_sparsity(const Model& model, std::span<const int32_t> tokens, double sparsity,
                                              const CalibrationOptions& opt, ThreadPool& pool,
                                              const std::function<void(int64_t, int64_t)>& progress = {});

}  // namespace tessera::quant
