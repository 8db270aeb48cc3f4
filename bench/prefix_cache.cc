// bench/prefix_cache: time to first token with and without automatic prefix
// caching, on two workloads:
//  (a) sequential requests sharing one ~1000-token prefix, each with its own
//      20-token suffix (the warm time should approach computing the suffix
//      alone, which is also measured);
//  (b) 4 distinct ~1000-token prefixes interleaved across 32 concurrent
//      clients (each sends `--rounds` requests back to back), where caches
//      kept per slot thrash.
// Prints JSON.
//
//   tessera_prefix_cache_bench --model F [--threads 2] [--prefix 1000] [--suffix 20]
//       [--sequential 16] [--clients 32] [--rounds 4] [--emit-workload W.json]
#include <fstream>

#include "bench/bench_util.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

using namespace tessera;

int main(int argc, char** argv) {
  bench::Args args(argc, argv);
  const std::string path = args.str("model");
  if (path.empty()) {
    std::fprintf(stderr, "usage: %s --model FILE [--threads T] ...\n", argv[0]);
    return 1;
  }
  try {
    const LoadedModel lm = load_model(path);
    const auto tok = Tokenizer::from_gguf(*lm.file);
    const int32_t V = static_cast<int32_t>(lm.model->config().n_vocab);
    const int prefix_len = static_cast<int>(args.num("prefix", 1000));
    const int suffix_len = static_cast<int>(args.num("suffix", 20));
    const int n_seq = static_cast<int>(args.num("sequential", 16));
    const int clients = static_cast<int>(args.num("clients", 32));
    const int rounds = static_cast<int>(args.num("rounds", 4));
    const int out_tokens = static_cast<int>(args.num("max-tokens", 8));
    std::mt19937 rng(7);
    std::vector<std::vector<int32_t>> prefixes;
    for (int i = 0; i < 4; ++i) prefixes.push_back(bench::random_tokens(rng, prefix_len, V, tok->bos_id()));
    auto with_suffix = [&](const std::vector<int32_t>& p) {
      auto s = bench::random_tokens(rng, suffix_len, V, -1);
      std::vector<int32_t> r = p;
      r.insert(r.end(), s.begin(), s.end());
      return r;
    };
    engine::EngineConfig cfg;
    cfg.threads = static_cast<int>(args.num("threads", 2));
    cfg.kv_memory_bytes = static_cast<size_t>(args.num("kv-memory-mib", 2048)) << 20;
    cfg.max_num_seqs = clients;
    cfg.max_num_batched_tokens = static_cast<int32_t>(args.num("max-batch-tokens", 512));
    cfg.seed = 1;
    nlohmann::json out = {{"benchmark", "prefix_cache"}, {"model", path}, {"threads", cfg.threads},
                          {"prefix_tokens", prefix_len}, {"suffix_tokens", suffix_len},
                          {"isa", std::string(isa_name(active_isa()))}};

    // (a) sequential, shared prefix.
    std::vector<bench::Job> seq_jobs;
    for (int i = 0; i < n_seq; ++i) seq_jobs.push_back({with_suffix(prefixes[0]), out_tokens});
    if (!args.str("emit-workload").empty()) {
      nlohmann::json w = nlohmann::json::array();
      for (const auto& j : seq_jobs) w.push_back({{"prompt", j.prompt}, {"max_tokens", j.max_tokens}});
      std::ofstream(args.str("emit-workload")) << w.dump();
    }
    auto sequential = [&](bool cache) {
      engine::EngineConfig c = cfg;
      c.enable_prefix_caching = cache;
      engine::Engine e(*lm.model, tok.get(), c);
      return bench::run_closed_loop(e, seq_jobs, 1, [&](int, int k) { return k < n_seq ? k : -1; });
    };
    const auto cold = sequential(false);
    const auto warm = sequential(true);
    std::vector<bench::Job> alone_jobs;
    for (int i = 0; i < n_seq; ++i) alone_jobs.push_back({bench::random_tokens(rng, suffix_len + 1, V, tok->bos_id()), out_tokens});
    engine::EngineConfig ca = cfg;
    ca.enable_prefix_caching = false;
    engine::Engine ea(*lm.model, tok.get(), ca);
    const auto alone = bench::run_closed_loop(ea, alone_jobs, 1, [&](int, int k) { return k < n_seq ? k : -1; });
    nlohmann::json a = {{"requests", n_seq}, {"no_cache", bench::summary(cold)}, {"cache", bench::summary(warm)},
                        {"suffix_alone", bench::summary(alone)}};
    a["ttft_p50_speedup"] = a["no_cache"]["ttft_p50_s"].get<double>() / a["cache"]["ttft_p50_s"].get<double>();
    out["sequential_shared_prefix"] = a;

    // (b) 4 prefixes interleaved across concurrent clients.
    std::vector<bench::Job> mix;
    for (int c = 0; c < clients; ++c) {
      for (int r = 0; r < rounds; ++r) mix.push_back({with_suffix(prefixes[(c + r) % 4]), out_tokens});
    }
    auto interleaved = [&](bool cache) {
      engine::EngineConfig c = cfg;
      c.enable_prefix_caching = cache;
      engine::Engine e(*lm.model, tok.get(), c);
      return bench::run_closed_loop(e, mix, clients, [&](int client, int k) { return k < rounds ? client * rounds + k : -1; });
    };
    const auto mcold = interleaved(false);
    const auto mwarm = interleaved(true);
    nlohmann::json b = {{"clients", clients}, {"rounds", rounds}, {"no_cache", bench::summary(mcold)},
                        {"cache", bench::summary(mwarm)}};
    b["ttft_p50_speedup"] = b["no_cache"]["ttft_p50_s"].get<double>() / b["cache"]["ttft_p50_s"].get<double>();
    b["throughput_ratio"] = b["cache"]["output_tps"].get<double>() / b["no_cache"]["output_tps"].get<double>();
    out["interleaved_4_prefixes"] = b;
    std::printf("%s\n", out.dump(2).c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
