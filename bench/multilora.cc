// bench/multilora: one base model serving many LoRA adapters in one batch
// (S-LoRA / Punica's setting) against serving no adapter. Every client has
// its own random prompt and a random adapter (rank --rank on --targets) out
// of N distinct ones; all requests are submitted at once and the engine
// batches them (each decode step: the base GEMM over all tokens once, then
// each token's delta from its own adapter). Rounds alternate the
// configurations; the ratio to no-adapter throughput is taken per round,
// and the median and spread of the ratios are reported. Prints JSON.
//
// --lora-types runs each adapter count with the adapters kept in each
// type (adapters::store_lora: what a decode step reads per token).
//
//   tessera_multilora_bench --model F [--clients 64] [--adapters 1,8,64]
//       [--lora-types f32[,f16,q8_0]] [--rank 16] [--targets all|q,v,...]
//       [--prompt-tokens 64] [--tokens 128] [--threads 2] [--rounds 3]
#include <sstream>

#include "adapters/lora_gguf.h"
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
    std::vector<kernels::LoraWeightType> types;
    {
      std::stringstream ss(args.str("lora-types", "f32"));
      std::string item;
      while (std::getline(ss, item, ',')) {
        if (item == "f32") types.push_back(kernels::LoraWeightType::kF32);
        else if (item == "f16") types.push_back(kernels::LoraWeightType::kF16);
        else if (item == "q8_0") types.push_back(kernels::LoraWeightType::kQ8_0);
        else throw std::runtime_error("--lora-types: f32, f16 or q8_0, not " + item);
      }
    }
    // pools[type][i]: adapter i kept in types[type].
    std::vector<std::vector<std::shared_ptr<const LoraAdapter>>> pools(types.size());
    for (int i = 0; i < most; ++i) {
      const auto a = adapters::random_lora(cfg, rank, mask, 1000 + i);
      for (size_t t = 0; t < types.size(); ++t) pools[t].push_back(adapters::stored_as(a, types[t]));
    }
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
    // Configuration 0: no adapter; then each adapter count in each type.
    struct Config {
      int adapters;
      size_t type;
    };
    std::vector<Config> configs = {{0, 0}};
    for (int n : counts) {
      for (size_t t = 0; t < types.size(); ++t) configs.push_back({n, t});
    }
    auto run = [&](const Config& cf) {
      std::vector<engine::RequestAdapters> with(static_cast<size_t>(clients));
      for (int c = 0; c < clients && cf.adapters > 0; ++c) with[c].lora = pools[cf.type][c % cf.adapters];
      const bench::RunStats st =
          bench::run_closed_loop(eng, jobs, clients, [](int c, int k) { return k == 0 ? c : -1; }, &with);
      return static_cast<double>(st.output_tokens) / st.seconds;
    };
    run(configs[0]);  // warm-up: page in the weights, size the buffers
    std::vector<std::vector<double>> tps(configs.size()), ratio(configs.size());
    for (int r = 0; r < rounds; ++r) {
      std::vector<double> this_round(configs.size());
      // Alternate the order each round so drift does not favour one config.
      std::vector<size_t> order(configs.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = i;
      if (r % 2 == 1) std::reverse(order.begin(), order.end());
      for (size_t i : order) this_round[i] = run(configs[i]);
      for (size_t i = 0; i < configs.size(); ++i) {
        tps[i].push_back(this_round[i]);
        ratio[i].push_back(this_round[i] / this_round[0]);
      }
    }
    size_t adapter_bytes = 0;  // one adapter in F32
    if (most > 0) adapter_bytes = adapters::random_lora(cfg, rank, mask, 1000)->bytes();
    nlohmann::json out = {{"benchmark", "multilora"},
                          {"model", path},
                          {"clients", clients},
                          {"rank", rank},
                          {"targets", targets},
                          {"adapter_mib_f32", static_cast<double>(adapter_bytes) / (1 << 20)},
                          {"prompt_tokens", args.num("prompt-tokens", 64)},
                          {"output_tokens", args.num("tokens", 128)},
                          {"threads", ec.threads},
                          {"rounds", rounds},
                          {"isa", std::string(isa_name(active_isa()))},
                          {"workload", "all clients submitted at once, random prompts, greedy, ignore_eos; client c "
                                       "uses adapter c mod N"}};
    for (size_t i = 0; i < configs.size(); ++i) {
      const std::vector<double>& rs = ratio[i];
      const Config& cf = configs[i];
      out["results"].push_back({{"adapters", cf.adapters},
                                {"lora_type", cf.adapters == 0 ? "" : kernels::lora_weight_type_name(types[cf.type])},
                                {"adapter_mib", cf.adapters == 0 ? 0.0 : static_cast<double>(pools[cf.type][0]->bytes()) / (1 << 20)},
                                {"output_tps_median", bench::percentile(tps[i], 0.5)},
                                {"output_tps", tps[i]},
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
