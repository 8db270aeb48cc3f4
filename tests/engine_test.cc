// The engine end to end on the real stories260K model: golden continuation,
// batch invariance, preemption, abort, parallel sampling, stop strings,
// prefix caching (also under forced hash collisions).
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <tuple>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/sequence_runner.h"
#include "model/model.h"
#include "model/synthetic.h"
#include "tokenizer/tokenizer.h"
#include "util/test_util.h"

namespace tessera::engine {
namespace {

using Loaded = testing::LoadedWithTokenizer;
const Loaded& stories() { return testing::stories260k(); }

struct Collected {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::string text;
  FinishReason finish = FinishReason::kNone;
  bool finished = false;
};

// Runs the engine until every request is done, collecting outputs by id.
std::map<RequestId, Collected> run_all(Engine& e) {
  std::map<RequestId, Collected> out;
  int64_t guard = 0;
  while (e.has_unfinished()) {
    for (const RequestOutput& o : e.step()) {
      Collected& c = out[o.id];
      c.tokens.insert(c.tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
      c.logprobs.insert(c.logprobs.end(), o.logprobs.begin(), o.logprobs.end());
      c.text += o.text;
      if (o.finished) {
        EXPECT_FALSE(c.finished) << "request " << o.id << " finished twice";
        c.finished = true;
        c.finish = o.finish_reason;
      }
    }
    EXPECT_LT(++guard, 100000);
  }
  return out;
}

EngineConfig small_config() {
  EngineConfig c;
  c.max_model_len = 512;
  c.threads = 2;
  c.kv_type = DType::kF32;
  c.seed = 42;
  return c;
}

using testing::greedy;

TEST(Engine, GreedyContinuationMatchesLlamaCpp) {
  const auto& s = stories();
  Engine e(*s.lm.model, s.tok.get(), small_config());
  const RequestId id = e.add_request(std::string_view("Once upon a time"), greedy(10));
  auto out = run_all(e);
  EXPECT_EQ(out[id].text.rfind(", there was a little girl named Lily", 0), 0u) << out[id].text;
  EXPECT_EQ(out[id].finish, FinishReason::kLength);
}

// The target request's tokens and logprobs alone, and among `others` random
// requests of mixed lengths started at different times. `vocab`: prompt ids
// are drawn from [3, vocab).
void check_batch_invariance(const Model& model, const Tokenizer* tok, int32_t vocab, int out_len, int max_prompt,
                            const EngineConfig& base = small_config()) {
  std::mt19937 rng(7);
  auto random_prompt = [&](int n) {
    std::uniform_int_distribution<int32_t> t(3, vocab - 1);
    std::vector<int32_t> p{1};
    for (int i = 1; i < n; ++i) p.push_back(t(rng));
    return p;
  };
  const std::vector<int32_t> target_prompt = random_prompt(37);
  for (bool sampled : {false, true}) {
    SamplingParams tp = sampled ? SamplingParams{} : greedy(out_len);
    if (sampled) {
      tp.temperature = 0.9f;
      tp.top_p = 0.9f;
      tp.seed = 1234;
      tp.max_tokens = out_len;
      tp.ignore_eos = true;
    }
    tp.logprobs = true;
    Engine alone(model, tok, base);
    const RequestId a = alone.add_request(target_prompt, tp);
    const Collected ref = run_all(alone)[a];
    ASSERT_EQ(ref.tokens.size(), static_cast<size_t>(out_len));

    EngineConfig cfg = base;
    cfg.max_num_batched_tokens = 97;  // odd budget: chunks cut prompts at varied points
    Engine busy(model, tok, cfg);
    std::uniform_int_distribution<int> len(1, max_prompt), out(1, 2 * out_len);
    for (int i = 0; i < 16; ++i) busy.add_request(random_prompt(len(rng)), greedy(out(rng)));
    for (int i = 0; i < 3; ++i) busy.step();
    const RequestId b = busy.add_request(target_prompt, tp);
    for (int i = 0; i < 15; ++i) {
      SamplingParams op = greedy(out(rng));
      op.temperature = 0.7f;
      busy.add_request(random_prompt(len(rng)), op);
    }
    const Collected got = run_all(busy)[b];
    EXPECT_EQ(got.tokens, ref.tokens) << (sampled ? "sampled" : "greedy");
    ASSERT_EQ(got.logprobs.size(), ref.logprobs.size());
    for (size_t i = 0; i < ref.logprobs.size(); ++i) {
      EXPECT_EQ(got.logprobs[i], ref.logprobs[i]) << "logprob " << i << " differs in a batch (bitwise)";
    }
  }
}

TEST(Engine, BatchInvariance) {
  const auto& s = stories();
  check_batch_invariance(*s.lm.model, s.tok.get(), 512, 60, 200);
}

// The same on a random model of the 110m shape (dim 768, 12 layers, 32000
// tokens) in Q8_0: wide enough that the matmuls split rows across threads
// and tiles, which stories260K's tiny matrices do not.
TEST(EngineSlow, BatchInvariance110m) {
  SyntheticModelSpec spec = preset_spec("110m");
  spec.type = DType::kQ8_0;
  spec.vocab_from = testing::shared_path("models/vocab/ggml-vocab-llama-spm.gguf");
  spec.seed = 11;
  const std::string path = testing::temp_path("engine_110m_q8_0.gguf");
  write_synthetic_model(spec, path, 2);
  const LoadedModel lm = load_model(path);
  const auto tok = Tokenizer::from_gguf(*lm.file);
  check_batch_invariance(*lm.model, tok.get(), 32000, 12, 48);
}

TEST(Engine, PreemptionUnderTinyPoolKeepsOutputs) {
  const auto& s = stories();
  std::mt19937 rng(11);
  std::vector<std::pair<std::vector<int32_t>, SamplingParams>> reqs;
  for (int i = 0; i < 24; ++i) {
    std::vector<int32_t> p{1};
    for (int j = 0; j < 5 + i * 3; ++j) p.push_back(3 + static_cast<int32_t>(rng() % 500));
    SamplingParams sp = greedy(20 + i % 7 * 5);
    if (i % 2) {
      sp.temperature = 1.0f;
      sp.seed = 100 + i;
    }
    reqs.emplace_back(p, sp);
  }
  std::vector<Collected> alone;
  for (auto& [p, sp] : reqs) {
    Engine e(*s.lm.model, s.tok.get(), small_config());
    const RequestId id = e.add_request(p, sp);
    alone.push_back(run_all(e)[id]);
  }
  EngineConfig cfg = small_config();
  cfg.num_kv_blocks = 12;  // 192 token slots for 24 requests of up to ~110 tokens
  cfg.block_size = 16;
  cfg.max_num_seqs = 8;
  Engine e(*s.lm.model, s.tok.get(), cfg);
  std::vector<RequestId> ids;
  for (auto& [p, sp] : reqs) ids.push_back(e.add_request(p, sp));
  auto out = run_all(e);
  EXPECT_GT(e.stats().preemptions_total, 0);
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(out[ids[i]].tokens, alone[i].tokens) << "request " << i;
  EXPECT_EQ(e.stats().kv_blocks_used, 0);
}

TEST(Engine, AbortFreesBlocksAtNextStep) {
  const auto& s = stories();
  Engine e(*s.lm.model, s.tok.get(), small_config());
  const RequestId id = e.add_request(std::string_view("Once upon a time"), greedy(200));
  const RequestId other = e.add_request(std::string_view("The dog"), greedy(30));
  size_t other_tokens = 0;
  for (int i = 0; i < 5; ++i) {
    for (const RequestOutput& o : e.step()) other_tokens += o.id == other ? o.new_tokens.size() : 0;
  }
  EXPECT_GT(e.stats().kv_blocks_used, 0);
  e.abort(id);
  bool saw_abort = false;
  for (const RequestOutput& o : e.step()) {
    if (o.id == other) other_tokens += o.new_tokens.size();
    if (o.id == id) {
      EXPECT_TRUE(o.finished);
      EXPECT_EQ(o.finish_reason, FinishReason::kAbort);
      saw_abort = true;
    }
  }
  EXPECT_TRUE(saw_abort);
  auto rest = run_all(e);
  EXPECT_EQ(rest[other].tokens.size() + other_tokens, 30u) << "the other request is unaffected";
  EXPECT_EQ(e.stats().kv_blocks_used, 0);
  EXPECT_FALSE(e.has_unfinished());
}

TEST(Engine, StopStringIsNotEmittedAndSpansTokens) {
  const auto& s = stories();
  Engine e(*s.lm.model, s.tok.get(), small_config());
  SamplingParams p = greedy(40);
  p.stop = {"girl na"};  // ends inside the token " named"
  const RequestId id = e.add_request(std::string_view("Once upon a time"), p);
  auto out = run_all(e);
  EXPECT_EQ(out[id].text, ", there was a little ");
  EXPECT_EQ(out[id].finish, FinishReason::kStop);
}

TEST(Engine, ParallelSamplingForksPromptBlocks) {
  const auto& s = stories();
  EngineConfig cfg = small_config();
  cfg.enable_prefix_caching = false;
  Engine e(*s.lm.model, s.tok.get(), cfg);
  std::vector<int32_t> prompt{1};
  for (int i = 0; i < 99; ++i) prompt.push_back(3 + i * 5 % 500);  // 100 tokens: 6 full blocks + 4
  SamplingParams p;
  p.temperature = 1.0f;
  p.n = 4;
  p.seed = 9;
  p.max_tokens = 12;
  p.ignore_eos = true;
  const RequestId id = e.add_request(prompt, p);
  // Step 1: prefill (one 512-token budget) computes the prompt and forks.
  auto first = e.step();
  EXPECT_EQ(first.size(), 4u);
  EXPECT_EQ(e.stats().kv_blocks_used, 7) << "children share the prompt's blocks";
  // Step 2: every child appends into the shared partial block: 3 copies,
  // the last writer keeps the original.
  e.step();
  EXPECT_EQ(e.stats().kv_blocks_used, 7 + 3);
  std::map<int32_t, std::vector<int32_t>> by_index;
  for (const RequestOutput& o : first) by_index[o.index] = o.new_tokens;
  for (auto& [rid, c] : run_all(e)) (void)rid, (void)c;
  EXPECT_EQ(e.stats().kv_blocks_used, 0);
  // The same seed reproduces the same four samples.
  Engine e2(*s.lm.model, s.tok.get(), cfg);
  const RequestId id2 = e2.add_request(prompt, p);
  auto again = e2.step();
  std::map<int32_t, std::vector<int32_t>> by_index2;
  for (const RequestOutput& o : again) {
    EXPECT_EQ(o.group, id2);
    by_index2[o.index] = o.new_tokens;
  }
  EXPECT_EQ(by_index, by_index2);
  (void)id;
}

// A sliding-window model (make-model's mistral layout, window 24): blocks
// wholly before a sequence's window go back to the pool as it moves, so
// memory per sequence stays bounded however long it runs, and the outputs
// are the model's: every request (long prompts, a prefix-cache hit on
// blocks another request dropped, preemption in a small pool) equals an independent one-token-at-a-time decode that keeps every block.
TEST(Engine, SlidingWindowFreesOutOfWindowBlocksAndKeepsOutputs) {
  SyntheticModelSpec spec = preset_spec("tiny");
  spec.arch = "mistral";
  spec.sliding_window = 24;
  spec.n_vocab = 300;
  spec.n_ctx = 1024;
  const std::string path = testing::temp_path("mistral-window.gguf");
  write_synthetic_model(spec, path, 2);
  const LoadedModel lm = load_model(path);
  ASSERT_EQ(lm.model->config().sliding_window, 24);
  std::mt19937 rng(5);
  std::uniform_int_distribution<int32_t> tok(3, 299);
  const auto prompt_of = [&](int n) {
    std::vector<int32_t> p(static_cast<size_t>(n));
    for (auto& t : p) t = tok(rng);
    return p;
  };
  std::vector<std::vector<int32_t>> prompts = {prompt_of(100), prompt_of(7), prompt_of(60)};
  prompts.push_back(prompts[0]);  // a prefix-cache hit on blocks the first request drops
  prompts.back().push_back(17);
  for (const int kv_blocks : {0, 16}) {  // 16 blocks of 8: four sequences of 300+ tokens
    EngineConfig c = small_config();
    c.max_model_len = 1024;
    c.block_size = 8;
    c.num_kv_blocks = kv_blocks;
    c.max_num_batched_tokens = 32;
    Engine e(*lm.model, nullptr, c);
    std::map<RequestId, std::vector<int32_t>> want;
    for (const auto& p : prompts) want[e.add_request(p, greedy(260))] = p;
    int64_t most_blocks = 0;
    std::map<RequestId, Collected> got;
    while (e.has_unfinished()) {
      for (const RequestOutput& o : e.step()) {
        got[o.id].tokens.insert(got[o.id].tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
      }
      most_blocks = std::max(most_blocks, e.stats().kv_blocks_used);
    }
    EXPECT_EQ(e.stats().kv_blocks_used, 0);
    // Per sequence: 3 blocks of window, 1 of margin, 1 partial, 4 of a chunk.
    EXPECT_LE(most_blocks, 4 * (3 + 1 + 1 + 4)) << "kv blocks " << kv_blocks;
    for (const auto& [id, p] : want) {
      ThreadPool pool(1);
      SequenceRunner ref(*lm.model, {.n_ctx = 1024, .kv_type = DType::kF32}, pool);
      std::span<const float> logits = ref.append(p);
      std::vector<int32_t> seq;
      for (int i = 0; i < 260; ++i) {
        seq.push_back(static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin()));
        logits = ref.append(std::span(&seq.back(), 1));
      }
      EXPECT_EQ(got[id].tokens, seq) << "request " << id << ", kv blocks " << kv_blocks;
    }
  }
}

// Quantized caches: each token's K and V are quantized on their own, so a
// request's output still does not depend on its batch or chunking.
TEST(Engine, BatchInvarianceWithQuantizedKv) {
  const auto& s = stories();
  for (auto [type, hadamard] : {std::pair{DType::kQ8_0, false}, std::pair{DType::kQ4_0, true}}) {
    EngineConfig c = small_config();
    c.kv_type = type;
    c.kv_hadamard = hadamard;
    check_batch_invariance(*s.lm.model, s.tok.get(), 512, 30, 120, c);
  }
}

// W8A8 (TESSERA_W8A8=1 at load): each token's activations are quantized
// on their own, so outputs still do not depend on the batch.
TEST(Engine, BatchInvarianceWithW8A8) {
  setenv("TESSERA_W8A8", "1", 1);
  const LoadedModel lm = load_model(testing::stories260k_path());
  unsetenv("TESSERA_W8A8");
  const auto tok = Tokenizer::from_gguf(*lm.file);
  check_batch_invariance(*lm.model, tok.get(), 512, 30, 120);
}

void check_prefix_caching(const EngineConfig& base) {
  const auto& s = stories();
  std::vector<int32_t> prefix{1};
  for (int i = 0; i < 70; ++i) prefix.push_back(3 + (i * 37) % 500);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 6; ++i) {
    auto p = prefix;
    for (int j = 0; j <= i; ++j) p.push_back(10 + i * 7 + j);
    prompts.push_back(p);
  }
  auto run = [&](bool cache) {
    EngineConfig cfg = base;
    cfg.enable_prefix_caching = cache;
    Engine e(*s.lm.model, s.tok.get(), cfg);
    std::vector<Collected> outs;
    for (const auto& p : prompts) {  // one after another, so later ones hit
      SamplingParams sp = greedy(15);
      sp.logprobs = true;
      const RequestId id = e.add_request(p, sp);
      outs.push_back(run_all(e)[id]);
    }
    return std::make_pair(outs, e.stats());
  };
  auto [cold, cold_stats] = run(false);
  auto [warm, warm_stats] = run(true);
  EXPECT_EQ(cold_stats.prefix_hit_tokens_total, 0);
  EXPECT_GE(warm_stats.prefix_hit_tokens_total, 5 * 64);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(warm[i].tokens, cold[i].tokens);
    EXPECT_EQ(warm[i].logprobs, cold[i].logprobs) << "bit-identical with cached prefix";
  }
}

TEST(Engine, PrefixCachingGivesIdenticalOutputs) { check_prefix_caching(small_config()); }

TEST(Engine, PrefixCachingWithQuantizedKv) {
  for (auto [type, hadamard] : {std::pair{DType::kQ8_0, false}, std::pair{DType::kQ4_0, true}}) {
    EngineConfig c = small_config();
    c.kv_type = type;
    c.kv_hadamard = hadamard;
    check_prefix_caching(c);
  }
}

// Issue 13.6: prompts whose blocks collide under the prefix hash never share
// K/V. The injected hash depends on a block's depth alone, so block b of
// every prompt has one hash; each request must produce what it produces
// with prefix caching off, and equal prefixes must still hit.
TEST(Engine, PrefixCacheCollisionsComputeTheirOwnKv) {
  const auto& s = stories();
  std::vector<int32_t> a{1};
  for (int i = 0; i < 52; ++i) a.push_back(3 + (i * 37) % 500);  // 53 tokens: 3 full blocks of 16
  std::vector<int32_t> b = a, c = a, d;
  b[5] = 499;   // block 0 differs; blocks 1 and 2 hold a's tokens after another block 0
  c[20] = 499;  // block 0 is a's; block 1 differs; block 2 holds a's tokens
  for (int i = 0; i < 53; ++i) d.push_back(i == 0 ? 1 : 200 + i);  // nothing in common
  // One after another, each finding the blocks its predecessors left:
  //   a; c hits a's block 0, collides at 1 and takes the entries from 1 on
  //   (a's blocks are free); a hits block 0, collides at 1 with c's and
  //   takes them back; b collides at 0; b again hits its 3 full blocks; d
  //   collides at 0.
  const std::vector<std::vector<int32_t>> prompts = {a, c, a, b, b, d};
  auto run = [&](bool cache) {
    EngineConfig cfg = small_config();
    cfg.enable_prefix_caching = cache;
    cfg.prefix_block_hash = [](uint64_t parent, uint64_t, std::span<const int32_t>) { return parent + 1; };
    Engine e(*s.lm.model, s.tok.get(), cfg);
    std::vector<Collected> outs;
    for (const auto& p : prompts) {
      SamplingParams sp = greedy(15);
      sp.logprobs = true;
      const RequestId id = e.add_request(p, sp);
      outs.push_back(run_all(e)[id]);
    }
    return std::make_tuple(outs, e.stats(), e.kv_manager().pool().stats());
  };
  const auto [alone, alone_stats, alone_pool] = run(false);
  const auto [shared, stats, pool] = run(true);
  EXPECT_EQ(pool.hash_mismatches, 4);
  EXPECT_EQ(stats.prefix_hit_tokens_total, 16 + 16 + 48);
  EXPECT_EQ(alone_stats.prefix_hit_tokens_total, 0);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(shared[i].tokens, alone[i].tokens) << "prompt " << i;
    EXPECT_EQ(shared[i].logprobs, alone[i].logprobs) << "prompt " << i << ": bit-identical with collisions";
  }
  for (size_t i : {1, 3, 5}) {
    EXPECT_NE(alone[i].logprobs, alone[0].logprobs) << "prompt " << i << " must not look like a's, or mixed-up K/V would pass";
  }
}

