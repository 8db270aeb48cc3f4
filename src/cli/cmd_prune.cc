// tessera prune: the blocks' linears pruned by magnitude or Wanda
// (quant/prune.h), unstructured or N:M, then stored in a dense type (the
// zeros kept) or a sparse one that keeps only the surviving weights
// (SP_Q8_0, SP_Q4_0: kernels/sparse.h), which decodes faster. With
// --ffn-sparsity, also the thresholds of contextual sparsity (a fraction of
// each token's FFN neurons skipped: model/ffn_sparsity.h), calibrated on the
// dense model (quant/ffn_sparsity_calib.h) and stored in the file.
#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "cli/command.h"
#include "cli/quantize_common.h"
#include "cli/progress.h"
#include "core/error.h"
#include "kernels/sparse.h"
#include "model/ffn_sparsity.h"
#include "quant/ffn_sparsity_calib.h"
#include "quant/prune.h"
#include "quant/quantize_model.h"

namespace tessera::cli {
namespace {

// The thresholds of contextual sparsity over the calibration text, a line
// per layer (stderr) and the mean recall (stdout); returns their writer.
std::function<void(gguf::Writer&)> calibrate_contextual(const LoadedModel& lm, double sparsity,
                                                        const CalibrationOptions& o, ThreadPool& pool) {
  quant::CalibrationOptions co;
  const std::vector<int32_t> tokens = calibration_tokens(lm, o, &co);
  ProgressBar bar("contextual sparsity (2 passes)");
  const quant::FfnSparsityCalibration cal = quant::calibrate_ffn_sparsity(
      *lm.model, tokens, sparsity, co, pool, [&](int64_t d, int64_t n) { bar.update(d, n); });
  bar.finish();
  double recall = 0.0, skipped = 0.0;
  for (size_t il = 0; il < cal.threshold.size(); ++il) {
    std::fprintf(stderr, "layer %zu: threshold %.4g, skipped %.3f, recall %.3f\n", il, cal.threshold[il],
                 cal.skipped[il], cal.recall[il]);
    recall += cal.recall[il];
    skipped += cal.skipped[il];
  }
  const double n = static_cast<double>(cal.threshold.size());
  std::printf("ffn sparsity %.2f: skipped %.3f of the calibration neurons, recall %.3f (mean over %zu layers)\n",
              sparsity, skipped / n, recall / n, cal.threshold.size());
  return [cal](gguf::Writer& w) {
    w.set_f32(kFfnSparsityKey, static_cast<float>(cal.sparsity));
    w.set_f32s(kFfnThresholdKey, cal.threshold);
    w.set_f32s(kFfnRecallKey, cal.recall);
  };
}

struct PruneArgs {
  std::string model, out, method = "wanda", nm, type = "sp_q8_0";
  double sparsity = 0.5, ffn_sparsity = 0.0;
  CalibrationOptions calib;
  int threads = 0;
};

TESSERA_COMMAND("prune", "Prune a model's linears (magnitude, Wanda; unstructured or N:M) into sparse or dense types", [](CLI::App& sub) {
  auto a = std::make_shared<PruneArgs>();
  sub.add_option("-m,--model", a->model, "Input GGUF (unquantized is best: F32, F16, BF16)")->required();
  sub.add_option("-o,--out", a->out, "Output GGUF")->required();
  sub.add_option("--method", a->method, "magnitude (|w|) or wanda (|w| times its input's norm over --calib)")->capture_default_str();
  sub.add_option("--sparsity", a->sparsity, "Fraction of each row's weights pruned (unstructured)")->capture_default_str();
  sub.add_option("--nm", a->nm, "N:M instead: keep N of every M consecutive inputs (2:4, 4:8)");
  sub.add_option("--type", a->type,
                 "Storage: sp_q8_0, sp_q4_0 (sparse: only the kept weights; the embedding and output head in q8_0 / "
                 "q4_0), or any type tessera quantize writes with rtn (the zeros stored)")
      ->capture_default_str();
  sub.add_option("--ffn-sparsity", a->ffn_sparsity,
                 "Contextual sparsity: skip this fraction of each token's FFN neurons (|act(gate)| under a per-layer "
                 "threshold calibrated over --calib; 0: none). --sparsity 0 keeps every weight")
      ->capture_default_str();
  a->calib.add_to(sub);
  sub.add_option("-t,--threads", a->threads, "Threads (default: all cores)");
  return [a]() {
    quant::QuantizeOptions opt;
    const auto t = parse_dtype(a->type);
    TESSERA_CHECK(t.has_value(), kInvalidArgument, "unknown type '{}'", a->type);
    opt.type = *t;
    opt.method = quant::Method::kRtn;
    quant::PruneOptions p;
    p.method = quant::parse_prune_method(a->method);
    TESSERA_CHECK(a->sparsity >= 0.0 && a->sparsity < 1.0, kInvalidArgument, "--sparsity {} is not in [0, 1)", a->sparsity);
    p.sparsity = a->sparsity;
    if (!a->nm.empty()) quant::parse_nm(a->nm, &p);
    // --sparsity 0 (contextual sparsity alone): no weight is pruned, so no
    // Wanda statistics; a sparse type still goes through the pruner's writer.
    const bool prunes = p.structured() || p.sparsity > 0.0 || kernels::is_sparse(opt.type);
    if (prunes) opt.prune = p;
    ThreadPool pool(a->threads);
    setenv("TESSERA_FFN_SPARSITY", "0", 1);  // calibrate the dense model, whatever the input holds
    const LoadedModel lm = load_model(a->model);
    if (a->ffn_sparsity > 0.0) opt.metadata = calibrate_contextual(lm, a->ffn_sparsity, a->calib, pool);
    std::unique_ptr<quant::LayerWindows> stats;
    if (prunes && p.method == quant::PruneMethod::kWanda) stats = calibration_windows(lm, a->calib, false, pool);
    write_quantized(lm, a->out, opt, stats.get(), pool);
    return 0;
  };
});

}  // namespace
}  // namespace tessera::cli
