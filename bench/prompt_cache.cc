// bench/prompt_cache: Prompt Cache modules against full recomputation, on a
// three-module schema (bench/data/prompt_schema.json by default): time to
// first token, and the quality cost of modules not attending to each other:
// KL(full || cached) of next-token distributions and the perplexity of the
// full model's greedy continuation under each, teacher-forced. Prints JSON.
//
//   tessera_prompt_cache_bench --model F [--schema S.json] [--threads 2] [--continuation 32]
#include <chrono>
#include <cmath>

#include "bench/bench_util.h"
#include "engine/prompt_cache.h"
#include "engine/sampler.h"
#include "engine/sequence_runner.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

using namespace tessera;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// log-softmax of a row.
std::vector<double> log_probs(std::span<const float> row) {
  const double lse = engine::log_sum_exp(row);
  std::vector<double> out(row.size());
  for (size_t i = 0; i < row.size(); ++i) out[i] = row[i] - lse;
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  bench::Args args(argc, argv);
  const std::string path = args.str("model");
  if (path.empty()) {
    std::fprintf(stderr, "usage: %s --model FILE [--schema FILE] [--threads T] [--continuation N]\n", argv[0]);
    return 1;
  }
  try {
    const LoadedModel lm = load_model(path);
    const auto tok = Tokenizer::from_gguf(*lm.file);
    ThreadPool pool(static_cast<int>(args.num("threads", 2)));
    const std::string schema_path = args.str("schema", "bench/data/prompt_schema.json");
    engine::PromptSchema schema = engine::PromptSchema::load(schema_path, *tok);
    const auto tb = std::chrono::steady_clock::now();
    engine::PromptCache pc(*lm.model, *tok, schema, DType::kF16, pool);
    const double build_s = seconds_since(tb);
    const int cont = static_cast<int>(args.num("continuation", 32));
    const int reps = static_cast<int>(args.num("reps", 5));
    const int64_t V = lm.model->config().n_vocab;
    const std::vector<std::vector<std::string>> imports = {
        {schema.modules[0].name}, {schema.modules[1].name}, {schema.modules[2].name},
        {schema.modules[0].name, schema.modules[1].name}, {schema.modules[0].name, schema.modules[2].name},
        {schema.modules[1].name, schema.modules[2].name},
        {schema.modules[0].name, schema.modules[1].name, schema.modules[2].name}};
    const std::vector<std::string> questions = {" One day,", " Then", " The next morning,"};
    engine::SequenceRunnerOptions ro{.n_ctx = schema.end_pos + 256, .kv_type = DType::kF16};
    engine::SequenceRunner full(*lm.model, ro, pool), cached(*lm.model, ro, pool);
    nlohmann::json rows = nlohmann::json::array();
    std::vector<double> kl_all, ttft_full, ttft_cached;
    double nll_full = 0, nll_cached = 0;
    int64_t n_scored = 0;
    for (const auto& imp : imports) {
      for (const std::string& q : questions) {
        const engine::PromptLayout layout = pc.compose(imp, tok->encode(q, false));
        const int64_t n_pre = layout.preloaded->n_tokens;
        std::vector<double> tf, tc;
        std::vector<float> first_full, first_cached;
        for (int r = 0; r < reps; ++r) {
          full.reset();
          auto t0 = std::chrono::steady_clock::now();
          auto lf = full.append(layout.tokens);
          tf.push_back(seconds_since(t0));
          first_full.assign(lf.begin(), lf.end());
          cached.reset();
          t0 = std::chrono::steady_clock::now();
          cached.load(*layout.preloaded);
          auto lc = cached.append(std::span<const int32_t>(layout.tokens).subspan(n_pre), false,
                                  std::span<const int32_t>(layout.positions).subspan(n_pre));
          tc.push_back(seconds_since(t0));
          first_cached.assign(lc.begin(), lc.end());
        }
        // Teacher-force the full model's greedy continuation through both.
        std::vector<std::vector<float>> rows_full = {first_full}, rows_cached = {first_cached};
        std::vector<int32_t> conti;
        int32_t pos = layout.positions.back();
        for (int i = 0; i < cont; ++i) {
          const auto& last = rows_full.back();
          const int32_t t = static_cast<int32_t>(std::max_element(last.begin(), last.end()) - last.begin());
          conti.push_back(t);
          ++pos;
          const int32_t ids[1] = {t};
          const int32_t full_pos[1] = {static_cast<int32_t>(full.n_past())};
          const int32_t cached_pos[1] = {pos};
          auto a = full.append(ids, false, full_pos);
          rows_full.emplace_back(a.begin(), a.end());
          auto b = cached.append(ids, false, cached_pos);
          rows_cached.emplace_back(b.begin(), b.end());
        }
        double kl_sum = 0;
        for (int i = 0; i < cont; ++i) {
          const auto pf = log_probs(rows_full[i]), pcd = log_probs(rows_cached[i]);
          double kl = 0;
          for (int64_t v = 0; v < V; ++v) kl += std::exp(pf[v]) * (pf[v] - pcd[v]);
          kl_sum += kl;
          kl_all.push_back(kl);
          nll_full -= pf[conti[i]];
          nll_cached -= pcd[conti[i]];
          ++n_scored;
        }
        const double f = bench::percentile(tf, 0.5), c = bench::percentile(tc, 0.5);
        ttft_full.push_back(f);
        ttft_cached.push_back(c);
        std::string name;
        for (const auto& m : imp) name += (name.empty() ? "" : "+") + m;
        rows.push_back({{"modules", name}, {"free_text", q}, {"prompt_tokens", layout.tokens.size()},
                        {"preloaded_tokens", n_pre}, {"ttft_full_ms", f * 1e3}, {"ttft_cached_ms", c * 1e3},
                        {"speedup", f / c}, {"mean_kl_nats", kl_sum / cont}});
      }
    }
    double kl_mean = 0;
    for (double k : kl_all) kl_mean += k;
    kl_mean /= static_cast<double>(kl_all.size());
    nlohmann::json out = {{"benchmark", "prompt_cache"}, {"model", path}, {"schema", schema_path},
                          {"modules", schema.modules.size()}, {"schema_positions", schema.end_pos},
                          {"module_kv_bytes", pc.bytes()}, {"module_build_s", build_s}, {"threads", pool.size()},
                          {"continuation_tokens", cont}, {"prompts", rows},
                          {"ttft_full_p50_ms", bench::percentile(ttft_full, 0.5) * 1e3},
                          {"ttft_cached_p50_ms", bench::percentile(ttft_cached, 0.5) * 1e3},
                          {"ttft_p50_speedup", bench::percentile(ttft_full, 0.5) / bench::percentile(ttft_cached, 0.5)},
                          {"kl_full_vs_cached_mean_nats", kl_mean},
                          {"kl_p90_nats", bench::percentile(kl_all, 0.9)},
                          {"continuation_ppl_full", std::exp(nll_full / static_cast<double>(n_scored))},
                          {"continuation_ppl_cached", std::exp(nll_cached / static_cast<double>(n_scored))}};
    std::printf("%s\n", out.dump(2).c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
