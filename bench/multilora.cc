// bench/multilora: one base model serving many LoRA adapters in one batch
// (S-LoRA / Punica's setting) against serving no adapter. Every client has
// its own random prompt and a random adapter (rank --rank on --targets) out
// of N distinct ones; all requests are submitted at once and the engine
// batches them (each decode step: the base GEMM over all tokens once, then
// each token's delta from its own adapter). Rounds alternate the
// configurations; the ratio to no-adapter throughput is taken per round,
// and the median and spread of the ratios are reported. Prints JSON.
//
//   tessera_multilora_bench --model F [--clients 64] [--adapters 1,8,64]
//       [--rank 16] [--targets all|q,v,...] [--prompt-tokens 64]
//       [--tokens 128] [--threads 2] [--rounds 3]
#include <sstream>

#include "adapters/random_lora.h"
#include "bench/bench_util.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

using namespace tessera;

int main(int argc, char** argv) {
  bench::Args args(argc, argv);
  const std::string path = args.str("model");
  if (path.empty()) {
    std::fprintf(stderr, "usage: %s --model FILE [--clients 64] [--adapters 1,8,64] [--rank 16] ...\n", argv[0]);
    return 1;
  }
  try {
    const LoadedModel lm = load_model(path);
    const auto tok = Tokenizer::from_gguf(*lm.file);
    const ModelConfig& cfg = lm.model->config();
    const int clients = static_cast<int>(args.num("clients", 64));
    const int64_t rank = args.num("rank", 16);
    const std::string targets = args.str("targets", "all");
    const uint32_t mask = adapters::parse_lora_targets(targets);
    const int rounds = static_cast<int>(args.num("rounds", 3));
    std::vector<int> counts;
    {
      std::stringstream ss(args.str("adapters", "1,8,64"));
      std::string item;
      while (std::getline(ss, item, ',')) counts.push_back(std::stoi(item));
    }
    int most = 0;
    for (int n : counts) most = std::max(most, n);
    std::vector<std::shared_ptr<const LoraAdapter>> pool;
    for (int i = 0; i < most; ++i) pool.push_back(adapters::random_lora(cfg, rank, mask, 1000 + i));
    std::mt19937 rng(1);
    std::vector<bench::Job> jobs;
    for (int c = 0; c < clients; ++c) {
      jobs.push_back({bench::random_tokens(rng, static_cast<int>(args.num("prompt-tokens", 64)),
                                           static_cast<int32_t>(cfg.n_vocab), tok->bos_id()),
                      static_cast<int32_t>(args.num("tokens", 128))});
    }
    engine::EngineConfig ec;
    ec.threads = static_cast<int>(args.num("threads", 2));
    ec.max_num_seqs = std::max(clients, 1);
    ec.max_num_batched_tokens = static_cast<int32_t>(args.num("max-batch-tokens", 1024));
    ec.enable_prefix_caching = false;
    ec.seed = 1;
    engine::Engine eng(*lm.model, tok.get(), ec);
    // Configuration 0: no adapter; then each adapter count.
    auto run = [&](int n_adapters) {
      std::vector<engine::RequestAdapters> with(static_cast<size_t>(clients));
      for (int c = 0; c < clients && n_adapters > 0; ++c) with[c].lora = pool[c % n_adapters];
      const bench::RunStats st =
          bench::run_closed_loop(eng, jobs, clients, [](int c, int k) { return k == 0 ? c : -1; }, &with);
      return static_cast<double>(st.output_tokens) / st.seconds;
    };
    run(0);  // warm-up: page in the weights, size the buffers
    std::vector<int> configs = {0};
    configs.insert(configs.end(), counts.begin(), counts.end());
    std::map<int, std::vector<double>> tps, ratio;
    for (int r = 0; r < rounds; ++r) {
      std::map<int, double> this_round;
      // Alternate the order each round so drift does not favour one config.
      std::vector<int> order = configs;
      if (r % 2 == 1) std::reverse(order.begin(), order.end());
      for (int n : order) this_round[n] = run(n);
      for (int n : configs) {
        tps[n].push_back(this_round[n]);
        ratio[n].push_back(this_round[n] / this_round[0]);
      }
    }
    size_t adapter_bytes = pool.empty() ? 0 : pool[0]->bytes();
    nlohmann::json out = {{"benchmark", "multilora"},
                          {"model", path},
                          {"clients", clients},
                          {"rank", rank},
                          {"targets", targets},
                          {"adapter_mib", static_cast<double>(adapter_bytes) / (1 << 20)},
                          {"prompt_tokens", args.num("prompt-tokens", 64)},
                          {"output_tokens", args.num("tokens", 128)},
                          {"threads", ec.threads},
                          {"rounds", rounds},
                          {"isa", std::string(isa_name(active_isa()))},
                          {"workload", "all clients submitted at once, random prompts, greedy, ignore_eos; client c "
                                       "uses adapter c mod N"}};
    for (int n : configs) {
      const std::vector<double>& rs = ratio[n];
      out["results"].push_back({{"adapters", n},
                                {"output_tps_median", bench::percentile(tps[n], 0.5)},
                                {"output_tps", tps[n]},
                                {"vs_no_adapter_median", bench::percentile(rs, 0.5)},
                                {"vs_no_adapter_min", *std::min_element(rs.begin(), rs.end())},
                                {"vs_no_adapter_max", *std::max_element(rs.begin(), rs.end())}});
    }
    std::printf("%s\n", out.dump(2).c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
