// tessera perplexity: llama-perplexity's method (see engine/perplexity.h).
#include <nlohmann/json.hpp>

#include <cstdio>

#include "cli/command.h"
#include "cli/common_options.h"
#include "cli/progress.h"
#include "engine/perplexity.h"
#include "model/model.h"
#include "model/tokenizer.h"

namespace tessera::cli {
namespace {

struct PerplexityArgs {
  RunOptions run;
  std::string file;
  int64_t batch = 512;
  int64_t chunks = -1;
  bool json = false;
};

std::string read_text(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  TESSERA_CHECK(f != nullptr, kIo, "cannot open '{}'", path);
  std::string s;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
  std::fclose(f);
  return s;
}

TESSERA_COMMAND("perplexity", "Perplexity of a text file (llama-perplexity's method)", [](CLI::App& sub) {
  auto a = std::make_shared<PerplexityArgs>();
  a->run.ctx = 512;
  a->run.add_to(sub, /*engine_options=*/false);
  sub.add_option("-f,--file", a->file, "Text file")->required();
  sub.add_option("-b,--batch", a->batch, "Tokens per forward pass")->capture_default_str();
  sub.add_option("--chunks", a->chunks, "Evaluate at most this many chunks (-1: all)")->capture_default_str();
  sub.add_flag("--json", a->json, "Print the result as JSON");
  return [a]() {
    const LoadedModel lm = load_model(a->run.model);
    const auto tok = Tokenizer::from_gguf(*lm.file);
    const std::string text = read_text(a->file);
    const std::vector<int32_t> tokens = tok->encode(text, /*add_special=*/true);
    ThreadPool pool(a->run.threads);
    engine::PerplexityOptions opt;
    opt.n_ctx = a->run.ctx;
    opt.n_batch = a->batch;
    opt.max_chunks = a->chunks;
    opt.kv_type = a->run.kv_dtype();
    ProgressBar bar("perplexity");
    const auto t0 = std::chrono::steady_clock::now();
    const engine::PerplexityResult r = engine::perplexity(*lm.model, *tok, tokens, opt, pool,
                                                          [&](int64_t done, int64_t total) { bar.update(done, total); });
    bar.finish();
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (a->json) {
      nlohmann::json j = {{"model", a->run.model}, {"file", a->file}, {"n_ctx", opt.n_ctx},
                          {"n_tokens", r.n_tokens}, {"n_chunks", r.n_chunks}, {"n_scored", r.n_scored},
                          {"ppl", r.ppl}, {"ppl_error", r.ppl_error}, {"nll_mean", r.nll_mean},
                          {"seconds", secs}, {"chunk_ppl", r.chunk_ppl}};
      std::printf("%s\n", j.dump(2).c_str());
    } else {
      std::printf("Final estimate: PPL = %.4f +/- %.5f  (%lld chunks of %lld tokens, %lld scored, %.1f s)\n", r.ppl,
                  r.ppl_error, static_cast<long long>(r.n_chunks), static_cast<long long>(opt.n_ctx),
                  static_cast<long long>(r.n_scored), secs);
    }
    return 0;
  };
});

}  // namespace
}  // namespace tessera::cli
