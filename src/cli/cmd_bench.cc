// tessera bench: ppN / tgN like llama-bench, the machine's read bandwidth
// and compute peak, and the model's decode roofline (bandwidth-bound) and
// prompt-processing roofline (compute-bound) with the achieved fractions;
// --batched: decode of B sequences at once like llama-batched-bench.
#include <cstdlib>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <numeric>
#include <vector>

#include "cli/command.h"
#include "cli/common_options.h"
#include "eval/benchmark.h"
#include "kernels/matmul.h"
#include "kernels/membw.h"
#include "kernels/peak.h"
#include "kernels/sparse.h"
#include "dist/world.h"
#include "model/model.h"

namespace tessera::cli {
namespace {

struct BenchArgs {
  std::string model;
  int threads = 0;
  int tp = 1;
  int64_t n_prompt = 128, n_gen = 64;
  int reps = 5;
  bool json = false, membw = false, no_membw = false, peak = false;
  std::string kv_type = "f16";
  bool kv_hadamard = false;
  std::vector<int32_t> batched;
};

// --batched: llama-batched-bench's table (-npp = -p, -ntg = -n, -npl = the list).
int run_batched(const BenchArgs& a, const LoadedModel& lm, ThreadPool& pool, nlohmann::json& j) {
  engine::BatchedBenchOptions opt;
  opt.n_prompt = a.n_prompt;
  opt.n_gen = a.n_gen;
  opt.batch_sizes = a.batched;
  opt.reps = a.reps;
  opt.threads = pool.size();
  RunOptions ro;
  ro.kv_type = a.kv_type;
  opt.kv_type = ro.kv_dtype();
  opt.kv_hadamard = a.kv_hadamard;
  TESSERA_CHECK(opt.n_prompt > 0 && opt.n_gen > 0, kInvalidArgument, "--batched needs -p > 0 and -n > 0");
  for (int32_t b : opt.batch_sizes) TESSERA_CHECK(b > 0 && b <= 1024, kInvalidArgument, "--batched {}: 1..1024", b);
  const std::vector<engine::BatchedBenchRow> rows = engine::run_batched_bench(*lm.model, opt);
  j["model"] = std::filesystem::path(a.model).filename().string();
  j["npp"] = opt.n_prompt;
  j["ntg"] = opt.n_gen;
  j["reps"] = opt.reps;
  for (const engine::BatchedBenchRow& r : rows) {
    j["batched"].push_back({{"batch", r.batch}, {"pp_tps", r.pp_tps}, {"tg_tps", r.tg_tps},
                            {"pp_samples", r.pp_samples}, {"tg_samples", r.tg_samples}});
  }
  if (a.json) {
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("| PP | TG | B | S_PP t/s | S_TG t/s |\n|---:|---:|---:|---:|---:|\n");
  for (const engine::BatchedBenchRow& r : rows) {
    std::printf("| %lld | %lld | %d | %.2f | %.2f |\n", static_cast<long long>(opt.n_prompt),
                static_cast<long long>(opt.n_gen), r.batch, r.pp_tps, r.tg_tps);
  }
  return 0;
}

// The machine's figures the rooflines are measured against.
struct MachineFigures {
  double bw_gbps = 0.0;  // median read bandwidth; 0: not measured
  kernels::ComputePeak peak;
  bool has_peak = false;
};

MachineFigures measure_machine(const BenchArgs& a, ThreadPool& pool, nlohmann::json& j) {
  MachineFigures m;
  if (!a.no_membw) {
    const kernels::BandwidthResult b = kernels::measure_read_bandwidth(pool);
    m.bw_gbps = b.gbps_median;
    j["membw_gbps"] = b.gbps_median;
    j["membw_gbps_max"] = b.gbps_max;
  }
  if (a.peak) {
    m.peak = kernels::measure_compute_peak(pool, active_isa());
    m.has_peak = true;
    j["peak_int8_macs_per_s"] = m.peak.int8_macs_per_s;
    j["peak_int8_hw_macs_per_s"] = m.peak.int8_hw_macs_per_s;
    j["peak_f32_fmas_per_s"] = m.peak.f32_fmas_per_s;
  }
  return m;
}

// --membw / --peak without a model: the machine's figures only.
int print_machine(const BenchArgs& a, const MachineFigures& m, ThreadPool& pool, const nlohmann::json& j) {
  if (a.json) {
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  if (m.bw_gbps > 0) {
    std::printf("read bandwidth: %.1f GB/s (median), %.1f (best), %d threads\n", m.bw_gbps,
                j["membw_gbps_max"].get<double>(), pool.size());
  }
  if (m.has_peak) {
    std::printf("compute peak (%s, %d threads): int8 %.3g multiply-adds/s with the kernels' exact dot, %.3g with "
                "the ISA's widest int8 multiply-add alone; f32 %.3g FMAs/s\n",
                std::string(isa_name(active_isa())).c_str(), pool.size(), m.peak.int8_macs_per_s,
                m.peak.int8_hw_macs_per_s, m.peak.f32_fmas_per_s);
  }
  return 0;
}

// The dominant weight type of a file, by bytes.
std::string dominant_type(const LoadedModel& lm) {
  std::map<std::string, size_t> bytes;
  for (const auto& t : lm.file->tensors()) bytes[std::string(dtype_name(t.type))] += t.n_bytes;
  std::string type = "?";
  size_t best = 0;
  for (const auto& [n, b] : bytes) {
    if (b > best) best = b, type = n;
  }
  return type;
}

// Pruned matrices stored sparse (kernels/sparse.h): their weights and the
// fraction not stored, into j (nothing when the file has none).
void sparse_summary(const LoadedModel& lm, nlohmann::json& j) {
  uint64_t weights = 0, kept = 0;
  for (const auto& t : lm.file->tensors()) {
    if (!kernels::is_sparse(t.type)) continue;
    const kernels::SparseView v = kernels::sparse_view(t.data);
    weights += static_cast<uint64_t>(v.rows * v.cols);
    kept += v.kept;
  }
  if (weights == 0) return;
  j["sparse_weights"] = weights;
  j["weight_sparsity"] = 1.0 - static_cast<double>(kept) / static_cast<double>(weights);
}

// Contextual sparsity during tg (model/ffn_sparsity.h): the fraction of
// FFN neurons kept, and the bytes a token read, with the skipped up rows
// and down columns of the steps taken off (their share of ffn_up / ffn_down;
// the transposed down's scales are read in full). Nothing without it.
void contextual_summary(const LoadedModel& lm, const engine::BenchResult& r, size_t bpt, nlohmann::json& j) {
  if (r.ffn_neurons == 0) return;
  double skippable = 0.0;  // an up row whole; a down column's values, not its scales
  for (const auto& t : lm.file->tensors()) {
    if (t.name.ends_with(".ffn_up.weight")) skippable += static_cast<double>(t.n_bytes);
    if (t.name.ends_with(".ffn_down.weight")) skippable += static_cast<double>(t.n_bytes) * 32.0 / 34.0;
  }
  const double kept = static_cast<double>(r.ffn_kept) / static_cast<double>(r.ffn_neurons);
  const double in_union = static_cast<double>(r.ffn_union_rows) / static_cast<double>(r.ffn_neurons);  // tg: 1 token a step
  j["ffn_kept_fraction"] = kept;
  j["ffn_sparsity"] = 1.0 - kept;
  j["bytes_per_token_read"] = static_cast<double>(bpt) - (1.0 - in_union) * skippable;
}

// Decode against the bandwidth roofline. The machine is shared: its
// bandwidth drifts by 10-30% from minute to minute, so each tg repetition's
// fraction is taken against a short measurement made right before it.
struct DecodeRoofline {
  double bw_gbps = 0.0, tps = 0.0, fraction = 0.0;
  size_t n_bw = 0;
};

DecodeRoofline decode_roofline(double bw, const std::vector<double>& tg_bw, const engine::BenchResult& r, size_t bpt,
                               nlohmann::json& j) {
  DecodeRoofline d;
  if (!tg_bw.empty()) {
    std::vector<double> all = tg_bw;
    all.push_back(bw);
    bw = engine::median(all);
    j["membw_gbps"] = bw;
    j["membw_gbps_at_tg"] = tg_bw;
  }
  d.bw_gbps = bw;
  d.n_bw = tg_bw.size() + 1;
  d.tps = bw > 0 ? bw * 1e9 / static_cast<double>(bpt) : 0.0;
  d.fraction = d.tps > 0 ? r.tg_tps / d.tps : 0.0;
  if (tg_bw.size() == r.tg_samples.size() && !tg_bw.empty()) {
    std::vector<double> fr;
    for (size_t i = 0; i < tg_bw.size(); ++i) fr.push_back(r.tg_samples[i] * static_cast<double>(bpt) / (tg_bw[i] * 1e9));
    j["tg_roofline_fractions"] = fr;
    d.fraction = engine::median(fr);
  }
  j["roofline_tps"] = d.tps;
  j["tg_roofline_fraction"] = d.fraction;
  return d;
}

// Prompt processing against the compute peak: weight multiply-adds per
// prompt token (logits for the last token only) against the peak of the
// arithmetic the weight type runs on (int8 dots for quantized types, f32
// FMAs for float ones).
struct PromptPeak {
  double macs_per_s = 0.0, peak = 0.0, hw_peak = 0.0;
  bool float_type = false;
};

PromptPeak prompt_peak(const BenchArgs& a, const LoadedModel& lm, const std::string& type, const MachineFigures& m,
                       double pp_tps, nlohmann::json& j) {
  PromptPeak p;
  const Model::MatmulWork work = lm.model->matmul_work();
  const double macs_per_token = static_cast<double>(work.per_token) +
                                static_cast<double>(work.per_logit_row) / static_cast<double>(a.n_prompt);
  p.float_type = type == "F32" || type == "F16" || type == "BF16";
  p.peak = p.float_type ? m.peak.f32_fmas_per_s : m.peak.int8_macs_per_s;
  p.hw_peak = p.float_type ? m.peak.f32_fmas_per_s : m.peak.int8_hw_macs_per_s;
  p.macs_per_s = pp_tps * macs_per_token;
  j["macs_per_token"] = work.per_token + work.per_logit_row;
  j["pp_macs_per_s"] = p.macs_per_s;
  if (p.peak > 0) j["pp_peak_fraction"] = p.macs_per_s / p.peak;
  if (p.hw_peak > 0) j["pp_hw_peak_fraction"] = p.macs_per_s / p.hw_peak;
  return p;
}

void print_single(const BenchArgs& a, const engine::BenchResult& r, const std::string& type, int threads, size_t bpt,
                  const DecodeRoofline& d, const PromptPeak& p, const nlohmann::json& j) {
  const std::string model = j["model"].get<std::string>();
  std::printf("| model | type | threads | test | t/s |\n|---|---|---:|---|---:|\n");
  std::printf("| %s | %s | %d | pp%lld | %.1f |\n", model.c_str(), type.c_str(), threads,
              static_cast<long long>(a.n_prompt), r.pp_tps);
  std::printf("| %s | %s | %d | tg%lld | %.1f |\n", model.c_str(), type.c_str(), threads,
              static_cast<long long>(a.n_gen), r.tg_tps);
  if (d.tps > 0) {
    std::printf("read bandwidth %.1f GB/s (median of %zu); %.1f MiB read per token; roofline %.1f t/s; tg at %.0f%% of "
                "roofline (median over repetitions, each against the bandwidth measured just before it)\n",
                d.bw_gbps, d.n_bw, static_cast<double>(bpt) / (1 << 20), d.tps, 100.0 * d.fraction);
  }
  if (j.contains("weight_sparsity")) {
    std::printf("sparse matrices: %.3g weights, %.1f%% of them pruned (not read)\n",
                j["sparse_weights"].get<double>(), 100.0 * j["weight_sparsity"].get<double>());
  }
  std::printf("pp: %.3g weight multiply-adds/s", p.macs_per_s);
  if (p.peak > 0) {
    std::printf(" = %.0f%% of the measured %s peak (%.3g/s)", 100.0 * p.macs_per_s / p.peak,
                p.float_type ? "f32 FMA" : "int8 dot", p.peak);
    if (!p.float_type && p.hw_peak > 0) {
      std::printf(", %.0f%% of the hardware's int8 peak (%.3g/s)", 100.0 * p.macs_per_s / p.hw_peak, p.hw_peak);
    }
  }
  std::printf("\n");
}

// A mixture's expert load: tokens per expert of each layer into the JSON;
// returns the worst layer's busiest-expert / mean ratio (0: dense).
double expert_load(const ModelConfig& c, const std::vector<int64_t>& tokens, nlohmann::json& j) {
  if (c.n_expert == 0 || tokens.size() != static_cast<size_t>(c.n_layer * c.n_expert)) return 0.0;
  double worst = 0.0;
  for (int64_t il = 0; il < c.n_layer; ++il) {
    const auto first = tokens.begin() + il * c.n_expert, last = first + c.n_expert;
    j["expert_tokens"].push_back(std::vector<int64_t>(first, last));
    const double total = static_cast<double>(std::accumulate(first, last, int64_t{0}));
    if (total > 0) worst = std::max(worst, static_cast<double>(*std::max_element(first, last)) * c.n_expert / total);
  }
  j["expert_max_over_mean"] = worst;
  return worst;
}

// ppN / tgN of one sequence, with both rooflines.
int run_single(const BenchArgs& a, const LoadedModel& lm, ThreadPool& pool, const MachineFigures& m, nlohmann::json& j) {
  engine::BenchOptions opt;
  opt.n_prompt = a.n_prompt;
  opt.n_gen = a.n_gen;
  opt.reps = a.reps;
  RunOptions ro;
  ro.kv_type = a.kv_type;
  opt.kv_type = ro.kv_dtype();
  opt.kv_hadamard = a.kv_hadamard;
  std::vector<double> tg_bw;
  if (!a.no_membw && opt.n_gen > 0) {
    opt.before_tg = [&] { tg_bw.push_back(kernels::measure_read_bandwidth(pool, size_t{256} << 20, 3).gbps_median); };
  }
  if (a.tp > 1) opt.comm_clock = [] { return dist::World::current().sum_stats().seconds; };
  const engine::BenchResult r = engine::run_bench(*lm.model, opt, pool);
  const size_t bpt = lm.model->bytes_per_token();
  const std::string type = dominant_type(lm);
  j["model"] = std::filesystem::path(a.model).filename().string();
  j["type"] = type;
  j["model_bytes"] = std::filesystem::file_size(a.model);
  j["bytes_per_token"] = bpt;
  sparse_summary(lm, j);
  contextual_summary(lm, r, bpt, j);
  j["pp_tokens"] = a.n_prompt;
  j["pp_tps"] = r.pp_tps;
  j["pp_samples"] = r.pp_samples;
  j["tg_tokens"] = a.n_gen;
  j["tg_tps"] = r.tg_tps;
  j["tg_samples"] = r.tg_samples;
  if (a.tp > 1) {  // the all-reduces' share of the timed passes, on rank 0
    j["allreduce_share_pp"] = r.pp_seconds > 0 ? r.pp_comm_seconds / r.pp_seconds : 0.0;
    j["allreduce_share_tg"] = r.tg_seconds > 0 ? r.tg_comm_seconds / r.tg_seconds : 0.0;
  }
  const double imbalance = expert_load(lm.model->config(), r.expert_tokens, j);
  const DecodeRoofline d = decode_roofline(m.bw_gbps, tg_bw, r, bpt, j);
  const PromptPeak p = prompt_peak(a, lm, type, m, r.pp_tps, j);
  if (a.json) {
    std::printf("%s\n", j.dump().c_str());
  } else {
    print_single(a, r, type, pool.size(), bpt, d, p, j);
    if (imbalance > 0) {
      std::printf("experts: %lld of %lld per token; busiest expert of a layer has %.2fx the mean load (worst layer)\n",
                  static_cast<long long>(lm.model->config().n_expert_used),
                  static_cast<long long>(lm.model->config().n_expert), imbalance);
    }
  }
  return 0;
}

TESSERA_COMMAND("bench", "Prompt-processing and generation speed (like llama-bench), bandwidth, roofline", [](CLI::App& sub) {
  auto a = std::make_shared<BenchArgs>();
  sub.add_option("-m,--model", a->model, "GGUF model (omit with --membw / --peak)");
  sub.add_option("-t,--threads", a->threads, kThreadsHelp);
  sub.add_option("--tp", a->tp, "Tensor parallelism over N ranks (mpirun -np N; docs/DISTRIBUTED.md)")
      ->check(CLI::Range(1, 1024));
  sub.add_option("-p,--n-prompt", a->n_prompt, "Prompt tokens (ppN)")->capture_default_str();
  sub.add_option("-n,--n-gen", a->n_gen, "Generated tokens (tgN)")->capture_default_str();
  sub.add_option("-r,--reps", a->reps, "Repetitions (median reported)")->capture_default_str();
  sub.add_option("--kv-type", a->kv_type, "KV cache type: f32, f16, bf16, q8_0, q4_0")->capture_default_str();
  sub.add_flag("--kv-hadamard", a->kv_hadamard, "Hadamard-rotated q8_0 / q4_0 K and V");
  add_integer_weight_flags(sub);
  sub.add_flag("--json", a->json, "Print one JSON object");
  sub.add_flag("--membw", a->membw, "Measure memory read bandwidth only");
  sub.add_flag("--no-membw", a->no_membw, "Skip the bandwidth measurement (no roofline)");
  sub.add_flag("--peak", a->peak, "Also measure the int8 / f32 compute peak (pp roofline)");
  sub.add_option("--batched", a->batched, "Batch sizes, e.g. 1,4,16,32: like llama-batched-bench (-p prompt tokens "
                 "per sequence, -n decode steps), decode tokens/s summed over the sequences")->delimiter(',');
  return [a]() {
    LoadedModel split;  // --tp: this rank's shard (the other ranks stay in load(), following rank 0)
    if (a->tp > 1) {
      RunOptions ro;
      ro.model = a->model;
      ro.tp = a->tp;
      ro.threads = a->threads;
      split = ro.load();
      a->threads = ro.threads;
    }
    ThreadPool pool(a->threads);
    nlohmann::json j;
    j["threads"] = pool.size();
    j["isa"] = std::string(isa_name(active_isa()));
    j["matmul_kernels"] = kernels::matmul_kernels_name(active_isa());  // "amx" where the AVX-512 table has AMX tiles
    const MachineFigures m = measure_machine(*a, pool, j);
    if (a->model.empty()) {
      TESSERA_CHECK(a->membw || a->peak, kInvalidArgument, "give -m FILE (or --membw / --peak)");
      return print_machine(*a, m, pool, j);
    }
    const LoadedModel lm = split.model ? std::move(split) : load_model(a->model);
    if (a->tp > 1) j["tp"] = a->tp;
    if (!a->batched.empty()) return run_batched(*a, lm, pool, j);
    return run_single(*a, lm, pool, m, j);
  };
});

}  // namespace
}  // namespace tessera::cli
