// What `tessera quantize` (AWQ, GPTQ, QMoE) and `tessera prune` (Wanda)
// share: --calib and its budget options, the layer windows of statistics
// over that text (quant/calibration.h), and the run of the writer with its
// per-tensor report.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "model/model.h"
#include "quant/calibration.h"
#include "quant/quantize_model.h"

namespace tessera::cli {

struct CalibrationOptions {
  std::string calib;  // empty: the built-in text
  int64_t tokens = 16384, ctx = 128, memory_mb = 1024;
  void add_to(CLI::App& app);
};

// The calibration text's tokens (--calib, or the built-in text), and the
// chunking options (context, token budget, BOS) in `co`.
std::vector<int32_t> calibration_tokens(const LoadedModel& lm, const CalibrationOptions& o,
                                        quant::CalibrationOptions* co);

// Statistics of `lm`'s linears over the calibration text, gathered a window
// of layers at a time as the quantizer asks for them (a progress bar per
// pass). `expert_inputs`: also each expert's inputs (QMoE). lm and pool
// must outlive the result.
std::unique_ptr<quant::LayerWindows> calibration_windows(const LoadedModel& lm, const CalibrationOptions& o,
                                                         bool expert_inputs, ThreadPool& pool);

// quant::quantize_model with a progress bar and a line per tensor (stderr),
// then the weights' bits and the file's size (stdout).
void write_quantized(const LoadedModel& lm, const std::string& out, const quant::QuantizeOptions& opt,
                     quant::StatsSource* stats, ThreadPool& pool);

}  // namespace tessera::cli
