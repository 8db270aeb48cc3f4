// tessera quantize: a model's matrices to another storage type, the values
// chosen by RTN, AWQ, GPTQ or AWQ+GPTQ (quant/quantize_model.h), with a
// calibration pass over a text for the methods that need one.
#include <fmt/format.h>

#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cli/quantize_common.h"
#include "cli/command.h"
#include "core/error.h"
#include "model/model.h"
#include "quant/qmoe.h"
#include "quant/quantize_model.h"
#include "quant/rotate.h"
#include "quant/key_mean.h"
#include "model/weights.h"

namespace tessera::cli {
namespace {

struct QuantizeArgs {
  std::string model, out, type = "q4_0", method = "rtn";
  CalibrationOptions calib;
  int bits = 0;
  int64_t group = 0;
  std::vector<std::string> keep;
  std::string experts_type;
  bool act_order = false, no_clip = false;
  double damp = -1.0;  // < 0: the method's (GPTQ's 0.01, QMoE's quant::kQmoeDamp)
  float alpha = 0.5f;  // SmoothQuant's migration strength
  uint64_t rotation_seed = quant::RotateOptions{}.seed;
  bool no_online_ffn = false;
  bool center_keys = false;
  int threads = 0;
};

// Removed when it goes out of scope.
struct TempFile {
  std::string path;
  ~TempFile() {
    if (!path.empty()) std::remove(path.c_str());
  }
};

DType parse_type_option(const std::string& s) {
  // int8 codes (I8) and a .scale per matrix (docs/FORMATS.md); w4a8: 4-bit codes in the same layout
  if (s == "w8a8" || s == "W8A8" || s == "w4a8" || s == "W4A8") return DType::kI8;
  const auto t = parse_dtype(s);
  TESSERA_CHECK(t.has_value(), kInvalidArgument, "unknown type '{}'", s);
  return *t;
}

// quant/key_mean.h: the means over the calibration text, into the output's metadata.
void add_key_means(const LoadedModel& lm, const CalibrationOptions& calib, quant::QuantizeOptions& opt, ThreadPool& pool) {
  quant::CalibrationOptions co;
  std::vector<int32_t> tokens = calibration_tokens(lm, calib, &co);
  if (static_cast<int64_t>(tokens.size()) > co.max_tokens) tokens.resize(static_cast<size_t>(co.max_tokens));
  const ModelConfig& c = lm.model->config();
  const char* obstacle = key_shift_obstacle(c);
  TESSERA_CHECK(obstacle == nullptr, kInvalidArgument,
                "--center-keys: '{}' attention has {}, whose scores are not shift-invariant", c.arch,
                obstacle == nullptr ? "" : obstacle);
  const std::vector<float> means = quant::flatten_key_means(quant::key_means(*lm.model, tokens, co.n_ctx, co.bos, pool));
  std::fprintf(stderr, "center-keys: each layer's mean key over %lld calibration tokens\n", static_cast<long long>(tokens.size()));
  opt.metadata = [prev = opt.metadata, means](gguf::Writer& w) {
    if (prev) prev(w);
    w.set_f32s(kKeyMeanKey, means);
  };
}

TESSERA_COMMAND("quantize", "Quantize a model's matrices (RTN, AWQ, GPTQ)", [](CLI::App& sub) {
  auto a = std::make_shared<QuantizeArgs>();
  sub.add_option("-m,--model", a->model, "Input GGUF")->required();
  sub.add_option("-o,--out", a->out, "Output GGUF")->required();
  sub.add_option("--type", a->type, "Storage type of the matrices: q4_0, q2_k, q3_k, q4_k, q5_k, q6_k, q8_0 (every method); q4_1, q5_0, q5_1, iq4_nl, iq4_xs, mxfp4, tq1_0, tq2_0 (rtn); f16, bf16, f32; w8a8 (rtn, smoothquant); w4a8 (rtn, gptq: 4-bit codes per channel, int8 activations)")->capture_default_str();
  sub.add_option("--bits", a->bits, "Value bits inside the type (3 or 2: 3- or 2-bit values in Q4_0 blocks; 0: the type's own)")
      ->capture_default_str();
  sub.add_option("--method", a->method, "rtn, awq, gptq, awq+gptq; qmoe, qmoe-rtn (a mixture's experts as QMoE ternary codes); smoothquant (--type w8a8); quarot, quarot+gptq (QuaRot's rotations, then rtn or gptq)")->capture_default_str();
  sub.add_option("--rotation-seed", a->rotation_seed, "quarot: the rotations' seed")->capture_default_str();
  sub.add_flag("--no-online-ffn", a->no_online_ffn, "quarot: no run-time rotation of ffn_down's input (the file is a plain model)");
  sub.add_flag("--center-keys", a->center_keys, "Calibrate each layer's mean key into the file (tessera.kv.key_mean): a q8_0 / q4_0 KV cache subtracts it");
  sub.add_option("--alpha", a->alpha, "SmoothQuant: s_j = max|X_j|^alpha / max|W_j|^(1 - alpha)")->capture_default_str();
  a->calib.add_to(sub);
  sub.add_option("--group", a->group, "Weights per scale (must be the type's block: 32, Q2_K, Q3_K and Q6_K 16)");
  sub.add_option("--keep", a->keep, "NAME=TYPE: store tensor NAME as TYPE (repeatable)");
  sub.add_option("--experts-type", a->experts_type, "A mixture's experts in this type (default: --type)");
  sub.add_flag("--act-order", a->act_order, "GPTQ: quantize columns by decreasing input energy");
  sub.add_option("--damp", a->damp, "GPTQ: dampening, a fraction of mean(diag H) (default 0.01; qmoe 0.5, which keeps the ternary codes sparse)");
  sub.add_flag("--no-clip", a->no_clip, "AWQ: no clipping search");
  sub.add_option("-t,--threads", a->threads, "Threads (default: all cores)");
  return [a]() {
    quant::QuantizeOptions opt;
    opt.type = parse_type_option(a->type);
    opt.bits = a->type == "w4a8" || a->type == "W4A8" ? 4 : a->bits;
    // QuaRot: the model rotated first (quant/rotate.h) into a temporary F32
    // file beside the output, then quantized by rtn or gptq.
    const bool quarot = a->method == "quarot" || a->method.rfind("quarot+", 0) == 0;
    opt.method = quant::parse_method(!quarot ? a->method : a->method == "quarot" ? "rtn" : a->method.substr(7));
    TESSERA_CHECK(!quarot || opt.method == quant::Method::kRtn || opt.method == quant::Method::kGptq, kInvalidArgument,
                  "--method {}: quarot is followed by rtn or gptq", a->method);
    opt.group = a->group;
    if (!a->experts_type.empty()) opt.experts_type = parse_type_option(a->experts_type);
    opt.gptq.act_order = a->act_order;
    if (a->damp >= 0.0) {
      opt.gptq.damp = a->damp;
    } else if (opt.method == quant::Method::kQmoe) {
      opt.gptq.damp = quant::kQmoeDamp;
    }
    opt.awq.clip = !a->no_clip;
    opt.smooth_alpha = a->alpha;
    TESSERA_CHECK(a->alpha >= 0.0f && a->alpha <= 1.0f, kInvalidArgument, "--alpha {}: 0..1", a->alpha);
    for (const std::string& k : a->keep) {
      const size_t eq = k.find('=');
      TESSERA_CHECK(eq != std::string::npos && eq > 0, kInvalidArgument, "--keep {}: expected NAME=TYPE", k);
      opt.keep.emplace_back(k.substr(0, eq), parse_type_option(k.substr(eq + 1)));
    }
    ThreadPool pool(a->threads);
    std::string input = a->model;
    TempFile rotated;
    if (quarot) {
      rotated.path = a->out + ".rotated.tmp";
      quant::RotateOptions ro;
      ro.seed = a->rotation_seed;
      ro.online_ffn = !a->no_online_ffn;
      quant::rotate_model(gguf::File::open(a->model), ro, rotated.path);
      input = rotated.path;
    }
    const LoadedModel lm = load_model(input);
    if (a->center_keys) add_key_means(lm, a->calib, opt, pool);
    std::unique_ptr<quant::LayerWindows> stats;
    if (quant::needs_calibration(opt.method)) {
      stats = calibration_windows(lm, a->calib, opt.method == quant::Method::kQmoe, pool);
    }
    write_quantized(lm, a->out, opt, stats.get(), pool);
    return 0;
  };
});

}  // namespace
}  // namespace tessera::cli
