// tessera perplexity: llama-perplexity's method (see eval/perplexity.h).
#include <nlohmann/json.hpp>

#include <cstdio>

#include "cli/command.h"
#include "cli/common_options.h"
#include "cli/progress.h"
#include "cli/text_file.h"
#include "eval/kl_divergence.h"
#include "eval/perplexity.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace tessera::cli {
namespace {

struct PerplexityArgs {
  RunOptions run;
  std::string file;
  int64_t batch = 512;
  int64_t chunks = -1;
  bool json = false;
  std::string kl_base;  // save the model's log-probabilities here
  std::string kl;       // compare against log-probabilities saved here
  AdapterOptions adapters;
  KvPolicyOptions kv_policy;
  bool stream = false;  // the whole file as one sequence
};

void print_kl(const engine::KlResult& k, bool json) {
  if (json) {
    nlohmann::json q = nlohmann::json::object();
    for (size_t i = 0; i < k.kld_quantiles.size(); ++i) {
      q[fmt::format("{:g}", 100.0 * engine::KlResult::kQuantiles[i])] = k.kld_quantiles[i];
    }
    nlohmann::json j = {{"n_rows", k.n_rows}, {"ppl", k.ppl}, {"ppl_base", k.ppl_base}, {"ppl_ratio", k.ppl_ratio},
                        {"mean_ln_ratio", k.mean_ln_ratio}, {"ln_ratio_error", k.ln_ratio_error},
                        {"kld_mean", k.kld_mean}, {"kld_error", k.kld_error}, {"kld_max", k.kld_max},
                        {"kld_min", k.kld_min}, {"kld_percentiles", q}, {"same_top", k.same_top},
                        {"same_top_error", k.same_top_error}, {"rms_dp", k.rms_dp}};
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("====== Perplexity statistics ======\n");
  std::printf("Mean PPL(Q)                   : %10.6f\n", k.ppl);
  std::printf("Mean PPL(base)                : %10.6f\n", k.ppl_base);
  std::printf("Mean ln(PPL(Q)/PPL(base))     : %10.6f +/- %10.6f\n", k.mean_ln_ratio, k.ln_ratio_error);
  std::printf("Mean PPL(Q)/PPL(base)         : %10.6f\n", k.ppl_ratio);
  std::printf("====== KL divergence statistics ======\n");
  std::printf("Mean    KLD: %10.6f +/- %10.6f\n", k.kld_mean, k.kld_error);
  std::printf("Maximum KLD: %10.6f\n", k.kld_max);
  for (size_t i = 0; i < k.kld_quantiles.size(); ++i) {
    const double q = 100.0 * engine::KlResult::kQuantiles[i];
    std::printf("%5.1f%%   KLD: %10.6f\n", q, k.kld_quantiles[i]);
  }
  std::printf("Minimum KLD: %10.6f\n", k.kld_min);
  std::printf("====== Token probability statistics ======\n");
  std::printf("RMS Δp    : %6.3f %%\n", 100.0 * k.rms_dp);
  std::printf("Same top p: %6.3f +/- %5.3f %%\n", 100.0 * k.same_top, 100.0 * k.same_top_error);
}

TESSERA_COMMAND("perplexity", "Perplexity of a text file (llama-perplexity's method)", [](CLI::App& sub) {
  auto a = std::make_shared<PerplexityArgs>();
  a->run.ctx = 512;
  a->run.add_to(sub, /*engine_options=*/false);
  sub.add_option("-f,--file", a->file, "Text file")->required();
  sub.add_option("-b,--batch", a->batch, "Tokens per forward pass")->capture_default_str();
  sub.add_option("--chunks", a->chunks, "Evaluate at most this many chunks (-1: all)")->capture_default_str();
  sub.add_flag("--json", a->json, "Print the result as JSON");
  a->adapters.add_to(sub, AdapterScope::kSequence);
  a->kv_policy.add_to(sub);
  sub.add_flag("--stream", a->stream,
               "The whole file as one continuous sequence (implied by a bounded --kv-policy): every token scored");
  sub.add_option("--kl-base", a->kl_base, "Save this model's log-probabilities of every scored token to FILE");
  sub.add_option("--kl", a->kl, "KL divergence from the base saved in FILE (with --kl-base)")
      ->excludes(sub.get_option("--kl-base"));
  return [a]() {
    const LoadedModel lm = a->run.load();
    const auto tok = load_tokenizer(lm);
    const std::string text = read_text_file(a->file);
    const std::vector<int32_t> tokens = tok->encode(text, /*add_special=*/true);
    ThreadPool pool(a->run.threads);
    engine::PerplexityOptions opt;
    opt.n_ctx = a->run.ctx;
    opt.n_batch = a->batch;
    opt.max_chunks = a->chunks;
    opt.kv_type = a->run.kv_dtype();
    opt.kv_hadamard = a->run.kv_hadamard;
    opt.long_rope = a->run.long_rope_mode();
    const std::shared_ptr<const LoraAdapter> lora = a->adapters.load(*lm.model);
    opt.lora = lora.get();
    opt.kv_policy = a->kv_policy.get(a->run.tp);
    ProgressBar bar("perplexity");
    if (a->stream || opt.kv_policy.bounded()) {
      TESSERA_CHECK(a->kl.empty() && a->kl_base.empty(), kInvalidArgument, "--kl/--kl-base read chunks, not a stream");
      const engine::PerplexityResult r = engine::perplexity_stream(
          *lm.model, tokens, opt, pool, 1000, [&](int64_t done, int64_t total) { bar.update(done, total); });
      bar.finish();
      if (a->json) {
        nlohmann::json j = {{"model", a->run.model}, {"file", a->file}, {"kv_policy", a->kv_policy.policy},
                            {"kv_budget", opt.kv_policy.budget}, {"n_tokens", r.n_tokens}, {"n_scored", r.n_scored},
                            {"ppl", r.ppl}, {"ppl_error", r.ppl_error}, {"nll_mean", r.nll_mean},
                            {"seconds", r.seconds}, {"segment", r.segment}, {"segment_ppl", r.segment_ppl},
                            {"segment_keys", r.segment_keys}};
        std::printf("%s\n", j.dump(2).c_str());
      } else {
        std::printf("Stream (%s): PPL = %.4f +/- %.5f  (%lld tokens scored, %.1f s)\n", a->kv_policy.policy.c_str(),
                    r.ppl, r.ppl_error, static_cast<long long>(r.n_scored), r.seconds);
      }
      return 0;
    }
    const auto t0 = std::chrono::steady_clock::now();
    const auto on_progress = [&](int64_t done, int64_t total) { bar.update(done, total); };
    if (!a->kl.empty()) {
      const engine::KlResult k = engine::kl_divergence(*lm.model, *tok, tokens, opt, pool, a->kl, on_progress);
      bar.finish();
      print_kl(k, a->json);
      return 0;
    }
    const engine::PerplexityResult r =
        a->kl_base.empty() ? engine::perplexity(*lm.model, *tok, tokens, opt, pool, on_progress)
                           : engine::save_kl_base(*lm.model, *tok, tokens, opt, pool, a->kl_base, on_progress);
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
