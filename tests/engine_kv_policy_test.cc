// Per-request bounded KV policies in the engine (issue 17 part 2): the
// engine with a policy gives SequenceRunner's tokens for that policy, each of
// 64 concurrent requests with its own policy and budget gives its tokens
// alone, and no KV block is left behind.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <ctime>
#include <map>
#include <random>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/sequence_runner.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "util/test_util.h"

namespace tessera::engine {
namespace {

const testing::LoadedWithTokenizer& model260k() { return testing::stories260k(); }

EngineConfig policy_engine_config() {
  EngineConfig c;
  c.max_model_len = 512;
  c.threads = 2;
  c.kv_type = DType::kF32;
  c.seed = 7;
  return c;
}

SamplingParams greedy_with(const kv::KvPolicy& policy, int32_t max_tokens) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  p.kv_policy = policy;
  return p;
}

// Runs the engine dry; each request's generated tokens by id.
std::map<RequestId, std::vector<int32_t>> drain(Engine& e) {
  std::map<RequestId, std::vector<int32_t>> out;
  int64_t guard = 0;
  while (e.has_unfinished()) {
    for (const RequestOutput& o : e.step()) out[o.id].insert(out[o.id].end(), o.new_tokens.begin(), o.new_tokens.end());
    EXPECT_LT(++guard, 200000);
  }
  return out;
}

// Greedy decoding through SequenceRunner with the same policy: the prompt
// in one append, then one token at a time (as the engine decodes).
std::vector<int32_t> runner_tokens(const Model& m, const kv::KvPolicy& policy, const std::vector<int32_t>& prompt,
                                   int32_t n) {
  ThreadPool pool(2);
  SequenceRunner r(m, {.n_ctx = 512, .kv_type = DType::kF32, .kv_policy = policy}, pool);
  std::vector<int32_t> out;
  std::span<const float> logits = r.append(prompt);
  for (int32_t i = 0; i < n; ++i) {
    const int32_t t = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.push_back(t);
    if (i + 1 < n) logits = r.append(std::span<const int32_t>(&t, 1));
  }
  return out;
}

std::vector<int32_t> prompt_ids(const std::string& text) { return model260k().tok->encode(text, /*add_special=*/true); }

TEST(EngineKvPolicy, SameTokensAsSequenceRunner) {
  const Model& m = *model260k().lm.model;
  const std::vector<int32_t> prompt = prompt_ids("Once upon a time, there was a little dog named Max. Max liked to run");
  ASSERT_LT(static_cast<int64_t>(prompt.size()), 60);
  for (const kv::KvPolicy& policy : {kv::KvPolicy{kv::KvPolicyKind::kWindow, 64, 4, 0},
                                     kv::KvPolicy{kv::KvPolicyKind::kSink, 64, 4, 0},
                                     kv::KvPolicy{kv::KvPolicyKind::kSink, 80, 2, 1},
                                     kv::KvPolicy{kv::KvPolicyKind::kH2O, 64, 0, 0},
                                     kv::KvPolicy{kv::KvPolicyKind::kSpAtten, 64, 0, 0},
                                     kv::KvPolicy{kv::KvPolicyKind::kRecompute, 64, 0, 0}}) {
    const int32_t n = 300;  // prompt + generation well past the budget
    const std::vector<int32_t> want = runner_tokens(m, policy, prompt, n);
    Engine e(m, model260k().tok.get(), policy_engine_config());
    const RequestId id = e.add_request(prompt, greedy_with(policy, n));
    auto got = drain(e);
    EXPECT_EQ(got[id], want) << kv::kv_policy_name(policy.kind) << " " << policy.budget;
    EXPECT_EQ(e.stats().kv_blocks_used, 0);
  }
}

TEST(EngineKvPolicy, BoundedRequestIsNotCappedByTheCache) {
  const Model& m = *model260k().lm.model;
  EngineConfig c = policy_engine_config();
  c.num_kv_blocks = 24;  // 384 tokens of cache
  Engine e(m, model260k().tok.get(), c);
  const std::vector<int32_t> prompt = prompt_ids("Once upon a time");
  // Dense: capped by the cache.
  EXPECT_THROW(e.add_request(prompt, greedy_with({}, 600)), Error);
  const RequestId id = e.add_request(prompt, greedy_with({kv::KvPolicyKind::kSink, 128, 4, 0}, 600));
  int64_t most = 0;
  int64_t n = 0;
  while (e.has_unfinished()) {
    for (const RequestOutput& o : e.step()) {
      if (o.id == id) n += static_cast<int64_t>(o.new_tokens.size());
    }
    most = std::max(most, e.stats().kv_blocks_used);
  }
  EXPECT_EQ(n, 600);
  EXPECT_LE(most, 128 / 16 + 2);
  EXPECT_EQ(e.stats().kv_blocks_used, 0);
  // A budget the pool cannot hold, and a bad policy, are refused.
  EXPECT_THROW(e.add_request(prompt, greedy_with({kv::KvPolicyKind::kWindow, 512, 4, 0}, 10)), Error);
  EXPECT_THROW(e.add_request(prompt, greedy_with({kv::KvPolicyKind::kSink, 4, 4, 0}, 10)), Error);
}

// 64 requests, each its own policy (dense, window, sink, h2o, spatten, recompute) and
// budget (32..256), all in one engine: each gives its tokens alone. Prompts
// are shorter than every budget, so where the step's token budget splits
// them does not change which tokens are evicted when (and H2O's attention
// mass is summed exactly, whatever the split).
TEST(EngineKvPolicy, SixtyFourConcurrentPoliciesEachAsAlone) {
  const Model& m = *model260k().lm.model;
  const char* texts[] = {"Once upon a time", "The cat sat on the mat", "Lily wanted to play", "Tom had a red ball",
                         "One day, a bird"};
  std::mt19937 rng(17);
  struct Job {
    std::vector<int32_t> prompt;
    SamplingParams params;
  };
  std::vector<Job> jobs;
  // 64 in Release; under the sanitizers 30 (five of each policy), which
  // still batch every policy with every other in one engine, at under half
  // the time (the 64 "alone" runs were this suite's longest test there).
  const int n_jobs = testing::kAddressSanitizer ? 30 : 64;
  for (int i = 0; i < n_jobs; ++i) {
    const kv::KvPolicyKind kind =
        std::array{kv::KvPolicyKind::kDense, kv::KvPolicyKind::kWindow, kv::KvPolicyKind::kSink,
                   kv::KvPolicyKind::kH2O, kv::KvPolicyKind::kSpAtten, kv::KvPolicyKind::kRecompute}[static_cast<size_t>(i % 6)];
    // Recompute prefills its whole budget at every token: smaller budgets
    // keep the test short (under sanitizers too).
    const bool recompute = kind == kv::KvPolicyKind::kRecompute;
    const int64_t budget = 32 + static_cast<int64_t>(rng() % (recompute ? 33 : 225));
    const kv::KvPolicy policy{kind, kind == kv::KvPolicyKind::kDense ? 0 : budget, 4, 0};
    const int32_t n = static_cast<int32_t>(std::min<int64_t>(budget + 20 + rng() % 40, 400));
    jobs.push_back({prompt_ids(texts[(i / 5) % 5]), greedy_with(policy, n)});
  }
  std::vector<std::vector<int32_t>> alone;
  for (const Job& j : jobs) {
    Engine e(m, model260k().tok.get(), policy_engine_config());
    const RequestId id = e.add_request(j.prompt, j.params);
    alone.push_back(drain(e)[id]);
  }
  Engine e(m, model260k().tok.get(), policy_engine_config());
  std::vector<RequestId> ids;
  for (const Job& j : jobs) ids.push_back(e.add_request(j.prompt, j.params));
  auto got = drain(e);
  EXPECT_EQ(e.stats().preemptions_total, 0);
  for (size_t i = 0; i < jobs.size(); ++i) {
    EXPECT_EQ(got[ids[i]], alone[i]) << "request " << i << " " << kv::kv_policy_name(jobs[i].params.kv_policy.kind)
                                     << " budget " << jobs[i].params.kv_policy.budget;
  }
  EXPECT_EQ(e.stats().kv_blocks_used, 0);
}

// n > 1 samples of a bounded request share the prompt's blocks
// copy-on-write; aborts and a pool small enough to preempt leave nothing.
TEST(EngineKvPolicy, ForksAbortsAndPreemptionLeaveNoBlocks) {
  const Model& m = *model260k().lm.model;
  EngineConfig c = policy_engine_config();
  c.num_kv_blocks = 40;
  Engine e(m, model260k().tok.get(), c);
  SamplingParams p = greedy_with({kv::KvPolicyKind::kSink, 64, 4, 0}, 200);
  p.temperature = 0.8f;
  p.n = 4;
  p.seed = 5;
  std::vector<RequestId> ids;
  for (int i = 0; i < 6; ++i) ids.push_back(e.add_request(prompt_ids("Once upon a time, Lily"), p));
  std::map<RequestId, std::vector<int32_t>> out;
  for (int s = 0; e.has_unfinished(); ++s) {
    if (s == 40) e.abort(ids[1]);
    for (const RequestOutput& o : e.step()) out[o.id].insert(out[o.id].end(), o.new_tokens.begin(), o.new_tokens.end());
    ASSERT_LT(s, 200000);
  }
  EXPECT_GT(e.stats().preemptions_total, 0) << "the pool is meant to be too small for all 24 samples";
  EXPECT_EQ(e.stats().kv_blocks_used, 0);
  EXPECT_EQ(out[ids[0]].size(), 200u);
  EXPECT_LT(out[ids[1]].size(), 200u);
}

// Issue 17 acceptance 3: one request streaming 100 000 tokens (200 times
// stories260K's context) under a sink policy, and 20 000 under H2O, holds
// a flat number of KV blocks and flat resident memory from its first tenth
// on, and its last tenth of steps is no slower than its first (lower
// deciles of per-step CPU times of the one thread that runs them: robust to
// a noisy machine and to other tests running beside it, which wall-clock
// times were not under ctest -j2, nor medians of CPU times once: 1.50x). Under AddressSanitizer: 20 000
// sink and 5 000 H2O tokens, and no RSS bound (its quarantine keeps freed
// memory).
TEST(EngineKvPolicy, LongStreamsStayFlat) {
  const Model& m = *model260k().lm.model;
  EngineConfig c = policy_engine_config();
  c.kv_type = DType::kF16;
  c.num_kv_blocks = 64;
  c.threads = 1;  // every step on this thread, so its CPU time is the step's
  const int64_t budget = 256;
  const bool asan = testing::kAddressSanitizer;
  auto thread_seconds = [] {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  };
  for (const auto& [policy, n] : {std::pair{kv::KvPolicy{kv::KvPolicyKind::kSink, budget, 4, 0}, asan ? 20000 : 100000},
                                  std::pair{kv::KvPolicy{kv::KvPolicyKind::kH2O, budget, 4, 0}, asan ? 5000 : 20000}}) {
    Engine e(m, model260k().tok.get(), c);
    const RequestId id = e.add_request(prompt_ids("Once upon a time"), greedy_with(policy, n));
    std::vector<double> step_seconds;
    step_seconds.reserve(static_cast<size_t>(n) + 64);  // this test's own memory stays flat too
    int64_t most = 0, got = 0;
    long rss_tenth = 0, rss_most = 0;
    while (e.has_unfinished()) {
      const double t0 = thread_seconds();
      for (const RequestOutput& o : e.step()) {
        if (o.id == id) got += static_cast<int64_t>(o.new_tokens.size());
      }
      step_seconds.push_back(thread_seconds() - t0);
      most = std::max(most, e.stats().kv_blocks_used);
      if (got == n / 10) rss_tenth = testing::rss_kib();
      if (got > n / 10 && got % 1000 == 0) rss_most = std::max(rss_most, testing::rss_kib());
    }
    const char* name = kv::kv_policy_name(policy.kind);
    EXPECT_EQ(got, n) << name;
    EXPECT_LE(most, budget / 16 + 2) << name;
    EXPECT_EQ(e.stats().kv_blocks_used, 0) << name;
    // The request keeps its token ids (4 bytes a token) and text (about 4),
    // in buffers that grow by doubling: at most 16 bytes a token, and 512 KiB
    // for the allocator's moods; the rest stays flat (a KV cache that leaked
    // would take 640 bytes a token here).
    if (!testing::kAddressSanitizer) {
      EXPECT_LT(rss_most - rss_tenth, 512 + 16 * (n - n / 10) / 1024) << name << ": " << rss_tenth << " KiB after a tenth, at most " << rss_most;
    }
    // A step's cost in a tenth of the stream: its lower decile, not its
    // median. Another process on the machine (ctest -j2 runs one beside this)
    // makes this thread's steps take more CPU time too (shared caches and
    // memory), for a while, in any tenth; a cost that grows with the stream
    // raises every step, the cheapest included.
    auto low_decile_of_tenth = [&](size_t k) {
      const size_t len = step_seconds.size() / 10;
      std::vector<double> v(step_seconds.begin() + static_cast<std::ptrdiff_t>(k * len),
                            step_seconds.begin() + static_cast<std::ptrdiff_t>((k + 1) * len));
      std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(len / 10), v.end());
      return v[len / 10];
    };
    // The first tenth is past the budget already (n / 10 >= 500 tokens > 256).
    const double first = low_decile_of_tenth(0), last = low_decile_of_tenth(9);
    // Not under AddressSanitizer, for the reason there is no RSS bound there:
    // its quarantine grows (65 -> 135 MB over 20 000 sink tokens in a CI run)
    // and the sink steps' CPU time with it (0.77 -> 1.34 ms).
    if (!testing::kAddressSanitizer) {
      EXPECT_LT(last, 1.5 * first) << name << ": step " << first * 1e3 << " ms of CPU in the first tenth (lower decile), "
                                   << last * 1e3 << " ms in the last";
    }
    std::printf("%s, %d tokens: step %.3f ms of CPU (first tenth, lower decile) %.3f ms (last), RSS %ld -> %ld KiB\n", name, n,
                first * 1e3, last * 1e3, rss_tenth, rss_most);
  }
}

}  // namespace
}  // namespace tessera::engine
