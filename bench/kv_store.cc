// bench/kv_store: time to first token from the global prompt cache's lower
// tiers (--kv-store), against the RAM prefix cache and no cache.
//
// Workload: `--families` prefixes of `--prefix` tokens, each with
// `--per-family` suffixes of `--suffix` tokens (64 prompts by default),
// served one at a time (TTFT without queueing), greedy, `--max-tokens`.
// Phases, each on a fresh engine unless said:
//   cold      no prefix cache at all;
//   warm      a RAM prefix cache that served the same prompts just before
//             (the same engine, second pass): the in-RAM figure;
//   restart   a fresh engine on the directory the warm engine wrote
//             through to (as a server stopped and started again: the OS page
//             cache stays warm, as it does across a restart);
//   redis     with --redis URL (a running redis-server, e.g. one the
//             caller started): a fresh engine on it after another engine
//             wrote the prompts to it: a second replica.
// Every phase's tokens are compared with cold's (must be identical).
// Prints JSON.
//
//   tessera_kv_store_bench --model F [--threads 2] [--families 8] [--per-family 8]
//       [--prefix 1000] [--suffix 24] [--max-tokens 4] [--dir D] [--redis redis://HOST:PORT]
#include <unistd.h>

#include <filesystem>

#include "bench/bench_util.h"
#include "model/fingerprint.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

using namespace tessera;

namespace {

struct Phase {
  std::vector<double> ttft;
  std::vector<std::vector<int32_t>> tokens;
  engine::EngineStats stats;
};

Phase serve(engine::Engine& e, const std::vector<std::vector<int32_t>>& prompts, int max_tokens) {
  Phase ph;
  for (const auto& p : prompts) {
    engine::SamplingParams sp;
    sp.temperature = 0.0f;
    sp.ignore_eos = true;
    sp.max_tokens = max_tokens;
    const engine::RequestId id = e.add_request(p, sp);
    std::vector<int32_t> toks;
    double ttft = 0.0;
    while (e.has_unfinished()) {
      for (const engine::RequestOutput& o : e.step()) {
        if (o.id != id) continue;
        toks.insert(toks.end(), o.new_tokens.begin(), o.new_tokens.end());
        if (o.finished) ttft = o.time_to_first_token;
      }
    }
    ph.ttft.push_back(ttft);
    ph.tokens.push_back(std::move(toks));
  }
  ph.stats = e.stats();
  return ph;
}

nlohmann::json describe(const Phase& p, const Phase& cold) {
  double sum = 0.0;
  for (double t : p.ttft) sum += t;
  std::vector<double> sorted = p.ttft;
  return {{"ttft_mean_s", sum / static_cast<double>(p.ttft.size())},
          {"ttft_p50_s", bench::percentile(sorted, 0.5)},
          {"ttft_p90_s", bench::percentile(sorted, 0.9)},
          {"prefix_hit_tokens", p.stats.prefix_hit_tokens_total},
          {"store_hit_tokens", p.stats.store_hit_tokens_total},
          {"tokens_identical_to_cold", p.tokens == cold.tokens}};
}

}  // namespace

