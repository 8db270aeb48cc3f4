// tessera generate: continue a prompt. Only the continuation goes to stdout,
// streamed as it is produced; logs and timings go to stderr.
#include <cstdio>

#include "cli/command.h"
#include "core/memory.h"
#include "cli/common_options.h"
#include "core/log.h"
#include "engine/prompt_cache.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace tessera::cli {
namespace {

struct GenerateArgs {
  RunOptions run;
  SamplingOptions sampling;
  SpecOptions spec;
  AdapterOptions adapters;
  KvPolicyOptions kv_policy;
  std::string prompt;
  std::string prompt_schema;         // Prompt Cache schema (JSON)
  std::vector<std::string> modules;  // modules to import, in schema order
};

TESSERA_COMMAND("generate", "Generate a continuation of a prompt", [](CLI::App& sub) {
  auto a = std::make_shared<GenerateArgs>();
  a->run.max_num_seqs = 1;
  a->run.add_to(sub, /*engine_options=*/false, /*model_optional=*/true);
  a->sampling.add_to(sub);
  a->spec.add_to(sub);
  a->adapters.add_to(sub, AdapterScope::kEngine);
  a->kv_policy.add_to(sub);
  sub.add_option("-p,--prompt", a->prompt, "Prompt text (after the modules, with --prompt-schema)")->required();
  sub.add_option("--prompt-schema", a->prompt_schema, "Prompt Cache schema (JSON): modules whose attention states are reused");
  sub.add_option("--modules", a->modules, "Modules of --prompt-schema to import, in schema order")->delimiter(',');
  return [a]() {
    const auto t0 = engine::Clock::now();
    const kv::KvPolicy kv_policy = a->kv_policy.get(a->run.tp);
    check_prompt_cache_tp(a->prompt_schema, a->run.tp);
    a->run.resolve_model();
    const LoadedModel lm = a->run.load();
    const auto tok = load_tokenizer(lm);
    engine::EngineConfig ec = a->run.engine_config(lm);
    a->spec.apply(ec, *lm.model);
    a->adapters.apply(ec, *lm.model);
    engine::Engine eng(*lm.model, tok.get(), ec);
    std::optional<engine::PromptLayout> layout;
    std::vector<int32_t> prompt;
    if (!a->prompt_schema.empty()) {
      ThreadPool pool(a->run.threads);
      const engine::PromptCache pc(*lm.model, *tok, engine::PromptSchema::load(a->prompt_schema, *tok), ec.kv_type, pool);
      layout = pc.compose(a->modules, tok->encode(a->prompt, /*add_special=*/false, /*parse_special=*/true));
      prompt = layout->tokens;
    } else {
      TESSERA_CHECK(a->modules.empty(), kInvalidArgument, "--modules needs --prompt-schema");
      prompt = tok->encode(a->prompt, /*add_special=*/true, /*parse_special=*/true);
    }
    const int64_t ctx = eng.config().max_model_len;
    engine::SamplingParams p = a->sampling.params(ctx - (layout ? layout->positions.back() + 1 : static_cast<int64_t>(prompt.size())));
    p.kv_policy = kv_policy;  // a bounded one is not capped by the context: -n as long as wanted
    int64_t n_out = 0, n_prompt = 0;  // n_prompt: with a soft prompt's virtual tokens
    double ttft = 0;
    std::string finish, error;
    auto on_output = [&](const engine::RequestOutput& o) {
      if (!o.text.empty()) {
        std::fwrite(o.text.data(), 1, o.text.size(), stdout);
        std::fflush(stdout);
      }
      n_out = o.num_output_tokens;
      n_prompt = o.num_prompt_tokens;
      ttft = o.time_to_first_token;
      if (o.finished) finish = engine::finish_reason_name(o.finish_reason);
      if (o.finished && o.finish_reason == engine::FinishReason::kError) error = o.error;
    };
    if (layout) {
      eng.add_request(std::move(*layout), p, on_output);
    } else {
      eng.add_request(prompt, p, on_output);
    }
    const auto t1 = engine::Clock::now();
    while (eng.has_unfinished()) eng.step();
    const auto t2 = engine::Clock::now();
    std::printf("\n");
    const double load = std::chrono::duration<double>(t1 - t0).count();
    const double total = std::chrono::duration<double>(t2 - t1).count();
    const double gen = total - ttft;
    TESSERA_LOG_INFO("load {:.2f} s; prompt {} tokens in {:.3f} s ({:.1f} t/s); generated {} tokens in {:.3f} s "
                     "({:.1f} t/s); finish: {}; isa {}; peak RSS {} MiB",
                     load, n_prompt, ttft, static_cast<double>(n_prompt) / std::max(ttft, 1e-9), n_out, gen,
                     n_out > 1 ? (n_out - 1) / std::max(gen, 1e-9) : 0.0, finish, isa_name(active_isa()),
                     peak_rss_bytes() >> 20);
    if (ec.spec_method != spec::Method::kNone) {
      const engine::EngineStats st = eng.stats();
      TESSERA_LOG_INFO("speculative ({}): drafted {}, accepted {} ({:.1f}%), {:.2f} tokens per target step",
                       spec::method_name(ec.spec_method), st.spec_drafted_tokens_total, st.spec_accepted_tokens_total,
                       100.0 * st.spec_accepted_tokens_total / std::max<int64_t>(st.spec_drafted_tokens_total, 1),
                       static_cast<double>(st.generation_tokens_total - 1) / std::max<int64_t>(st.steps_total - 1, 1));
    }
    // The request failed (a step the engine could not run): the error, and
    // a failing exit status, after whatever text came before it.
    TESSERA_CHECK(error.empty() && finish != "error", kInternal, "{}", error.empty() ? "the request failed" : error);
    return 0;
  };
});

}  // namespace
}  // namespace tessera::cli
