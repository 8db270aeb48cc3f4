// bench/speculative: speculative decoding against plain decoding, same
// engine, same model, alternating rounds. Prints JSON.
//
//  copy:    batch 1, a prompt that repeats a passage of real text (the
//           model's induction copies it): ngram drafts, adaptive and fixed k.
//  oracle:  batch 1, a drafter that knows the target's greedy continuation
//           and proposes each next token right with probability a (0.2 ..
//           0.9), fixed k: the measured speed-up beside the one Leviathan et
//           al.'s formula predicts from the engine's measured step costs,
//           E[tokens per verify] * t(1) / t(1 + k); the formula's best k
//           (1 .. --k) and the adaptive policy's measured speed-up beside.
//  templated: 4 prompts asked 4 times each, one at a time: later answers
//           repeat earlier ones (suffix's shared index), ngram and suffix.
//  draft:   batch 1, plain story openings and the copy prompt: a draft
//           model (--draft-model) and/or skipped layers (--layers LIST or
//           "auto"), adaptive and fixed k.
//  load:    1, 4, 16, 64 concurrent clients (closed loop) of a mixed
//           workload (half copy prompts, half plain story openings), adaptive
//           ngram, suffix (and draft, layers when given) against off: total
//           output tokens/s.
//
//   tessera_speculative_bench --model F [--text FILE] [--threads 2] [--rounds 3]
//       [--tokens 128] [--k 6] [--concurrency 1,4,16,64] [--skip copy,templated,oracle,draft,load]
//       [--min-gain G] [--draft-model FILE] [--layers LIST|auto] [--oracle-a 0.2,0.4,0.6,0.8,0.9]
#include <fstream>
#include <random>
#include <sstream>

#include "bench/bench_util.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "spec/model_drafter.h"

using namespace tessera;

namespace {

// Proposes the reference continuation, each token right with probability a.
class OracleDrafter final : public spec::Drafter {
 public:
  OracleDrafter(std::vector<int32_t> reference, double a, int32_t n_vocab, uint32_t seed)
      : ref_(std::move(reference)), a_(a), n_vocab_(n_vocab), rng_(seed) {}
  const char* name() const override { return "oracle"; }
  void propose(std::span<const spec::DraftQuery> qs) override {
    std::uniform_real_distribution<double> u(0.0, 1.0);
    for (const spec::DraftQuery& q : qs) {
      q.out->clear();
      const size_t at = q.tokens.size();
      for (int32_t i = 0; i < q.max_tokens && at + i < ref_.size(); ++i) {
        const int32_t right = ref_[at + i];
        q.out->push_back(u(rng_) < a_ ? right : (right + 1) % n_vocab_);
      }
    }
  }

 private:
  std::vector<int32_t> ref_;
  double a_;
  int32_t n_vocab_;
  std::mt19937 rng_;
};

struct One {
  double seconds = 0;
  int64_t tokens = 0;
  engine::EngineStats stats;
  std::vector<int32_t> output;
};

One run_one(const Model& m, const Tokenizer& tok, engine::EngineConfig cfg, const std::vector<int32_t>& prompt,
            int32_t n) {
  engine::Engine e(m, &tok, cfg);
  engine::SamplingParams p;
  p.temperature = 0.0f;
  p.ignore_eos = true;
  p.max_tokens = n;
  One r;
  e.add_request(prompt, p);
  bool first = true;
  engine::Clock::time_point t_first;
  while (e.has_unfinished()) {
    for (const engine::RequestOutput& o : e.step()) {
      if (first && !o.new_tokens.empty()) {
        t_first = engine::Clock::now();  // decode speed excludes the prompt
        first = false;
      }
      r.output.insert(r.output.end(), o.new_tokens.begin(), o.new_tokens.end());
    }
  }
  r.seconds = std::chrono::duration<double>(engine::Clock::now() - t_first).count();
  r.tokens = static_cast<int64_t>(r.output.size()) - 1;
  r.stats = e.stats();
  return r;
}

double median(std::vector<double> v) { return bench::percentile(std::move(v), 0.5); }

nlohmann::json spread(const std::vector<double>& v) {
  return {{"median", median(v)}, {"min", *std::min_element(v.begin(), v.end())},
          {"max", *std::max_element(v.begin(), v.end())}};
}

}  // namespace

