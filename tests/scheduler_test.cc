// Scheduler and KV manager against a synthetic model: no tensors, only a
// fake KV store that records which token each slot holds. The fake model's
// next token is a hash of what the request's block table lets it read, so a
// scheduling or copy-on-write bug changes the output and a test sees it.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>

#include "engine/scheduler.h"
#include "kv/kv_manager.h"

namespace tessera::engine {
namespace {

constexpr int32_t kVocab = 1000;

struct FakeKv {
  std::vector<int32_t> slots;  // token id written at each slot, -1 if none
  int32_t block_size;
  FakeKv(int32_t num_blocks, int32_t bs) : slots(static_cast<size_t>(num_blocks) * bs, -1), block_size(bs) {}
  void copy(const kv::CopyOp& op) {
    for (int32_t i = 0; i < block_size; ++i) slots[op.dst * block_size + i] = slots[op.src * block_size + i];
  }
};

// The first position a query at n_visible reads (sliding window: the last
// `window` keys, itself included; 0: everything).
int64_t first_read(int64_t n_visible, int64_t window) {
  return window > 0 ? std::max<int64_t>(0, n_visible - window + 1) : 0;
}

// Next token from everything visible through the block table.
int32_t fake_next_token(const Request& r, const FakeKv& kv, int64_t n_visible, int64_t window = 0) {
  uint64_t h = 1469598103934665603ull;
  for (int64_t p = first_read(n_visible, window); p < n_visible; ++p) {
    const int32_t t = kv.slots[r.blocks.slot(p, kv.block_size)];
    h = (h ^ static_cast<uint64_t>(t + 7)) * 1099511628211ull;
  }
  return static_cast<int32_t>(h % kVocab);
}

// The fake model's next token after a whole token sequence (what
// fake_next_token reads when the cache holds exactly these tokens).
int32_t next_of(const std::vector<int32_t>& seq, int64_t window = 0) {
  uint64_t h = 1469598103934665603ull;
  const int64_t n = static_cast<int64_t>(seq.size());
  for (int64_t p = first_read(n, window); p < n; ++p) h = (h ^ static_cast<uint64_t>(seq[p] + 7)) * 1099511628211ull;
  return static_cast<int32_t>(h % kVocab);
}

struct Harness {
  kv::KvManager kv;
  Scheduler sched;
  FakeKv store;
  std::map<RequestId, std::vector<int32_t>> outputs;
  int64_t steps = 0;
  RequestId next_id = 1;
  // Speculative decoding: every decoding request gets a draft of 0..6
  // tokens, each the true next token or (30%) a wrong one; verification
  // keeps the accepted prefix and the model's own token after it.
  bool speculate = false;
  std::mt19937 draft_rng{77};
  int64_t drafted = 0, accepted = 0;
  int64_t max_blocks_held = 0;  // by one request, with a sliding window

  void propose_drafts() {
    std::uniform_int_distribution<int> len(0, 6), wrong(0, 9), tok(0, kVocab - 1);
    for (Request* r : sched.running()) {
      r->draft.clear();
      if (r->num_tokens() - r->num_computed_tokens != 1) continue;
      const int64_t room = r->params.max_tokens - r->num_output_tokens() - 1;
      std::vector<int32_t> seq = r->tokens;
      for (int64_t i = 0, n = std::min<int64_t>(len(draft_rng), room); i < n; ++i) {
        const int32_t t = wrong(draft_rng) < 3 ? tok(draft_rng) : next_of(seq, sched.config().sliding_window);
        r->draft.push_back(t);
        seq.push_back(t);
      }
    }
  }

  Harness(int32_t num_blocks, int32_t bs, SchedulerConfig sc)
      : kv({bs, num_blocks}), sched(sc, kv), store(num_blocks, bs) {}

  RequestId add(std::vector<int32_t> prompt, int32_t max_tokens) {
    auto r = std::make_unique<Request>();
    r->id = r->group = next_id++;
    r->num_prompt_tokens = static_cast<int64_t>(prompt.size());
    r->tokens = std::move(prompt);
    r->params.max_tokens = max_tokens;
    EXPECT_EQ(sched.check_admissible(r->num_prompt_tokens, max_tokens), "");
    const RequestId id = r->id;
    sched.add(std::move(r));
    return id;
  }

