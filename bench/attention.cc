// bench/attention: decode attention time per token against context length,
// tiled kernel vs the naive reference, and KV-cache utilization of a
// mixed-length workload on the paged block pool. Prints one JSON object.
//
//   build/bench/tessera_attention_bench [--smoke] [--threads N] [--isa NAME]
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/cpu.h"
#include "kernels/attention.h"
#include "kv/kv_manager.h"

using namespace tessera;

namespace {

struct Shape {
  int n_heads = 32, n_kv_heads = 8, head_dim = 64, block_size = 16;  // the 1b preset's attention
  DType type = DType::kF16;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Seconds per decode step of one layer for one sequence of context `ctx`.
std::pair<double, double> time_decode(const Shape& sh, int ctx, int reps, ThreadPool& pool, Isa isa) {
  kernels::KvLayerView kv;
  kv.type = sh.type;
  kv.block_size = sh.block_size;
  kv.n_kv_heads = sh.n_kv_heads;
  kv.head_dim = sh.head_dim;
  const int n_blocks = (ctx + sh.block_size - 1) / sh.block_size + 1;
  std::vector<uint8_t> k(kv.block_bytes() * n_blocks), v(k.size());
  std::mt19937 rng(1);
  for (auto& b : k) b = static_cast<uint8_t>(rng() & 0x3b);  // small finite f16/bf16 values
  for (auto& b : v) b = static_cast<uint8_t>(rng() & 0x3b);
  kv.k = k.data();
  kv.v = v.data();
  std::vector<int32_t> table(n_blocks - 1);
  for (int i = 0; i < n_blocks - 1; ++i) table[i] = i + 1;
  const int qw = sh.n_heads * sh.head_dim;
  std::vector<float> q(qw), out(qw);
  std::normal_distribution<float> n01;
  for (auto& x : q) x = n01(rng);
  std::vector<kernels::AttentionSeq> seqs = {{0, 1, ctx, table.data()}};
  const kernels::AttentionShape shape{sh.n_heads, 1.0f / std::sqrt(static_cast<float>(sh.head_dim))};
  kernels::Workspace ws;
  kernels::KernelContext kctx{&pool, isa, &ws};
  std::vector<double> tiled, naive;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    kernels::paged_attention(kv, q.data(), qw, out.data(), qw, seqs, shape, kctx);
    auto t1 = std::chrono::steady_clock::now();
    kernels::paged_attention_naive(kv, q.data(), qw, out.data(), qw, seqs, shape);
    auto t2 = std::chrono::steady_clock::now();
    tiled.push_back(std::chrono::duration<double>(t1 - t0).count());
    naive.push_back(std::chrono::duration<double>(t2 - t1).count());
  }
  return {median(tiled), median(naive)};
}

// 64 sequences with lengths uniform in 16..1024 grown token by token in
// the paged pool: live token slots / allocated token slots.
nlohmann::json kv_utilization(int block_size, int n_seqs, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> len(16, 1024);
  kv::KvManager kv({block_size, n_seqs * (1024 / block_size + 1) + 1});
  std::vector<kv::BlockTable> tables(n_seqs);
  std::vector<int> target(n_seqs);
  int64_t live = 0;
  for (int i = 0; i < n_seqs; ++i) target[i] = len(rng);
  std::vector<kv::CopyOp> copies;
  for (int i = 0; i < n_seqs; ++i) {
    // Prompt in one go, then decode tokens one at a time.
    const int prompt = std::max(1, target[i] / 2);
    kv.reserve(tables[i], prompt, copies);
    for (int t = prompt + 1; t <= target[i]; ++t) kv.reserve(tables[i], t, copies);
    live += target[i];
  }
  const kv::KvUsage u = kv.usage();
  // Contiguous per-request allocation reserves the longest possible output
  // up front: what the same sequences would waste with max length 1024.
  const double contiguous = static_cast<double>(live) / (static_cast<double>(n_seqs) * 1024.0);
  return {{"sequences", n_seqs}, {"block_size", block_size}, {"live_slots", u.live_slots},
          {"allocated_slots", u.allocated_slots}, {"utilization", u.utilization()},
          {"contiguous_max_len_utilization", contiguous}};
}

}  // namespace

int main(int argc, char** argv) {
  bool smoke = false;
  int threads = 2;
  Isa isa = active_isa();
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--smoke")) smoke = true;
    else if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) threads = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--isa") && i + 1 < argc) {
      auto p = parse_isa(argv[++i]);
      if (!p || !isa_supported(*p)) {
        std::fprintf(stderr, "error: unsupported --isa %s\n", argv[i]);
        return 1;
      }
      isa = *p;
    } else {
      std::fprintf(stderr, "usage: %s [--smoke] [--threads N] [--isa scalar|avx2|avx512]\n", argv[0]);
      return 1;
    }
  }
  ThreadPool pool(threads);
  Shape sh;
  nlohmann::json out;
  out["benchmark"] = "attention";
  out["what"] = "decode: one query token per sequence, one layer of the 1b preset (32 heads, 8 KV heads, head dim 64), F16 KV, block 16";
  out["threads"] = threads;
  out["isa"] = std::string(isa_name(isa));
  nlohmann::json rows = nlohmann::json::array();
  const std::vector<int> ctxs = smoke ? std::vector<int>{256, 512} : std::vector<int>{256, 512, 1024, 2048, 4096, 8192};
  bool faster_everywhere = true;
  std::vector<double> xs, ys;
  for (int ctx : ctxs) {
    const auto [tiled, naive] = time_decode(sh, ctx, smoke ? 3 : 21, pool, isa);
    const double ns_per_key = tiled * 1e9 / ctx;
    if (ctx >= 512 && tiled >= naive) faster_everywhere = false;
    xs.push_back(ctx);
    ys.push_back(tiled * 1e6);
    rows.push_back({{"context", ctx}, {"tiled_us", tiled * 1e6}, {"naive_us", naive * 1e6},
                    {"speedup", naive / tiled}, {"tiled_ns_per_context_token", ns_per_key},
                    {"tiled_us_per_token_16_layers", tiled * 1e6 * 16}});
  }
  out["decode"] = rows;
  out["tiled_faster_than_naive_at_512_and_above"] = faster_everywhere;
  // Linear growth: least-squares fit t = a + b * context and its R^2.
  const double n = static_cast<double>(xs.size());
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (size_t i = 0; i < xs.size(); ++i) sx += xs[i], sy += ys[i], sxx += xs[i] * xs[i], sxy += xs[i] * ys[i];
  const double b = (n * sxy - sx * sy) / (n * sxx - sx * sx), a = (sy - b * sx) / n;
  double ss_res = 0, ss_tot = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    ss_res += (ys[i] - a - b * xs[i]) * (ys[i] - a - b * xs[i]);
    ss_tot += (ys[i] - sy / n) * (ys[i] - sy / n);
  }
  const double r2 = ss_tot > 0 ? 1.0 - ss_res / ss_tot : 1.0;
  out["tiled_linear_fit"] = {{"intercept_us", a}, {"us_per_context_token", b}, {"r2", r2}};
  out["tiled_time_linear_in_context"] = r2 >= 0.95;
  out["kv_utilization"] = kv_utilization(16, 64, 2024);
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}