int main(int argc, char** argv) {
  bench::Args args(argc, argv);
  const std::string path = args.str("model");
  if (path.empty()) {
    std::fprintf(stderr, "usage: %s --model FILE [--text FILE] [--threads T] [--rounds R] ...\n", argv[0]);
    return 1;
  }
  try {
    const LoadedModel lm = load_model(path);
    const auto tok = Tokenizer::from_gguf(*lm.file);
    const Model& m = *lm.model;
    const int32_t V = static_cast<int32_t>(m.config().n_vocab);
    const int rounds = static_cast<int>(args.num("rounds", 3));
    const int32_t n = static_cast<int32_t>(args.num("tokens", 128));
    const int32_t k = static_cast<int32_t>(args.num("k", 6));
    const std::string skip = args.str("skip");
    std::string text = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. "
                       "One day, she saw a big red ball under a tree. She ran to the ball and picked it up. ";
    if (!args.str("text").empty()) {
      std::ifstream f(args.str("text"));
      std::stringstream ss;
      ss << f.rdbuf();
      text = ss.str().substr(0, 600);
    }
    // The passage twice and its start a third time: continuing means copying.
    const std::string copy_prompt = text + "\n" + text + "\n" + text.substr(0, text.size() / 3);
    const std::vector<int32_t> copy = tok->encode(copy_prompt, true, false);

    engine::EngineConfig base;
    base.threads = static_cast<int>(args.num("threads", 2));
    base.max_model_len = std::min<int64_t>(m.config().n_ctx_train, 2048);
    base.seed = 1;
    base.spec_k = k;
    if (!args.str("min-gain").empty()) base.spec_min_gain = std::atof(args.str("min-gain").c_str());
    // The model drafters, when asked for.
    LoadedModel draft;
    if (!args.str("draft-model").empty()) {
      draft = load_model(args.str("draft-model"));
      base.spec_draft_model = draft.model.get();
    }
    const std::string layers = args.str("layers");
    if (!layers.empty() && layers != "auto") base.spec_skip_layers = spec::parse_layer_list(layers, m.config().n_layer);
    std::vector<spec::Method> model_methods;
    if (draft.model) model_methods.push_back(spec::Method::kDraft);
    if (!layers.empty()) model_methods.push_back(spec::Method::kLayers);
    nlohmann::json out = {{"benchmark", "speculative"}, {"model", path}, {"threads", base.threads},
                          {"isa", std::string(isa_name(active_isa()))}, {"tokens", n}, {"k", k},
                          {"copy_prompt_tokens", copy.size()}, {"draft_model", args.str("draft-model")},
                          {"layers", layers}};

    if (skip.find("copy") == std::string::npos) {
      std::vector<double> off, adaptive, fixed, acc_a, acc_f, len_a, len_f;
      for (int r = 0; r < rounds; ++r) {
        engine::EngineConfig c = base;
        const One a = run_one(m, *tok, c, copy, n);
        c.spec_method = spec::Method::kNgram;
        const One b = run_one(m, *tok, c, copy, n);
        c.spec_adaptive = false;
        const One f = run_one(m, *tok, c, copy, n);
        if (a.output != b.output || a.output != f.output) throw std::runtime_error("outputs differ with speculation");
        off.push_back(a.tokens / a.seconds);
        adaptive.push_back(b.tokens / b.seconds);
        fixed.push_back(f.tokens / f.seconds);
        auto acc = [](const One& o) {
          return static_cast<double>(o.stats.spec_accepted_tokens_total) / std::max<int64_t>(o.stats.spec_drafted_tokens_total, 1);
        };
        auto len = [](const One& o) {
          return static_cast<double>(o.stats.spec_accepted_tokens_total) / std::max<int64_t>(o.stats.spec_verify_steps_total, 1);
        };
        acc_a.push_back(acc(b));
        acc_f.push_back(acc(f));
        len_a.push_back(len(b));
        len_f.push_back(len(f));
      }
      std::vector<double> ra, rf;
      for (size_t i = 0; i < off.size(); ++i) ra.push_back(adaptive[i] / off[i]), rf.push_back(fixed[i] / off[i]);
      out["copy"] = {{"off_tps", spread(off)},
                     {"ngram_adaptive", {{"tps", spread(adaptive)}, {"speedup", spread(ra)}, {"acceptance", median(acc_a)},
                                         {"mean_accepted_per_verify", median(len_a)}}},
                     {"ngram_fixed_k", {{"tps", spread(fixed)}, {"speedup", spread(rf)}, {"acceptance", median(acc_f)},
                                        {"mean_accepted_per_verify", median(len_f)}}}};
    }

    if (skip.find("templated") == std::string::npos) {
      // Templated answers: 4 prompts, each asked 4 times, one request at a
      // time (a later request's answer repeats an earlier one's).
      const std::vector<std::string> prompts = {"One day, a big bird", "Tom had a red ball.", "The sun was hot and",
                                                "Sam and Mia went to"};
      std::vector<bench::Job> jobs;
      for (int rep = 0; rep < 4; ++rep) {
        for (const std::string& p : prompts) jobs.push_back({tok->encode(p, true, false), n});
      }
      std::map<spec::Method, std::vector<double>> tps, ratio, acc;
      for (int r = 0; r < rounds; ++r) {
        for (const spec::Method method : {spec::Method::kNone, spec::Method::kNgram, spec::Method::kSuffix}) {
          engine::EngineConfig c = base;
          c.spec_method = method;
          engine::Engine e(m, tok.get(), c);
          const bench::RunStats st =
              bench::run_closed_loop(e, jobs, 1, [&](int, int j) { return j < static_cast<int>(jobs.size()) ? j : -1; });
          tps[method].push_back(static_cast<double>(st.output_tokens) / st.seconds);
          ratio[method].push_back(tps[method].back() / tps[spec::Method::kNone].back());
          acc[method].push_back(static_cast<double>(st.engine.spec_accepted_tokens_total) /
                                std::max<int64_t>(st.engine.spec_drafted_tokens_total, 1));
        }
      }
      nlohmann::json t = {{"requests", jobs.size()}, {"off_tps", spread(tps[spec::Method::kNone])}};
      for (const spec::Method method : {spec::Method::kNgram, spec::Method::kSuffix}) {
        t[spec::method_name(method)] = {{"tps", spread(tps[method])}, {"ratio", spread(ratio[method])},
                                        {"acceptance", median(acc[method])}};
      }
      out["templated"] = t;
    }

    if (skip.find("oracle") == std::string::npos) {
      // The target's own greedy continuation of a plain prompt.
      const std::vector<int32_t> prompt = tok->encode("Once upon a time", true, false);
      engine::EngineConfig c = base;
      const One ref = run_one(m, *tok, c, prompt, n + k + 2);
      std::vector<int32_t> full = prompt;
      full.insert(full.end(), ref.output.begin(), ref.output.end());
      // Step costs as the engine measures them (one engine, calibrated).
      engine::EngineConfig cc = base;
      cc.spec_method = spec::Method::kNgram;
      const engine::Engine probe(m, tok.get(), cc);
      const double t1 = probe.step_cost().predict(1), tk = probe.step_cost().predict(1 + k);
      nlohmann::json steps = nlohmann::json::object();
      for (int64_t j = 1; j <= 1 + k; ++j) steps[std::to_string(j)] = probe.step_cost().predict(j);
      nlohmann::json rows = nlohmann::json::array();
      std::vector<double> levels;
      for (const std::string& v : bench::split(args.str("oracle-a", "0.2,0.4,0.6,0.8,0.9"), ',')) {
        levels.push_back(std::stod(v));
      }
      for (const double a : levels) {
        std::vector<double> sp, sp_adaptive, tps_on, k_adaptive, acc_adaptive;
        double acc = 0;
        for (int r = 0; r < rounds; ++r) {
          engine::EngineConfig p = base;
          const One off = run_one(m, *tok, p, prompt, n);
          // A fresh random stream per round and mode: a run of 64 tokens
          // verifies only tens of drafts, so one fixed stream would repeat
          // the same luck in every round.
          p.spec_drafter = std::make_shared<OracleDrafter>(full, a, V, static_cast<uint32_t>(11 + 2 * r));
          p.spec_adaptive = false;
          const One on = run_one(m, *tok, p, prompt, n);
          if (on.output != off.output) throw std::runtime_error("oracle run differs from the plain run");
          // The same drafter under the adaptive policy (k from measured costs and acceptance).
          p.spec_drafter = std::make_shared<OracleDrafter>(full, a, V, static_cast<uint32_t>(12 + 2 * r));
          p.spec_adaptive = true;
          const One ad = run_one(m, *tok, p, prompt, n);
          if (ad.output != off.output) throw std::runtime_error("adaptive oracle run differs from the plain run");
          sp.push_back((on.tokens / on.seconds) / (off.tokens / off.seconds));
          sp_adaptive.push_back((ad.tokens / ad.seconds) / (off.tokens / off.seconds));
          k_adaptive.push_back(static_cast<double>(ad.stats.spec_drafted_tokens_total) /
                               std::max<int64_t>(ad.stats.spec_verify_steps_total, 1));
          acc_adaptive.push_back(static_cast<double>(ad.stats.spec_accepted_tokens_total) /
                                 std::max<int64_t>(ad.stats.spec_drafted_tokens_total, 1));
          tps_on.push_back(on.tokens / on.seconds);
          acc = static_cast<double>(on.stats.spec_accepted_tokens_total) / std::max<int64_t>(on.stats.spec_verify_steps_total, 1);
        }
        const double e = 1.0 + spec::expected_extra_tokens(a, k);
        // Leviathan et al.'s best case from the same measured costs: the
        // fixed k (1 .. --k) that maximises E[tokens per verify] t(1) / t(1 + k).
        double best = 1.0;
        int64_t best_k = 0;
        for (int64_t j = 1; j <= k; ++j) {
          const double s = (1.0 + spec::expected_extra_tokens(a, j)) * t1 / probe.step_cost().predict(1 + j);
          if (s > best) best = s, best_k = j;
        }
        rows.push_back({{"acceptance_set", a}, {"accepted_per_verify_measured", acc},
                        {"accepted_per_verify_expected", e - 1.0}, {"tps", spread(tps_on)},
                        {"speedup_measured", spread(sp)}, {"speedup_predicted", e * t1 / tk},
                        {"speedup_adaptive_measured", spread(sp_adaptive)},
                        {"adaptive_mean_k", median(k_adaptive)}, {"adaptive_acceptance", median(acc_adaptive)},
                        {"speedup_best_k_predicted", best}, {"best_k", best_k}});
      }
      out["oracle"] = {{"step_seconds_1", t1}, {"step_seconds_1_plus_k", tk}, {"step_seconds", steps}, {"rows", rows}};
    }

    if (skip.find("draft") == std::string::npos && !model_methods.empty()) {
      // Batch 1: each opening and the copy prompt, off / adaptive / fixed k.
      const std::vector<std::pair<std::string, std::vector<int32_t>>> prompts = {
          {"plain", tok->encode("Once upon a time, there was a little girl named Lily.", true, false)},
          {"plain", tok->encode("Tom had a red ball.", true, false)},
          {"copy", copy}};
      nlohmann::json d;
      for (const spec::Method method : model_methods) {
        nlohmann::json rows = nlohmann::json::array();
        for (const auto& [kind, prompt] : prompts) {
          std::vector<double> off, adaptive, fixed, ra, rf, acc_f, len_f, drafted_a, acc_a;
          for (int r = 0; r < rounds; ++r) {
            engine::EngineConfig c = base;
            const One a = run_one(m, *tok, c, prompt, n);
            c.spec_method = method;
            const One b = run_one(m, *tok, c, prompt, n);
            c.spec_adaptive = false;
            const One f = run_one(m, *tok, c, prompt, n);
            if (a.output != b.output || a.output != f.output) throw std::runtime_error("outputs differ with drafts");
            off.push_back(a.tokens / a.seconds);
            adaptive.push_back(b.tokens / b.seconds);
            fixed.push_back(f.tokens / f.seconds);
            ra.push_back(adaptive.back() / off.back());
            rf.push_back(fixed.back() / off.back());
            acc_f.push_back(static_cast<double>(f.stats.spec_accepted_tokens_total) /
                            std::max<int64_t>(f.stats.spec_drafted_tokens_total, 1));
            len_f.push_back(static_cast<double>(f.stats.spec_accepted_tokens_total) /
                            std::max<int64_t>(f.stats.spec_verify_steps_total, 1));
            drafted_a.push_back(static_cast<double>(b.stats.spec_drafted_tokens_total));
            acc_a.push_back(static_cast<double>(b.stats.spec_accepted_tokens_total) /
                            std::max<int64_t>(b.stats.spec_drafted_tokens_total, 1));
          }
          rows.push_back({{"prompt", kind}, {"prompt_tokens", prompt.size()}, {"off_tps", spread(off)},
                          {"adaptive", {{"tps", spread(adaptive)}, {"speedup", spread(ra)},
                                        {"drafted", median(drafted_a)}, {"acceptance", median(acc_a)}}},
                          {"fixed_k", {{"tps", spread(fixed)}, {"speedup", spread(rf)}, {"acceptance", median(acc_f)},
                                       {"mean_accepted_per_verify", median(len_f)}}}});
        }
        d[spec::method_name(method)] = rows;
      }
      out["draft"] = d;
    }

    if (skip.find("load") == std::string::npos) {
      // Mixed workload: copy prompts and plain openings, greedy, n tokens.
      std::vector<bench::Job> jobs;
      const std::vector<std::string> openings = {"One day, a big bird", "Tom had a red ball.", "The sun was hot and",
                                                 "Sam and Mia went to"};
      for (int i = 0; i < 256; ++i) {
        jobs.push_back({i % 2 == 0 ? copy : tok->encode(openings[(i / 2) % openings.size()], true, false), n});
      }
      nlohmann::json rows = nlohmann::json::array();
      std::vector<int> levels;
      for (const std::string& v : bench::split(args.str("concurrency", "1,4,16,64"), ',')) levels.push_back(std::stoi(v));
      for (const int clients : levels) {
        const int per_client = std::max(1, 64 / clients);
        const int total = std::min<int>(static_cast<int>(jobs.size()), clients * per_client);
        // Per method: tokens/s, ratio to off in the same round, acceptance.
        std::vector<spec::Method> methods = {spec::Method::kNone, spec::Method::kNgram, spec::Method::kSuffix};
        methods.insert(methods.end(), model_methods.begin(), model_methods.end());
        std::map<spec::Method, std::vector<double>> tps, ratio, acc;
        for (int r = 0; r < rounds; ++r) {
          for (const spec::Method method : methods) {
            engine::EngineConfig c = base;
            c.max_num_seqs = std::max(clients, 1);
            c.spec_method = method;
            engine::Engine e(m, tok.get(), c);
            const bench::RunStats st = bench::run_closed_loop(
                e, std::vector<bench::Job>(jobs.begin(), jobs.begin() + total), clients,
                [&](int cl, int j) { return j < per_client ? cl * per_client + j : -1; });
            tps[method].push_back(static_cast<double>(st.output_tokens) / st.seconds);
            ratio[method].push_back(tps[method].back() / tps[spec::Method::kNone].back());
            acc[method].push_back(static_cast<double>(st.engine.spec_accepted_tokens_total) /
                                  std::max<int64_t>(st.engine.spec_drafted_tokens_total, 1));
          }
        }
        nlohmann::json row = {{"clients", clients}, {"requests", total}, {"off_tps", spread(tps[spec::Method::kNone])}};
        for (const spec::Method method : methods) {
          if (method == spec::Method::kNone) continue;
          row[spec::method_name(method)] = {{"tps", spread(tps[method])}, {"ratio", spread(ratio[method])},
                                            {"acceptance", median(acc[method])}};
        }
        rows.push_back(row);
      }
      out["load"] = rows;
    }
    std::printf("%s\n", out.dump(2).c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
