#include "cli/quantize_common.h"

#include <fmt/format.h>

#include <unistd.h>

#include <cstdio>
#include <map>
#include <vector>

#include "cli/progress.h"
#include "cli/text_file.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace tessera::cli {

void CalibrationOptions::add_to(CLI::App& app) {
  app.add_option("--calib", calib, "Calibration text (default: the short stories built in, src/quant/default_calibration.cc)");
  app.add_option("--calib-tokens", tokens, "Calibration tokens at most")->capture_default_str();
  app.add_option("--calib-ctx", ctx, "Tokens per calibration chunk")->capture_default_str();
  app.add_option("--calib-memory", memory_mb,
                 "MiB of calibration statistics held at once: layers are calibrated in windows that fit (a forward "
                 "pass per window)")
      ->capture_default_str();
}

std::vector<int32_t> calibration_tokens(const LoadedModel& lm, const CalibrationOptions& o,
                                        quant::CalibrationOptions* co) {
  const auto tok = load_tokenizer(lm);
  const std::string text = o.calib.empty() ? std::string(quant::default_calibration_text()) : read_text_file(o.calib);
  co->n_ctx = o.ctx;
  co->max_tokens = o.tokens;
  co->bos = tok->add_bos() ? tok->bos_id() : -1;
  return tok->encode(text, /*add_special=*/false);
}

std::unique_ptr<quant::LayerWindows> calibration_windows(const LoadedModel& lm, const CalibrationOptions& o,
                                                         bool expert_inputs, ThreadPool& pool) {
  TESSERA_CHECK(o.memory_mb > 0, kInvalidArgument, "--calib-memory must be positive");
  const std::string path = o.calib.empty() ? std::string("(built-in text)") : o.calib;
  quant::CalibrationOptions co;
  auto tokens = std::make_shared<const std::vector<int32_t>>(calibration_tokens(lm, o, &co));
  // One layer's statistics: the widths of the inputs of layer 0's linears.
  std::map<std::string, int64_t> widths;
  for (const gguf::TensorInfo& t : lm.file->tensors()) {
    const auto [tap, layer] = quant::tap_for_tensor(t.name);
    if (!tap.empty() && layer == 0) widths[tap] = t.ne[0];
  }
  std::vector<int64_t> dims;
  for (const auto& [tap, d] : widths) dims.push_back(d);
  const ModelConfig& mc = lm.model->config();
  for (int64_t e = 0; expert_inputs && e < mc.n_expert; ++e) {
    dims.push_back(mc.n_embd);    // expert e's gate / up input
    dims.push_back(mc.n_ff_exp);  // its down's
  }
  const int64_t n_layer = mc.n_layer;
  // Windows in layer order resume from the stream the previous one left.
  auto stream = std::make_shared<quant::ResidualStream>();
  auto run = [&lm, &pool, tokens, co, path, n_layer, stream](int64_t begin, int64_t end, bool result_norm) {
    quant::CalibrationOptions c = co;
    c.layer_begin = begin;
    c.layer_end = end;
    c.resume = stream.get();
    c.result_norm = result_norm;
    ProgressBar bar(result_norm ? std::string("calibration (output)")
                                : fmt::format("calibration (layers {}-{} of {})", begin, end - 1, n_layer));
    quant::Calibration cal = quant::calibrate(*lm.model, *tokens, c, pool, [&](int64_t d, int64_t n) { bar.update(d, n); });
    bar.finish();
    if (cal.n_tokens < 1024 && (begin == 0 || result_norm)) {
      std::fprintf(stderr, "warning: %lld calibration tokens of %s is few: statistics this thin fit the text, not the model\n",
                   static_cast<long long>(cal.n_tokens), path.c_str());
    }
    return cal;
  };
  const size_t layer_bytes = quant::input_stats_bytes(dims);
  auto windows = std::make_unique<quant::LayerWindows>(run, n_layer, layer_bytes, static_cast<size_t>(o.memory_mb) << 20);
  std::fprintf(stderr, "calibration: %s, %lld tokens at most, %lld layer(s) per pass (%.0f MiB of statistics each)\n",
               path.c_str(), static_cast<long long>(co.max_tokens), static_cast<long long>(windows->layers_per_window()),
               static_cast<double>(layer_bytes) / (1 << 20));
  return windows;
}

void write_quantized(const LoadedModel& lm, const std::string& out, const quant::QuantizeOptions& opt,
                     quant::StatsSource* stats, ThreadPool& pool) {
  ProgressBar bar("quantize");
  const quant::QuantizeResult r = quant::quantize_model(*lm.file, out, opt, stats, pool, [&](const quant::TensorDone& d) {
    const std::string shape = d.padded_cols ? fmt::format("{}x{} (padded to {})", d.rows, d.cols, d.padded_cols)
                                            : fmt::format("{}x{}", d.rows, d.cols);
    std::fprintf(stderr, "%s[%3lld/%3lld] %-28s %-7s %-18s %-24s %6.2f s\n", ::isatty(2) ? "\r" : "",
                 static_cast<long long>(d.index), static_cast<long long>(d.total), d.name.c_str(),
                 std::string(dtype_name(d.type)).c_str(), d.how.c_str(), shape.c_str(), d.seconds);
    bar.update(d.index, d.total);
  });
  bar.finish();
  std::printf("wrote %s: %lld matrix weights at %.3f bits per weight, file %.3f MB\n", out.c_str(),
              static_cast<long long>(r.n_weights), r.bits_per_weight(), static_cast<double>(r.file_bytes) / 1e6);
  if (r.n_expert_weights > 0) {
    std::printf("experts: %lld weights at %.3f bits per weight (%.3f MB)\n", static_cast<long long>(r.n_expert_weights),
                r.expert_bits_per_weight(), static_cast<double>(r.expert_bytes) / 1e6);
  }
}

}  // namespace tessera::cli