  // One engine step with the fake model. Returns false if nothing ran.
  bool step() {
    if (speculate) propose_drafts();
    SchedulerOutput out = sched.schedule();
    if (out.empty()) return false;
    ++steps;
    EXPECT_LE(out.num_tokens, sched.config().max_num_batched_tokens);
    EXPECT_LE(static_cast<int64_t>(sched.num_running()), sched.config().max_num_seqs);
    for (const kv::CopyOp& op : out.copies) store.copy(op);
    // Write the KV of the scheduled tokens, then check every visible slot.
    for (const ScheduledRequest& s : out.scheduled) {
      Request& r = *s.req;
      EXPECT_GE(r.blocks.num_tokens, r.num_computed_tokens + s.num_new_tokens);
      for (int64_t p = r.num_computed_tokens; p < r.num_computed_tokens + s.num_new_tokens; ++p) {
        const int64_t slot = r.blocks.slot(p, store.block_size);
        EXPECT_GT(slot / store.block_size, 0) << "token written to the null block";
        EXPECT_EQ(kv.pool().ref_count(r.blocks.blocks[p / store.block_size]), 1)
            << "request " << r.id << " writes position " << p << " into a shared block";
        EXPECT_FALSE(kv.pool().hash_of(r.blocks.blocks[p / store.block_size]).has_value())
            << "request " << r.id << " writes position " << p << " into a cached (hashed) block";
        store.slots[slot] = r.token_or_draft(p);
      }
      EXPECT_EQ(s.num_draft, static_cast<int64_t>(r.draft.size()));
      EXPECT_TRUE(s.num_draft == 0 || s.sample);
    }
    sched.on_step_computed(out);
    for (const ScheduledRequest& s : out.scheduled) {
      Request& r = *s.req;
      const int64_t window = sched.config().sliding_window;
      for (int64_t p = first_read(r.num_computed_tokens, window); p < r.num_computed_tokens; ++p) {
        EXPECT_EQ(store.slots[r.blocks.slot(p, store.block_size)], r.tokens[p])
            << "request " << r.id << " reads a wrong token at position " << p;
      }
      if (window > 0) {
        // Blocks held: the window, a block of margin, the block being written.
        const int64_t held = std::count_if(r.blocks.blocks.begin(), r.blocks.blocks.end(),
                                           [](kv::BlockId b) { return b != kv::kNullBlock; });
        max_blocks_held = std::max(max_blocks_held, held);
      }
      if (!s.sample) continue;
      // Row i sees the request's tokens and the draft's first i (all
      // accepted, or the loop has ended).
      const std::vector<int32_t> draft = r.draft;
      int64_t ok = 0;
      for (int64_t i = 0; i <= s.num_draft; ++i) {
        const int32_t tok = fake_next_token(r, store, r.num_computed_tokens + i, window);
        r.tokens.push_back(tok);
        outputs[r.id].push_back(tok);
        if (r.num_output_tokens() >= r.params.max_tokens) sched.finish(&r, FinishReason::kLength);
        if (r.finished() || i == s.num_draft || tok != draft[static_cast<size_t>(i)]) break;
        ++ok;
      }
      if (s.num_draft > 0) {
        drafted += s.num_draft;
        accepted += ok;
        sched.on_draft_verified(&r, ok);
        EXPECT_EQ(r.blocks.num_tokens, r.finished() ? 0 : r.num_computed_tokens);
      }
    }
    const std::string inv = kv.pool().check_invariants();
    EXPECT_EQ(inv, "");
    return true;
  }

