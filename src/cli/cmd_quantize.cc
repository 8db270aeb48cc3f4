// tessera quantize: a model's matrices to another storage type, the values
// chosen by RTN, AWQ, GPTQ or AWQ+GPTQ (quant/quantize_model.h), with a
// calibration pass over a text for the methods that need one.
#include <fmt/format.h>

#include <cstdio>

#include "cli/command.h"
#include "cli/progress.h"
#include "cli/text_file.h"
#include "core/error.h"
#include "model/model.h"
#include "model/tokenizer.h"
#include "quant/quantize_model.h"

namespace tessera::cli {
namespace {

struct QuantizeArgs {
  std::string model, out, type = "q4_0", method = "rtn", calib;
  int bits = 0;
  int64_t calib_tokens = 16384, calib_ctx = 128, group = 0;
  std::vector<std::string> keep;
  bool act_order = false, no_clip = false;
  double damp = 0.01;
  int threads = 0;
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
  sub.add_option("--type", a->type, "Storage type of the matrices: q4_0, q8_0, f16, bf16, f32")->capture_default_str();
  sub.add_option("--bits", a->bits, "Value bits inside the type (3: 3-bit values in Q4_0 blocks; 0: the type's own)")
      ->capture_default_str();
  sub.add_option("--method", a->method, "rtn, awq, gptq, awq+gptq")->capture_default_str();
  sub.add_option("--calib", a->calib, "Calibration text (default: the short stories built in, src/quant/default_calibration.cc)");
  sub.add_option("--calib-tokens", a->calib_tokens, "Calibration tokens at most")->capture_default_str();
  sub.add_option("--calib-ctx", a->calib_ctx, "Tokens per calibration chunk")->capture_default_str();
  sub.add_option("--group", a->group, "Weights per scale (must be the type's block: 32)");
  sub.add_option("--keep", a->keep, "NAME=TYPE: store tensor NAME as TYPE (repeatable)");
  sub.add_flag("--act-order", a->act_order, "GPTQ: quantize columns by decreasing input energy");
  sub.add_option("--damp", a->damp, "GPTQ: dampening, a fraction of mean(diag H)")->capture_default_str();
  sub.add_flag("--no-clip", a->no_clip, "AWQ: no clipping search");
  sub.add_option("-t,--threads", a->threads, "Threads (default: all cores)");
  return [a]() {
    quant::QuantizeOptions opt;
    opt.type = parse_type_option(a->type);
    opt.bits = a->bits;
    opt.method = quant::parse_method(a->method);
    opt.group = a->group;
    opt.gptq.act_order = a->act_order;
    opt.gptq.damp = a->damp;
    opt.awq.clip = !a->no_clip;
    for (const std::string& k : a->keep) {
      const size_t eq = k.find('=');
      TESSERA_CHECK(eq != std::string::npos && eq > 0, kInvalidArgument, "--keep {}: expected NAME=TYPE", k);
      opt.keep.emplace_back(k.substr(0, eq), parse_type_option(k.substr(eq + 1)));
    }
    ThreadPool pool(a->threads);
    const LoadedModel lm = load_model(a->model);
    quant::Calibration cal;
    if (quant::needs_calibration(opt.method)) {
      const std::string path = a->calib.empty() ? std::string("(built-in text)") : a->calib;
      const auto tok = load_tokenizer(lm);
      const std::string text = a->calib.empty() ? std::string(quant::default_calibration_text()) : read_text_file(a->calib);
      const std::vector<int32_t> tokens = tok->encode(text, /*add_special=*/false);
      quant::CalibrationOptions co;
      co.n_ctx = a->calib_ctx;
      co.max_tokens = a->calib_tokens;
      co.bos = tok->add_bos() ? tok->bos_id() : -1;
      ProgressBar bar("calibration");
      cal = quant::calibrate(*lm.model, tokens, co, pool, [&](int64_t d, int64_t n) { bar.update(d, n); });
      bar.finish();
      std::fprintf(stderr, "calibration: %lld tokens of %s\n", static_cast<long long>(cal.n_tokens), path.c_str());
      if (cal.n_tokens < 1024) {
        std::fprintf(stderr, "warning: %lld calibration tokens is few: statistics this thin fit the text, not the model\n",
                     static_cast<long long>(cal.n_tokens));
      }
    }
    ProgressBar bar("quantize");
    const quant::QuantizeResult r = quant::quantize_model(
        *lm.file, a->out, opt, quant::needs_calibration(opt.method) ? &cal : nullptr, pool,
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
    return 0;
  };
});

}  // namespace
}  // namespace tessera::cli
