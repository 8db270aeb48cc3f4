// bench/throughput: the same seeded workload (prompt lengths uniform
// 32..512, output lengths uniform 16..256) run three ways on one engine
// configuration: (a) one request at a time, (b) static batches of 16 (a
// batch runs until its longest request ends; new requests wait), (c)
// continuous batching (everything submitted; the scheduler admits and
// retires requests every step). Prints JSON, with the roofline model of the
// same workload on this machine (eval/roofline_model.h: measured compute
// peak and read bandwidth): the least time any engine could take for each
// way of batching, so the best ratios the three modes can show here.
//
//   tessera_throughput_bench --model F [--requests 128] [--threads 2] [--seed 1]
//       [--kv-memory-mib 4096] [--max-num-seqs 128] [--max-batch-tokens 1024]
//       [--emit-workload W.json] [--modes abc] [--no-roofline]
#include <fstream>

#include "bench/bench_util.h"
#include "eval/roofline_model.h"
#include "kernels/membw.h"
#include "kernels/peak.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

using namespace tessera;

int main(int argc, char** argv) {
  bench::Args args(argc, argv);
  const std::string path = args.str("model");
  if (path.empty()) {
    std::fprintf(stderr, "usage: %s --model FILE [--requests N] [--threads T] ...\n", argv[0]);
    return 1;
  }
  try {
    const LoadedModel lm = load_model(path);
    const auto tok = Tokenizer::from_gguf(*lm.file);
    const int n = static_cast<int>(args.num("requests", 128));
    std::mt19937 rng(static_cast<uint32_t>(args.num("seed", 1)));
    std::uniform_int_distribution<int> plen(static_cast<int>(args.num("min-prompt", 32)), static_cast<int>(args.num("max-prompt", 512)));
    std::uniform_int_distribution<int> olen(static_cast<int>(args.num("min-output", 16)), static_cast<int>(args.num("max-output", 256)));
    std::vector<bench::Job> jobs;
    for (int i = 0; i < n; ++i) {
      const int p = plen(rng), o = olen(rng);
      jobs.push_back({bench::random_tokens(rng, p, static_cast<int32_t>(lm.model->config().n_vocab), tok->bos_id()), o});
    }
    if (!args.str("emit-workload").empty()) {
      nlohmann::json w = nlohmann::json::array();
      for (const auto& j : jobs) w.push_back({{"prompt", j.prompt}, {"max_tokens", j.max_tokens}});
      std::ofstream(args.str("emit-workload")) << w.dump();
    }
    engine::EngineConfig cfg;
    cfg.threads = static_cast<int>(args.num("threads", 2));
    cfg.kv_memory_bytes = static_cast<size_t>(args.num("kv-memory-mib", 4096)) << 20;
    cfg.max_num_batched_tokens = static_cast<int32_t>(args.num("max-batch-tokens", 1024));
    cfg.enable_prefix_caching = false;  // random prompts share nothing; keep the comparison clean
    cfg.seed = 1;
    const std::string modes = args.str("modes", "abc");
    nlohmann::json out = {{"benchmark", "throughput"}, {"model", path}, {"requests", n}, {"threads", cfg.threads},
                          {"workload", "prompt tokens uniform 32..512, output tokens uniform 16..256, greedy, ignore_eos"},
                          {"isa", std::string(isa_name(active_isa()))}};
    double a_tps = 0, b_tps = 0, c_tps = 0;
    if (modes.find('a') != std::string::npos) {
      engine::EngineConfig c = cfg;
      c.max_num_seqs = 1;
      engine::Engine e(*lm.model, tok.get(), c);
      auto s = bench::run_closed_loop(e, jobs, 1, [&](int, int k) { return k < n ? k : -1; });
      out["one_at_a_time"] = bench::summary(s);
      a_tps = out["one_at_a_time"]["output_tps"];
    }
    if (modes.find('b') != std::string::npos) {
      engine::EngineConfig c = cfg;
      c.max_num_seqs = 16;
      engine::Engine e(*lm.model, tok.get(), c);
      bench::RunStats total;
      total.results.resize(jobs.size());
      for (int b0 = 0; b0 < n; b0 += 16) {
        std::vector<bench::Job> batch(jobs.begin() + b0, jobs.begin() + std::min(n, b0 + 16));
        const int bn = static_cast<int>(batch.size());
        auto s = bench::run_closed_loop(e, batch, bn, [&](int client, int k) { return k == 0 ? client : -1; });
        total.seconds += s.seconds;
        total.output_tokens += s.output_tokens;
        for (int i = 0; i < bn; ++i) total.results[b0 + i] = s.results[i];
        total.engine = s.engine;
      }
      out["static_batches_of_16"] = bench::summary(total);
      b_tps = out["static_batches_of_16"]["output_tps"];
    }
    if (modes.find('c') != std::string::npos) {
      engine::EngineConfig c = cfg;
      c.max_num_seqs = static_cast<int32_t>(args.num("max-num-seqs", 128));
      engine::Engine e(*lm.model, tok.get(), c);
      auto s = bench::run_closed_loop(e, jobs, n, [&](int client, int k) { return k == 0 ? client : -1; });
      out["continuous"] = bench::summary(s);
      c_tps = out["continuous"]["output_tps"];
    }
    if (a_tps > 0 && c_tps > 0) out["continuous_vs_one_at_a_time"] = c_tps / a_tps;
    if (b_tps > 0 && c_tps > 0) out["continuous_vs_static"] = c_tps / b_tps;
    if (!args.flag("no-roofline")) {
      ThreadPool pool(cfg.threads);
      const kernels::ComputePeak peak = kernels::measure_compute_peak(pool, active_isa());
      const kernels::BandwidthResult bw = kernels::measure_read_bandwidth(pool);
      const Model::MatmulWork work = lm.model->matmul_work();
      std::vector<engine::WorkloadRequest> w;
      for (const auto& j : jobs) w.push_back({static_cast<int64_t>(j.prompt.size()), j.max_tokens});
      const engine::RooflineTimes t = engine::roofline_times(
          w, {work.per_token, work.per_logit_row, lm.model->bytes_per_token()},
          {peak.int8_macs_per_s, bw.gbps_median * 1e9}, 16, cfg.max_num_batched_tokens);
      nlohmann::json rm = {{"peak_int8_macs_per_s", peak.int8_macs_per_s},
                           {"membw_gbps", bw.gbps_median},
                           {"seconds", {{"one_at_a_time", t.one_at_a_time},
                                        {"static_batches_of_16", t.static_batches},
                                        {"continuous_lower_bound", t.continuous}}},
                           {"best_continuous_vs_one_at_a_time", t.one_at_a_time / t.continuous},
                           {"best_continuous_vs_static", t.static_batches / t.continuous}};
      // Against the measured (a): continuous batching at the compute peak
      // would give at most this ratio.
      if (a_tps > 0) rm["continuous_at_peak_vs_measured_one_at_a_time"] = out["one_at_a_time"]["seconds"].get<double>() / t.continuous;
      out["roofline_model"] = rm;
    }
    std::printf("%s\n", out.dump(2).c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