  void run_to_completion(int64_t max_steps) {
    while (sched.has_unfinished()) {
      ASSERT_TRUE(step()) << "scheduler stalled with " << sched.num_running() << " running and "
                          << sched.num_waiting() << " waiting";
      ASSERT_LT(steps, max_steps) << "no progress (livelock?)";
    }
  }
};

std::vector<int32_t> random_prompt(std::mt19937& rng, int len) {
  std::uniform_int_distribution<int32_t> tok(0, kVocab - 1);
  std::vector<int32_t> p(static_cast<size_t>(len));
  for (auto& t : p) t = tok(rng);
  return p;
}

std::vector<int32_t> run_alone(const std::vector<int32_t>& prompt, int32_t max_tokens) {
  SchedulerConfig sc;
  sc.max_model_len = 4096;
  Harness h(512, 4, sc);
  const RequestId id = h.add(prompt, max_tokens);
  h.run_to_completion(100000);
  return h.outputs[id];
}

// What a model with a sliding window writes after `prompt`, computed
// directly (no scheduler, no cache).
std::vector<int32_t> windowed_alone(std::vector<int32_t> seq, int32_t max_tokens, int64_t window) {
  std::vector<int32_t> out;
  for (int32_t i = 0; i < max_tokens; ++i) {
    out.push_back(next_of(seq, window));
    seq.push_back(out.back());
  }
  return out;
}

// Sliding window: random long requests against a pool that could not hold
// them whole. Blocks leave as the window moves; every request still reads
// exactly its window (outputs equal the direct computation), holds at most
// the window's blocks plus two, and nothing leaks; with drafts (rollback)
// and with prefix caching (hits on blocks later dropped).
void run_window_workload(bool speculate, bool prefix_caching) {
  std::mt19937 rng(4321);
  SchedulerConfig sc;
  sc.max_num_seqs = 6;
  sc.max_num_batched_tokens = 16;
  sc.max_model_len = 4096;
  sc.enable_prefix_caching = prefix_caching;
  sc.sliding_window = 10;
  Harness h(/*num_blocks=*/41, /*block_size=*/4, sc);  // 160 slots: far less than 6 requests of up to 200
  h.speculate = speculate;
  const std::vector<int32_t> shared = random_prompt(rng, 30);
  std::map<RequestId, std::pair<std::vector<int32_t>, int32_t>> specs;
  std::uniform_int_distribution<int> len(1, 60), out(1, 140), arrivals(0, 2), coin(0, 1);
  int added = 0;
  while (added < 300 || h.sched.has_unfinished()) {
    for (int a = arrivals(rng); a > 0 && added < 300; --a, ++added) {
      std::vector<int32_t> p = coin(rng) ? shared : std::vector<int32_t>{};
      const auto tail = random_prompt(rng, len(rng));
      p.insert(p.end(), tail.begin(), tail.end());
      const int32_t m = out(rng);
      specs[h.add(p, m)] = {p, m};
    }
    h.step();
    ASSERT_LT(h.steps, 200000);
  }
  for (const auto& [id, spec] : specs) {
    ASSERT_EQ(h.outputs[id], windowed_alone(spec.first, spec.second, sc.sliding_window)) << "request " << id;
  }
  // ceil(10 / 4) + 1 blocks for the window's keys across block boundaries,
  // one of margin, one being written (chunks and drafts run ahead of it).
  EXPECT_LE(h.max_blocks_held, 3 + 1 + 1 + (16 + 4 - 1) / 4);
  EXPECT_GT(h.max_blocks_held, 0);
  EXPECT_EQ(h.kv.pool().stats().used, 0);
  EXPECT_EQ(h.kv.pool().num_free(), 40);
  if (speculate) {
    EXPECT_GT(h.accepted, 500);
  }
}

TEST(Scheduler, SlidingWindowGivesBlocksBackAndReadsOnlyTheWindow) { run_window_workload(false, false); }
TEST(Scheduler, SlidingWindowWithDraftsAndPrefixCaching) { run_window_workload(true, true); }

TEST(Scheduler, ChunkedPrefillRespectsTokenBudget) {
  SchedulerConfig sc;
  sc.max_num_batched_tokens = 7;
  sc.max_model_len = 4096;
  Harness h(64, 4, sc);
  std::mt19937 rng(1);
  const std::vector<int32_t> prompt = random_prompt(rng, 30);
  const RequestId id = h.add(prompt, 3);
  h.run_to_completion(100);
  // 30 prompt tokens at 7 per step: 5 steps to the first token, then 2 more.
  EXPECT_EQ(h.steps, 5 + 2);
  EXPECT_EQ(h.outputs[id], run_alone(prompt, 3));
}

void run_preemption_workload(bool speculate) {
  // Thousands of random arrivals against a pool far too small for all of
  // them at once: requests get preempted and recomputed, and every one must
  // finish with the tokens it produces when run alone (without drafts).
  std::mt19937 rng(1234);
  SchedulerConfig sc;
  sc.max_num_seqs = 8;
  sc.max_num_batched_tokens = 32;
  sc.max_model_len = 4096;
  sc.enable_prefix_caching = false;
  Harness h(/*num_blocks=*/25, /*block_size=*/4, sc);  // 24 usable blocks = 96 token slots
  h.speculate = speculate;
  std::map<RequestId, std::pair<std::vector<int32_t>, int32_t>> specs;
  std::uniform_int_distribution<int> len(1, 40), out(1, 30), arrivals(0, 3);
  int added = 0;
  while (added < 2000 || h.sched.has_unfinished()) {
    for (int a = arrivals(rng); a > 0 && added < 2000; --a, ++added) {
      auto p = random_prompt(rng, len(rng));
      const int32_t m = out(rng);
      specs[h.add(p, m)] = {p, m};
    }
    h.step();
    ASSERT_LT(h.steps, 200000);
  }
  EXPECT_GT(h.sched.stats().preemptions, 100) << "the pool was meant to force preemption";
  for (const auto& [id, spec] : specs) {
    ASSERT_EQ(h.outputs[id], run_alone(spec.first, spec.second)) << "request " << id;
  }
  EXPECT_EQ(h.kv.pool().stats().used, 0);
  EXPECT_EQ(h.kv.pool().num_free(), 24);
  if (speculate) {
    EXPECT_GT(h.accepted, 1000);
    EXPECT_GT(h.drafted - h.accepted, 1000);
  }
}

TEST(Scheduler, SameTokensAsAloneUnderPreemptionWithTinyPool) { run_preemption_workload(false); }

// Drafts ride on decode steps, are trimmed to the budget, dropped before
// anyone is preempted for them, and their rejected tokens' slots are given
// back: outputs stay those of each request alone, nothing leaks.
TEST(Scheduler, DraftsKeepOutputsUnderPreemption) { run_preemption_workload(true); }

struct PrefixWorkload {
  SchedulerStats sched;
  kv::BlockPoolStats pool;
};

// 800 requests over three shared prefixes, under eviction and preemption
// pressure; every request's output must equal its output run alone.
void run_prefix_workload(const kv::BlockHashFn& hash, PrefixWorkload* result, bool speculate = false) {
  std::mt19937 rng(99);
  SchedulerConfig sc;
  sc.block_hash = hash;
  sc.max_num_seqs = 6;
  sc.max_num_batched_tokens = 24;
  sc.max_model_len = 4096;
  sc.enable_prefix_caching = true;
  Harness h(/*num_blocks=*/41, /*block_size=*/4, sc);
  h.speculate = speculate;
  const std::vector<std::vector<int32_t>> prefixes = {random_prompt(rng, 23), random_prompt(rng, 9), random_prompt(rng, 40)};
  std::map<RequestId, std::pair<std::vector<int32_t>, int32_t>> specs;
  std::uniform_int_distribution<int> pick(0, 2), suffix(0, 12), out(1, 20), arrivals(0, 2);
  int added = 0;
  while (added < 800 || h.sched.has_unfinished()) {
    for (int a = arrivals(rng); a > 0 && added < 800; --a, ++added) {
      auto p = prefixes[pick(rng)];
      const auto s = random_prompt(rng, suffix(rng));
      p.insert(p.end(), s.begin(), s.end());
      const int32_t m = out(rng);
      specs[h.add(p, m)] = {p, m};
    }
    h.step();
    ASSERT_LT(h.steps, 200000);
  }
  for (const auto& [id, spec] : specs) {
    ASSERT_EQ(h.outputs[id], run_alone(spec.first, spec.second)) << "request " << id;
  }
  EXPECT_EQ(h.kv.pool().stats().used, 0);
  *result = {h.sched.stats(), h.kv.pool().stats()};
}

// Blocks that held rejected draft tokens are never registered: a request
// that hit one would read the wrong tokens and its output would differ.
TEST(Scheduler, PrefixCachingWithDraftsSharesOnlyAcceptedTokens) {
  PrefixWorkload w;
  run_prefix_workload({}, &w, /*speculate=*/true);
  if (HasFatalFailure()) return;
  EXPECT_GT(w.sched.prefix_hit_tokens, w.sched.prefix_query_tokens / 4);
}

TEST(Scheduler, PrefixCachingGivesSameTokensAndHits) {
  PrefixWorkload w;
  run_prefix_workload({}, &w);
  if (HasFatalFailure()) return;
  EXPECT_GT(w.sched.prefix_hit_tokens, w.sched.prefix_query_tokens / 4);
  EXPECT_GT(w.sched.preemptions, 0) << "eviction and preemption pressure expected";
}

// Issue 13.6: a hash of the block's depth alone makes block b of every
// prompt collide with block b of every other; blocks are still shared only
// between requests whose prefixes are equal.
TEST(Scheduler, PrefixCacheCollisionsNeverShareKv) {
  PrefixWorkload w;
  run_prefix_workload([](uint64_t parent, uint64_t, std::span<const int32_t>) { return parent + 1; }, &w);
  if (HasFatalFailure()) return;
  EXPECT_GT(w.pool.hash_mismatches, 100) << "collisions must be exercised";
  EXPECT_GT(w.sched.prefix_hit_tokens, w.sched.prefix_query_tokens / 10) << "equal prefixes must still hit";
  EXPECT_GT(w.sched.preemptions, 0);
}

TEST(Scheduler, RejectsRequestsThatCanNeverFit) {
  SchedulerConfig sc;
  sc.max_model_len = 100;
  {
    kv::KvManager kv({4, 31});  // 30 blocks = 120 tokens: the model's context is the limit
    Scheduler s(sc, kv);
    EXPECT_EQ(s.config().max_model_len, 100);
    EXPECT_NE(s.check_admissible(0, 10), "");
    EXPECT_NE(s.check_admissible(100, 1).find("maximum context length is 100"), std::string::npos);
    EXPECT_NE(s.check_admissible(90, 20).find("maximum context length is 100"), std::string::npos);
    EXPECT_EQ(s.check_admissible(90, 10), "");
  }
  // A pool smaller than one full context caps the context at what it holds
  // (issue 13: admission asks only that a request fit, and one alone in the
  // pool can always reach its end).
  kv::KvManager kv({4, 11});  // 10 blocks = 40 tokens
  Scheduler s(sc, kv);
  EXPECT_EQ(s.config().max_model_len, 40);
  EXPECT_NE(s.check_admissible(30, 20).find("KV cache holds at most 40 tokens per sequence (the model's context is 100"),
            std::string::npos);
  EXPECT_NE(s.check_admissible(40, 1).find("the prompt has 40 tokens"), std::string::npos);
  EXPECT_EQ(s.check_admissible(30, 10), "");
}

// Many requests that each may grow to the whole pool, admitted together:
// preemption lets every one of them finish, none is refused for what others
// hold, and the pool is empty afterwards.
TEST(Scheduler, RequestsUpToTheWholePoolAllFinish) {
  SchedulerConfig sc;
  sc.max_model_len = 1000;  // more than the pool: capped to 64 tokens
  sc.max_num_batched_tokens = 32;
  Harness h(17, 4, sc);
  ASSERT_EQ(h.sched.config().max_model_len, 64);
  std::mt19937 rng(3);
  std::vector<std::pair<RequestId, std::vector<int32_t>>> reqs;
  for (int i = 0; i < 12; ++i) {
    const int prompt = 1 + static_cast<int>(rng() % 30);
    std::vector<int32_t> p = random_prompt(rng, prompt);
    reqs.emplace_back(h.add(p, 64 - prompt), p);
  }
  h.run_to_completion(100000);
  for (const auto& [id, p] : reqs) {
    const int32_t want = 64 - static_cast<int32_t>(p.size());
    ASSERT_EQ(h.outputs[id].size(), static_cast<size_t>(want)) << "request " << id << " ran to the cache's context";
    EXPECT_EQ(h.outputs[id], run_alone(p, want));
  }
  EXPECT_GT(h.sched.stats().preemptions, 0);
  EXPECT_EQ(h.kv.pool().stats().used, 0);
}

TEST(Scheduler, NewRequestGetsFirstTokenWithinBoundedSteps) {
  // 20 requests decoding; a new 100-token prompt arrives. Running requests
  // take 20 of the 32-token budget, leaving 12 per step for the prompt: its
  // first token comes after ceil(100 / 12) = 9 steps.
  std::mt19937 rng(5);
  SchedulerConfig sc;
  sc.max_num_seqs = 32;
  sc.max_num_batched_tokens = 32;
  sc.max_model_len = 4096;
  Harness h(2000, 16, sc);
  for (int i = 0; i < 20; ++i) h.add(random_prompt(rng, 3), 1000);
  for (int i = 0; i < 5; ++i) h.step();
  const RequestId late = h.add(random_prompt(rng, 100), 5);
  int steps = 0;
  while (h.outputs[late].empty()) {
    ASSERT_TRUE(h.step());
    ++steps;
  }
  EXPECT_EQ(steps, 9);
}

TEST(KvManager, DroppedBlocksLeaveNullEntriesThatForkFreeAndTruncateSkip) {
  kv::KvManager kv({4, 30});
  kv::BlockTable t;
  std::vector<kv::CopyOp> copies;
  ASSERT_TRUE(kv.reserve(t, 30, copies));  // 8 blocks, the last partial
  EXPECT_EQ(kv.drop_before(t, 13), 3);     // blocks 0-2 hold only positions < 12
  EXPECT_EQ(kv.pool().stats().used, 5);
  EXPECT_EQ(t.blocks[2], kv::kNullBlock);
  EXPECT_NE(t.blocks[3], kv::kNullBlock);
  EXPECT_EQ(kv.drop_before(t, 14), 0);  // idempotent, and a window never goes back
  EXPECT_EQ(kv.drop_before(t, 3), 0);
  kv::BlockTable child = kv.fork(t);  // shares only the live blocks
  EXPECT_EQ(kv.pool().stats().shared, 5);
  ASSERT_TRUE(kv.reserve(child, 31, copies));  // copy-on-write of the partial block only
  EXPECT_EQ(copies.size(), 1u);
  kv.truncate(t, 25);  // a rollback inside the live blocks
  EXPECT_EQ(t.num_tokens, 25);
  EXPECT_EQ(kv.drop_before(child, 1000), 5);  // its live blocks: 4 shared and its own copy
  kv.free(t);
  kv.free(child);
  EXPECT_EQ(kv.pool().stats().used, 0);
  EXPECT_EQ(kv.pool().num_free(), 29);
  EXPECT_EQ(kv.pool().check_invariants(), "");
}

TEST(KvManager, ForkSharesBlocksUntilChildrenDiverge) {
  // A 1000-token prompt forked into 8 children: no new block until they
  // write, then one copy-on-write block each for the shared partial block.
  kv::KvManager kv({16, 200});
  kv::BlockTable parent;
  std::vector<kv::CopyOp> copies;
  ASSERT_TRUE(kv.reserve(parent, 1000, copies));
  EXPECT_TRUE(copies.empty());
  const int64_t used_before = kv.pool().stats().used;
  EXPECT_EQ(used_before, 63);  // ceil(1000 / 16)
  std::vector<kv::BlockTable> children;
  for (int i = 0; i < 8; ++i) children.push_back(kv.fork(parent));
  EXPECT_EQ(kv.pool().stats().used, used_before);
  EXPECT_EQ(kv.pool().stats().shared, 63);
  kv.free(parent);
  EXPECT_EQ(kv.pool().stats().used, used_before);
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(kv.reserve(children[i], 1001, copies));
  }
  // The last child to write owns the partial block alone and writes in place.
  EXPECT_EQ(copies.size(), 7u);
  EXPECT_EQ(kv.pool().stats().used, used_before + 7);
  // Growing into a new block allocates exactly one block per child.
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(kv.reserve(children[i], 1009, copies));
  EXPECT_EQ(kv.pool().stats().used, used_before + 7 + 8);
  for (auto& c : children) kv.free(c);
  EXPECT_EQ(kv.pool().stats().used, 0);
  EXPECT_EQ(kv.pool().check_invariants(), "");
}

}  // namespace
}  // namespace tessera::engine