// Completion text is decode(prompt + output) minus decode(prompt) (issue 13):
// the first word keeps its space (" was"), for SentencePiece (stories260K)
// and byte-level BPE (a random model with GPT-2's vocabulary), greedy and
// sampled, n = 1 and forked samples.
void check_text_continues_prompt(const Model& model, const Tokenizer& tok, const std::vector<std::string>& prompts) {
  Engine e(model, &tok, small_config());
  std::map<RequestId, std::vector<int32_t>> prompt_of_group;
  for (size_t i = 0; i < prompts.size(); ++i) {
    std::vector<int32_t> ids = tok.encode(prompts[i], /*add_special=*/true, /*parse_special=*/true);
    SamplingParams p = greedy(12);
    if (i % 2 == 1) {  // sampled, hot, three forked samples: varied first tokens
      p.temperature = 1.5f;
      p.seed = 100 + i;
      p.n = 3;
    }
    const RequestId group = e.add_request(ids, p);
    prompt_of_group[group] = std::move(ids);
  }
  std::map<RequestId, Collected> out;
  std::map<RequestId, RequestId> group_of;
  while (e.has_unfinished()) {
    for (const RequestOutput& o : e.step()) {
      group_of[o.id] = o.group;
      Collected& c = out[o.id];
      c.tokens.insert(c.tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
      c.text += o.text;
    }
  }
  ASSERT_EQ(out.size(), prompts.size() + prompts.size() / 2 * 2);
  int with_space = 0;
  for (const auto& [id, c] : out) {
    const std::vector<int32_t>& prompt = prompt_of_group.at(group_of.at(id));
    ASSERT_EQ(c.tokens.size(), 12u);
    const std::string head = tok.decode(prompt);
    std::vector<int32_t> all = prompt;
    all.insert(all.end(), c.tokens.begin(), c.tokens.end());
    const std::string full = tok.decode(all);
    if (full.compare(0, head.size(), head) != 0) continue;  // output completes a split character
    EXPECT_EQ(c.text, full.substr(head.size())) << "request " << id;
    if (!c.text.empty() && c.text[0] == ' ') ++with_space;
  }
  EXPECT_GT(with_space, 0) << "no continuation started with a space: the test checks nothing about it";
}

TEST(Engine, CompletionTextContinuesThePrompt) {
  const auto& s = stories();
  {
    Engine e(*s.lm.model, s.tok.get(), small_config());
    const RequestId id = e.add_request(std::string_view("The little dog"), greedy(8));
    const Collected c = run_all(e)[id];
    EXPECT_EQ(c.text.rfind(" was a little girl", 0), 0u) << c.text;
  }
  const std::vector<std::string> prompts = {"The little dog", "Once upon a time", "Tom said", "One day,",
                                            "\"Hello", "The end.\n", "She ran", "It was a sunny"};
  check_text_continues_prompt(*s.lm.model, *s.tok, prompts);

  TESSERA_REQUIRE_SHARED("models/vocab/ggml-vocab-gpt-2.gguf");
  SyntheticModelSpec spec;
  spec.n_embd = 64;
  spec.n_ff = 96;
  spec.n_ctx = 512;
  spec.vocab_from = testing::shared_path("models/vocab/ggml-vocab-gpt-2.gguf");
  const std::string path = testing::temp_path("bpe-random.gguf");
  write_synthetic_model(spec, path, 2);
  const LoadedModel bpe = load_model(path);
  const auto bpe_tok = Tokenizer::from_gguf(*bpe.file);
  ASSERT_EQ(bpe_tok->kind(), "bpe");
  check_text_continues_prompt(*bpe.model, *bpe_tok, prompts);
}

// A callback runs after the step's stats are taken: the output that
// finishes the only request sees no block in use and nothing running (a
// server that wakes a client on it must not report a stale block).
TEST(Engine, CallbacksSeeTheStatsOfTheirStep) {
  TESSERA_REQUIRE_SHARED("models/stories260K/stories260K.gguf");
  const auto& s = stories();
  Engine e(*s.lm.model, s.tok.get(), small_config());
  int finished = 0, outputs = 0;
  auto cb = [&](const RequestOutput& o) {
    ++outputs;
    const EngineStats st = e.stats();
    EXPECT_EQ(st.generation_tokens_total, outputs);
    if (o.finished) {
      ++finished;
      EXPECT_EQ(st.kv_blocks_used, 0);
      EXPECT_EQ(st.num_running, 0);
      EXPECT_EQ(st.requests_finished_total, 1);
    } else {
      EXPECT_GT(st.kv_blocks_used, 0);
    }
  };
  e.add_request("Once upon a time", greedy(5), cb);
  while (e.has_unfinished()) e.step();
  EXPECT_EQ(finished, 1);
  EXPECT_EQ(outputs, 5);
}

TEST(Engine, RejectsBadRequestsWithClearErrors) {
  const auto& s = stories();
  Engine e(*s.lm.model, s.tok.get(), small_config());
  SamplingParams p = greedy(10);
  std::vector<int32_t> long_prompt(600, 5);
  EXPECT_THROW(e.add_request(long_prompt, p), tessera::Error);
  EXPECT_THROW(e.add_request(std::vector<int32_t>{1, 99999}, p), tessera::Error);
  SamplingParams bad = p;
  bad.top_p = 0.0f;
  EXPECT_THROW(e.add_request(std::vector<int32_t>{1, 5}, bad), tessera::Error);
  EXPECT_FALSE(e.has_unfinished());
}

}  // namespace
}  // namespace tessera::engine