int main(int argc, char** argv) {
  bench::Args args(argc, argv);
  const std::string path = args.str("model");
  if (path.empty()) {
    std::fprintf(stderr, "usage: %s --model FILE [--threads T] [--families 8] [--per-family 8] ...\n", argv[0]);
    return 1;
  }
  try {
    const LoadedModel lm = load_model(path);
    const auto tok = Tokenizer::from_gguf(*lm.file);
    const int32_t V = static_cast<int32_t>(lm.model->config().n_vocab);
    const int families = static_cast<int>(args.num("families", 8));
    const int per_family = static_cast<int>(args.num("per-family", 8));
    const int prefix_len = static_cast<int>(args.num("prefix", 1000));
    const int suffix_len = static_cast<int>(args.num("suffix", 24));
    const int max_tokens = static_cast<int>(args.num("max-tokens", 4));
    std::string dir = args.str("dir");
    if (dir.empty()) dir = (std::filesystem::temp_directory_path() / ("tessera-kv-store-bench-" + std::to_string(::getpid()))).string();
    std::filesystem::remove_all(dir);

    std::mt19937 rng(11);
    std::vector<std::vector<int32_t>> prompts;
    for (int f = 0; f < families; ++f) {
      const auto prefix = bench::random_tokens(rng, prefix_len, V, tok->bos_id());
      for (int k = 0; k < per_family; ++k) {
        auto p = prefix;
        const auto s = bench::random_tokens(rng, suffix_len, V, -1);
        p.insert(p.end(), s.begin(), s.end());
        prompts.push_back(std::move(p));
      }
    }
    engine::EngineConfig cfg;
    cfg.threads = static_cast<int>(args.num("threads", 2));
    cfg.kv_memory_bytes = static_cast<size_t>(args.num("kv-memory-mib", 2048)) << 20;
    cfg.max_num_seqs = 8;
    cfg.seed = 1;
    const auto t_fp = engine::Clock::now();
    cfg.weights_fingerprint = weights_fingerprint(*lm.file);
    const double fingerprint_s = std::chrono::duration<double>(engine::Clock::now() - t_fp).count();

    nlohmann::json out = {{"benchmark", "kv_store"}, {"model", path}, {"threads", cfg.threads},
                          {"prompts", prompts.size()}, {"families", families}, {"prefix_tokens", prefix_len},
                          {"suffix_tokens", suffix_len}, {"max_tokens", max_tokens},
                          {"isa", std::string(isa_name(active_isa()))}, {"fingerprint_s", fingerprint_s}};

    Phase cold;
    {
      engine::EngineConfig c = cfg;
      c.enable_prefix_caching = false;
      engine::Engine e(*lm.model, tok.get(), c);
      cold = serve(e, prompts, max_tokens);
    }
    Phase warm;
    {
      engine::EngineConfig c = cfg;
      c.kv_store = {dir};
      engine::Engine e(*lm.model, tok.get(), c);
      serve(e, prompts, max_tokens);  // warms RAM, writes through to disk
      warm = serve(e, prompts, max_tokens);
      out["block_bytes"] = e.stats().kv_store->tiers[0].bytes_written / std::max<int64_t>(1, e.stats().kv_store->tiers[0].writes);
    }  // closing flushes its writes
    Phase restart;
    {
      engine::EngineConfig c = cfg;
      c.kv_store = {dir};
      engine::Engine e(*lm.model, tok.get(), c);
      restart = serve(e, prompts, max_tokens);
      out["restart_load_seconds_mean"] = restart.stats.kv_store->load_seconds_sum / std::max<int64_t>(1, restart.stats.kv_store->loads);
      out["restart_load_seconds_max"] = restart.stats.kv_store->load_seconds_max;
    }
    out["cold"] = describe(cold, cold);
    out["warm_ram"] = describe(warm, cold);
    out["restart_disk"] = describe(restart, cold);
    const double w = out["warm_ram"]["ttft_mean_s"].get<double>();
    out["restart_over_warm"] = out["restart_disk"]["ttft_mean_s"].get<double>() / w;
    out["cold_over_restart"] = out["cold"]["ttft_mean_s"].get<double>() / out["restart_disk"]["ttft_mean_s"].get<double>();

    if (const std::string url = args.str("redis"); !url.empty()) {
      {
        engine::EngineConfig c = cfg;
        c.kv_store = {url};
        engine::Engine first(*lm.model, tok.get(), c);
        serve(first, prompts, max_tokens);
      }
      engine::EngineConfig c = cfg;
      c.kv_store = {url};
      engine::Engine second(*lm.model, tok.get(), c);
      const Phase replica = serve(second, prompts, max_tokens);
      out["redis_replica"] = describe(replica, cold);
      out["redis_load_seconds_mean"] = replica.stats.kv_store->load_seconds_sum / std::max<int64_t>(1, replica.stats.kv_store->loads);
      out["redis_load_seconds_max"] = replica.stats.kv_store->load_seconds_max;
      out["redis_over_warm"] = out["redis_replica"]["ttft_mean_s"].get<double>() / w;
    }
    std::filesystem::remove_all(dir);
    std::printf("%s\n", out.dump(2).c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
