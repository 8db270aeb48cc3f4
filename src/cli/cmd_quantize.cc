// tessera quantize: a model's matrices to another storage type, the values
// chosen by RTN, AWQ, GPTQ or AWQ+GPTQ (quant/quantize_model.h), with a
// calibration pass over a text for the methods that need one.
#include <fmt/format.h>

#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/progress.h"
#include "cli/text_file.h"
#include "core/error.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "quant/qmoe.h"
#include "quant/quantize_model.h"

namespace tessera::cli {
namespace {

struct QuantizeArgs {
  std::string model, out, type = "q4_0", method = "rtn", calib;
  int bits = 0;
  int64_t calib_tokens = 16384, calib_ctx = 128, group = 0;
  std::vector<std::string> keep;
  std::string experts_type;
  bool act_order = false, no_clip = false;
  double damp = -1.0;  // < 0: the method's (GPTQ's 0.01, QMoE's quant::kQmoeDamp)
  int threads = 0;
  int64_t calib_memory_mb = 1024;
};

DType parse_type_option(const std::string& s) {
  const auto t = parse_dtype(s);
  TESSERA_CHECK(t.has_value(), kInvalidArgument, "unknown type '{}'", s);
  return *t;
}

TESSERA_COMMAND("quantize", "Quantize a model's matrices (RTN, AWQ, GPTQ)", [](CLI::App& sub) {
  auto a = std::make_shared<QuantizeArgs>();
  sub.add_option("-m,--model", a->model, "Input GGUF")->required();
  sub.add_option("-o,--out", a->out, "Output GGUF")->required();
  sub.add_option("--type", a->type, "Storage type of the matrices: q4_0, q2_k, q3_k, q4_k, q5_k, q6_k, q8_0 (every method); q4_1, q5_0, q5_1, iq4_nl, iq4_xs, mxfp4, tq1_0, tq2_0 (rtn); f16, bf16, f32")->capture_default_str();
  sub.add_option("--bits", a->bits, "Value bits inside the type (3 or 2: 3- or 2-bit values in Q4_0 blocks; 0: the type's own)")
      ->capture_default_str();
  sub.add_option("--method", a->method, "rtn, awq, gptq, awq+gptq; qmoe, qmoe-rtn (a mixture's experts as QMoE ternary codes)")->capture_default_str();
  sub.add_option("--calib", a->calib, "Calibration text (default: the short stories built in, src/quant/default_calibration.cc)");
  sub.add_option("--calib-tokens", a->calib_tokens, "Calibration tokens at most")->capture_default_str();
  sub.add_option("--calib-ctx", a->calib_ctx, "Tokens per calibration chunk")->capture_default_str();
  sub.add_option("--calib-memory", a->calib_memory_mb,
                 "MiB of calibration statistics held at once: layers are calibrated in windows that fit (a forward "
                 "pass per window)")
      ->capture_default_str();
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
    opt.bits = a->bits;
    opt.method = quant::parse_method(a->method);
    opt.group = a->group;
    if (!a->experts_type.empty()) opt.experts_type = parse_type_option(a->experts_type);
    opt.gptq.act_order = a->act_order;
    if (a->damp >= 0.0) {
      opt.gptq.damp = a->damp;
    } else if (opt.method == quant::Method::kQmoe) {
      opt.gptq.damp = quant::kQmoeDamp;
    }
    opt.awq.clip = !a->no_clip;
    for (const std::string& k : a->keep) {
      const size_t eq = k.find('=');
      TESSERA_CHECK(eq != std::string::npos && eq > 0, kInvalidArgument, "--keep {}: expected NAME=TYPE", k);
      opt.keep.emplace_back(k.substr(0, eq), parse_type_option(k.substr(eq + 1)));
    }
    ThreadPool pool(a->threads);
    const LoadedModel lm = load_model(a->model);
    std::unique_ptr<quant::LayerWindows> stats;
    if (quant::needs_calibration(opt.method)) {
      TESSERA_CHECK(a->calib_memory_mb > 0, kInvalidArgument, "--calib-memory must be positive");
      const std::string path = a->calib.empty() ? std::string("(built-in text)") : a->calib;
      const auto tok = load_tokenizer(lm);
      const std::string text = a->calib.empty() ? std::string(quant::default_calibration_text()) : read_text_file(a->calib);
      auto tokens = std::make_shared<const std::vector<int32_t>>(tok->encode(text, /*add_special=*/false));
      quant::CalibrationOptions co;
      co.n_ctx = a->calib_ctx;
      co.max_tokens = a->calib_tokens;
      co.bos = tok->add_bos() ? tok->bos_id() : -1;
      // One layer's statistics: the widths of the inputs of layer 0's linears.
      std::map<std::string, int64_t> widths;
      for (const gguf::TensorInfo& t : lm.file->tensors()) {
        const auto [tap, layer] = quant::tap_for_tensor(t.name);
        if (!tap.empty() && layer == 0) widths[tap] = t.ne[0];
      }
      std::vector<int64_t> dims;
      for (const auto& [tap, d] : widths) dims.push_back(d);
      const ModelConfig& mc = lm.model->config();
      for (int64_t e = 0; opt.method == quant::Method::kQmoe && e < mc.n_expert; ++e) {
        dims.push_back(mc.n_embd);  // expert e's gate / up input
        dims.push_back(mc.n_ff_exp);  // its down's
      }
      const int64_t n_layer = mc.n_layer;
      // Windows in layer order resume from the stream the previous one left.
      auto stream = std::make_shared<quant::ResidualStream>();
      auto run = [&lm, &pool, tokens, co, path, n_layer, stream](int64_t begin, int64_t end, bool result_norm) {
        quant::CalibrationOptions o = co;
        o.layer_begin = begin;
        o.layer_end = end;
        o.resume = stream.get();
        o.result_norm = result_norm;
        ProgressBar bar(result_norm ? std::string("calibration (output)")
                                    : fmt::format("calibration (layers {}-{} of {})", begin, end - 1, n_layer));
        quant::Calibration cal = quant::calibrate(*lm.model, *tokens, o, pool, [&](int64_t d, int64_t n) { bar.update(d, n); });
        bar.finish();
        if (cal.n_tokens < 1024 && (begin == 0 || result_norm)) {
          std::fprintf(stderr, "warning: %lld calibration tokens of %s is few: statistics this thin fit the text, not the model\n",
                       static_cast<long long>(cal.n_tokens), path.c_str());
        }
        return cal;
      };
      const size_t layer_bytes = quant::input_stats_bytes(dims);
      stats = std::make_unique<quant::LayerWindows>(run, n_layer, layer_bytes,
                                                    static_cast<size_t>(a->calib_memory_mb) << 20);
      std::fprintf(stderr, "calibration: %s, %lld tokens at most, %lld layer(s) per pass (%.0f MiB of statistics each)\n",
                   path.c_str(), static_cast<long long>(co.max_tokens), static_cast<long long>(stats->layers_per_window()),
                   static_cast<double>(layer_bytes) / (1 << 20));
    }
    ProgressBar bar("quantize");
    const quant::QuantizeResult r = quant::quantize_model(
        *lm.file, a->out, opt, stats.get(), pool,
        [&](const quant::TensorDone& d) {
          const std::string shape = d.padded_cols ? fmt::format("{}x{} (padded to {})", d.rows, d.cols, d.padded_cols)
                                                  : fmt::format("{}x{}", d.rows, d.cols);
          std::fprintf(stderr, "%s[%3lld/%3lld] %-28s %-5s %-18s %-24s %6.2f s\n", ::isatty(2) ? "\r" : "",
                       static_cast<long long>(d.index), static_cast<long long>(d.total), d.name.c_str(),
                       std::string(dtype_name(d.type)).c_str(), d.how.c_str(), shape.c_str(), d.seconds);
          bar.update(d.index, d.total);
        });
    bar.finish();
    std::printf("wrote %s: %lld matrix weights at %.3f bits per weight, file %.3f MB\n", a->out.c_str(),
                static_cast<long long>(r.n_weights), r.bits_per_weight(), static_cast<double>(r.file_bytes) / 1e6);
    if (r.n_expert_weights > 0) {
      std::printf("experts: %lld weights at %.3f bits per weight (%.3f MB)\n", static_cast<long long>(r.n_expert_weights),
                  r.expert_bits_per_weight(), static_cast<double>(r.expert_bytes) / 1e6);
    }
    return 0;
  };
});

}  // namespace
}  // namespace tessera::cli
