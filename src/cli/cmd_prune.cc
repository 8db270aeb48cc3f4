// tessera prune: the blocks' linears pruned by magnitude or Wanda
// (quant/prune.h), unstructured or N:M, then stored in a dense type (the
// zeros kept) or a sparse one that keeps only the surviving weights
// (SP_Q8_0, SP_Q4_0: kernels/sparse.h), which decodes faster.
#include <memory>
#include <string>

#include "cli/command.h"
#include "cli/quantize_common.h"
#include "core/error.h"
#include "quant/prune.h"
#include "quant/quantize_model.h"

namespace tessera::cli {
namespace {

struct PruneArgs {
  std::string model, out, method = "wanda", nm, type = "sp_q8_0";
  double sparsity = 0.5;
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
    opt.prune = p;
    ThreadPool pool(a->threads);
    const LoadedModel lm = load_model(a->model);
    std::unique_ptr<quant::LayerWindows> stats;
    if (p.method == quant::PruneMethod::kWanda) stats = calibration_windows(lm, a->calib, false, pool);
    write_quantized(lm, a->out, opt, stats.get(), pool);
    return 0;
  };
});

}  // namespace
}  // namespace tessera::cli
