// Bounded KV caches on an endless stream (docs/KV_POLICIES.md): perplexity
// of one continuous sequence of concatenated TinyStories under every policy
// and budget, and dense at full length, on stories260K (trained on 512
// tokens) and stories1M (256); decode tokens/s and KV bytes per segment of
// positions. Every token is appended alone (a decode step), so a segment's
// time is decode time. Prints JSON.
//
//   tessera_kv_policies_bench [--tokens N] [--budgets 64,128,256]
//       [--policies window,sink,recompute,h2o,spatten] [--no-dense] [--no-design-check]
//       [--recent-fraction F (h2o / spatten: recent = F * budget; default theirs)]
//       [--threads T] [models...]
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/thread_pool.h"
#include "eval/perplexity.h"
#include "kv/kv_policy.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace {

std::string read_all(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    std::fprintf(stderr, "cannot open %s\n", path.c_str());
    std::exit(1);
  }
  std::string s;
  char buf[65536];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) s.append(buf, n);
  std::fclose(f);
  return s;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    const size_t j = s.find(',', i);
    out.push_back(s.substr(i, j - i));
    i = j == std::string::npos ? s.size() : j + 1;
  }
  return out;
}

std::vector<int64_t> parse_list(const std::string& s) {
  std::vector<int64_t> out;
  for (const std::string& x : split(s)) out.push_back(std::stoll(x));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tessera;
  int64_t n_tokens = 20000;
  std::vector<int64_t> budgets{64, 128, 256};
  int threads = 2;
  std::string data = "../shared/data/tinystories_val_prefix.txt";
  std::vector<std::string> models;
  std::vector<tessera::kv::KvPolicyKind> policies;
  bool dense = true, design_check = true;
  double recent_fraction = -1.0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--policies" && i + 1 < argc) {
      for (const std::string& name : split(argv[++i])) {
        const auto k = tessera::kv::parse_kv_policy(name);
        if (!k) {
          std::fprintf(stderr, "unknown policy %s\n", name.c_str());
          return 1;
        }
        policies.push_back(*k);
      }
    } else if (a == "--recent-fraction" && i + 1 < argc) {
      recent_fraction = std::stod(argv[++i]);
    } else if (a == "--no-dense") dense = false;
    else if (a == "--no-design-check") design_check = false;
    else if (a == "--tokens" && i + 1 < argc) n_tokens = std::stoll(argv[++i]);
    else if (a == "--budgets" && i + 1 < argc) budgets = parse_list(argv[++i]);
    else if (a == "--threads" && i + 1 < argc) threads = std::stoi(argv[++i]);
    else if (a == "--data" && i + 1 < argc) data = argv[++i];
    else models.push_back(a);
  }
  if (policies.empty()) {
    policies = {kv::KvPolicyKind::kWindow, kv::KvPolicyKind::kSink, kv::KvPolicyKind::kRecompute,
                kv::KvPolicyKind::kH2O, kv::KvPolicyKind::kSpAtten};
  }
  if (models.empty()) {
    models = {"../shared/models/stories260K/stories260K.gguf", "../shared/models/stories1M/stories1M.gguf"};
  }
  const std::string text = read_all(data);
  ThreadPool pool(threads);
  nlohmann::json out = {{"data", data}, {"tokens", n_tokens}, {"threads", threads}, {"runs", nlohmann::json::array()}};
  for (const std::string& path : models) {
    const LoadedModel lm = load_model(path);
    const auto tok = Tokenizer::from_gguf(*lm.file);
    std::vector<int32_t> tokens = tok->encode(text, /*add_special=*/true);
    if (static_cast<int64_t>(tokens.size()) < n_tokens) {
      std::fprintf(stderr, "%s: the text has only %zu tokens\n", path.c_str(), tokens.size());
      return 1;
    }
    tokens.resize(static_cast<size_t>(n_tokens));
    struct Run {
      kv::KvPolicy policy;
    };
    std::vector<Run> runs;
    if (dense) runs.push_back({{kv::KvPolicyKind::kDense, 0, 0, 0}});
    for (int64_t b : budgets) {
      for (kv::KvPolicyKind k : policies) {
        kv::KvPolicy p{k, b, 4, 0};
        if (p.scored() && recent_fraction >= 0.0) p.recent = static_cast<int32_t>(recent_fraction * static_cast<double>(b));
        runs.push_back({p});
      }
    }
    // The design check: granularity 1 rotates every kept key at every token,
    // the rotation work a cache of pre-RoPE keys does in the kernel.
    if (design_check) runs.push_back({{kv::KvPolicyKind::kSink, budgets.back(), 4, 1}});
    const size_t block_bytes = KvCache::bytes_per_block(lm.model->config(), 16, DType::kF16);
    for (const Run& run : runs) {
      engine::PerplexityOptions opt;
      opt.n_batch = 1;
      opt.kv_type = DType::kF16;
      opt.kv_policy = run.policy;
      const engine::PerplexityResult r = engine::perplexity_stream(*lm.model, tokens, opt, pool, 1000);
      std::vector<double> tps, kv_bytes;
      for (size_t i = 0; i < r.segment_seconds.size(); ++i) {
        tps.push_back(static_cast<double>(r.segment) / r.segment_seconds[i]);
        kv_bytes.push_back(static_cast<double>(r.segment_blocks[i]) * static_cast<double>(block_bytes));
      }
      nlohmann::json j = {{"model", path}, {"n_ctx_train", lm.model->config().n_ctx_train},
                          {"policy", kv::kv_policy_name(run.policy.kind)}, {"budget", run.policy.budget},
                          {"granularity", run.policy.granularity},
                          {"recent", run.policy.scored() ? kv::recent_tokens(run.policy) : 0},
                          {"ppl", r.ppl}, {"n_scored", r.n_scored}, {"seconds", r.seconds},
                          {"tokens_per_s", static_cast<double>(r.n_scored) / r.seconds},
                          {"segment", r.segment}, {"segment_ppl", r.segment_ppl}, {"segment_tokens_per_s", tps},
                          {"segment_kv_bytes", kv_bytes}};
      std::fprintf(stderr, "%s %s %lld/%d: ppl %.3f (%.1f s)\n", path.c_str(), kv::kv_policy_name(run.policy.kind),
                   static_cast<long long>(run.policy.budget), run.policy.granularity, r.ppl, r.seconds);
      out["runs"].push_back(j);
    }
  }
  std::printf("%s\n", out.dump(1).c_str());
  return 0;
}
