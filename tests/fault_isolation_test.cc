// Request-level fault isolation (engine/engine.h, FaultStage) and the
// vocabulary mask:
//   - a fault injected at each per-request stage of one request among 32
//     concurrent ones fails exactly that request; the other 31 finish with
//     the tokens they get alone; in-flight sequences and KV blocks return
//     to zero; the engine serves the next request;
//   - a fault in the forward pass fails that step's requests only, the
//     engine restarts its shared state and serves the next ones;
//   - fail_all (AsyncEngine's last resort) ends every request with an
//     error and leaves an engine that serves again;
//   - ids the tokenizer cannot decode (padding rows of a Qwen-shaped model)
//     are never sampled, from an HF folder and from its GGUF conversion.
#include <atomic>
#include <filesystem>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>

#include <gtest/gtest.h>

#include "engine/engine.h"
#include "model/convert.h"
#include "model/synthetic.h"
#include "server/async_engine.h"
#include "server/metrics.h"
#include "util/test_util.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using engine::Engine;
using engine::EngineConfig;
using engine::FaultSite;
using engine::FaultStage;
using engine::FinishReason;
using engine::RequestOutput;
using engine::SamplingParams;

constexpr int kStreams = 32;

struct Result {
  std::vector<int32_t> tokens;
  FinishReason reason = FinishReason::kNone;
  std::string error;
};

std::vector<int32_t> prompt_of(int i) {
  const auto& m = testing::stories260k();
  static const char* starts[] = {"Once upon a time", "One day, a little", "The cat", "Lily and Tom", "A big dog"};
  return m.tok->encode(fmt::format("{} {}", starts[i % 5], i), /*add_special=*/true);
}

SamplingParams params_of(int i) {
  SamplingParams p;
  p.temperature = i % 4 == 0 ? 0.0f : 0.9f;  // greedy and sampled ones
  p.seed = 1000 + i;
  p.max_tokens = 24 + i % 7;
  return p;
}

EngineConfig config(bool drafting) {
  EngineConfig c;
  c.max_num_seqs = 16;  // 32 streams: half of them wait at first
  c.threads = 1;
  c.seed = 7;
  if (drafting) {
    c.spec_method = spec::Method::kNgram;
    c.spec_adaptive = false;  // every proposal is verified: the draft stage always runs
  }
  return c;
}

// Each prompt alone on a fresh engine of the same configuration.
std::vector<Result> solo_results(const EngineConfig& c) {
  const auto& m = testing::stories260k();
  Engine eng(*m.lm.model, m.tok.get(), c);
  std::vector<Result> out(kStreams);
  for (int i = 0; i < kStreams; ++i) {
    eng.add_request(prompt_of(i), params_of(i));
    while (eng.has_unfinished()) {
      for (const RequestOutput& o : eng.step()) {
        out[i].tokens.insert(out[i].tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
        if (o.finished) out[i].reason = o.finish_reason;
      }
    }
  }
  return out;
}

// Reads one channel to its end.
Result drain(server::RequestChannel& ch) {
  Result r;
  std::vector<server::ChannelItem> items;
  for (;;) {
    const bool finished = ch.finished();
    items.clear();
    ch.wait(items, std::chrono::milliseconds(50));
    for (const server::ChannelItem& it : items) {
      r.tokens.insert(r.tokens.end(), it.out.new_tokens.begin(), it.out.new_tokens.end());
      if (it.out.finished) {
        r.reason = it.out.finish_reason;
        r.error = it.out.error;
      }
    }
    if (finished) break;
  }
  if (r.error.empty()) r.error = ch.failure();
  return r;
}

// 32 requests in flight at once on an AsyncEngine; their results.
std::vector<Result> run_concurrently(Engine& eng, server::AsyncEngine& async) {
  std::vector<std::shared_ptr<server::RequestChannel>> chans;
  for (int i = 0; i < kStreams; ++i) {  // one at a time, so that request i has engine id i + 1
    engine::PromptLayout p;
    p.tokens = prompt_of(i);
    chans.push_back(async.submit({std::move(p)}, params_of(i)));
  }
  std::vector<Result> out(kStreams);
  std::vector<std::thread> readers;
  for (int i = 0; i < kStreams; ++i) readers.emplace_back([&, i] { out[i] = drain(*chans[i]); });
  for (std::thread& t : readers) t.join();
  return out;
}

void expect_nothing_left(const Engine& eng, const server::AsyncEngine& async) {
  // The stats describe the step whose outputs finished the last request.
  EXPECT_EQ(async.in_flight(), 0);
  const engine::EngineStats st = eng.stats();
  EXPECT_EQ(st.kv_blocks_used, 0);
  EXPECT_EQ(st.num_running + st.num_waiting, 0);
}

class FaultIsolation : public ::testing::TestWithParam<FaultStage> {};

TEST_P(FaultIsolation, OneRequestFailsAndEveryOtherGetsItsSoloTokens) {
  const FaultStage stage = GetParam();
  const bool drafting = stage == FaultStage::kDraft;
  const std::vector<Result> solo = solo_results(config(drafting));
  constexpr int kVictim = 19;  // engine id kVictim + 1
  std::atomic<int> fired{0};
  EngineConfig c = config(drafting);
  c.fault_hook = [&](const FaultSite& s) {
    if (s.stage != stage || s.group != static_cast<uint64_t>(kVictim + 1)) return;
    if (stage != FaultStage::kAdmit && s.num_output_tokens < 3) return;
    ++fired;
    throw std::runtime_error(fmt::format("injected fault at {}", engine::fault_stage_name(stage)));
  };
  const auto& m = testing::stories260k();
  Engine eng(*m.lm.model, m.tok.get(), c);
  server::Metrics metrics;
  server::AsyncEngine async(eng, metrics, 256);
  const std::vector<Result> got = run_concurrently(eng, async);
  EXPECT_GE(fired.load(), 1) << "the fault was never injected";
  for (int i = 0; i < kStreams; ++i) {
    if (i == kVictim) {
      EXPECT_EQ(got[i].reason, FinishReason::kError);
      EXPECT_NE(got[i].error.find("injected fault"), std::string::npos) << got[i].error;
      continue;
    }
    EXPECT_EQ(got[i].tokens, solo[i].tokens) << "request " << i;
    EXPECT_EQ(got[i].reason, solo[i].reason) << "request " << i;
    EXPECT_TRUE(got[i].error.empty()) << "request " << i << ": " << got[i].error;
  }
  EXPECT_EQ(eng.stats().requests_failed_total, 1);
  expect_nothing_left(eng, async);
  EXPECT_TRUE(async.accepting());
  // And the next request is served as if nothing happened.
  engine::PromptLayout p;
  p.tokens = prompt_of(kVictim);
  const Result again = drain(*async.submit({std::move(p)}, params_of(kVictim)));
  if (stage == FaultStage::kAdmit) {
    // Its id is new, so the hook leaves it alone: the victim's own tokens.
    EXPECT_EQ(again.tokens, solo[kVictim].tokens);
  }
  EXPECT_NE(again.reason, FinishReason::kError);
  expect_nothing_left(eng, async);
}

INSTANTIATE_TEST_SUITE_P(EveryStage, FaultIsolation,
                         ::testing::Values(FaultStage::kAdmit, FaultStage::kDraft, FaultStage::kSample,
                                           FaultStage::kDetokenize, FaultStage::kStopCheck, FaultStage::kOutput),
                         [](const auto& info) { return std::string(engine::fault_stage_name(info.param)); });

TEST(FaultIsolationForward, FailsThatStepOnlyAndTheEngineServesOn) {
  const std::vector<Result> solo = solo_results(config(false));
  std::atomic<int> fired{0};
  EngineConfig c = config(false);
  c.fault_hook = [&](const FaultSite& s) {
    if (s.stage != FaultStage::kForward || s.num_output_tokens < 5 || fired.load() > 0) return;
    ++fired;
    throw std::bad_alloc();  // an allocation failure in the shared pass
  };
  const auto& m = testing::stories260k();
  Engine eng(*m.lm.model, m.tok.get(), c);
  server::Metrics metrics;
  server::AsyncEngine async(eng, metrics, 256);
  const std::vector<Result> got = run_concurrently(eng, async);
  ASSERT_EQ(fired.load(), 1);
  int failed = 0;
  for (int i = 0; i < kStreams; ++i) {
    if (got[i].reason == FinishReason::kError) {
      ++failed;
      EXPECT_NE(got[i].error.find("forward pass failed"), std::string::npos) << got[i].error;
      continue;
    }
    EXPECT_EQ(got[i].tokens, solo[i].tokens) << "request " << i;
    EXPECT_EQ(got[i].reason, solo[i].reason) << "request " << i;
  }
  // The step ran at most max_num_seqs requests; those waiting were spared.
  EXPECT_GE(failed, 1);
  EXPECT_LE(failed, 16);
  EXPECT_EQ(eng.stats().engine_restarts_total, 1);
  expect_nothing_left(eng, async);
  EXPECT_TRUE(async.accepting());
  for (int i : {0, 5, 31}) {  // served after the restart: their solo tokens
    engine::PromptLayout p;
    p.tokens = prompt_of(i);
    EXPECT_EQ(drain(*async.submit({std::move(p)}, params_of(i))).tokens, solo[i].tokens) << "request " << i;
  }
  expect_nothing_left(eng, async);
}

TEST(FaultIsolationEngine, FailAllEndsEveryRequestAndTheEngineStartsAfresh) {
  const EngineConfig c = config(false);
  const std::vector<Result> solo = solo_results(c);
  const auto& m = testing::stories260k();
  Engine eng(*m.lm.model, m.tok.get(), c);
  std::map<engine::RequestId, Result> got;
  auto collect = [&](const std::vector<RequestOutput>& outs) {
    for (const RequestOutput& o : outs) {
      Result& r = got[o.group];
      r.tokens.insert(r.tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
      if (o.finished) {
        r.reason = o.finish_reason;
        r.error = o.error;
      }
    }
  };
  int callbacks = 0;
  for (int i = 0; i < 20; ++i) eng.add_request(prompt_of(i), params_of(i), [&](const RequestOutput&) { ++callbacks; });
  for (int s = 0; s < 4; ++s) collect(eng.step());
  eng.add_request(prompt_of(20), params_of(20));  // still queued when it fails
  const int before = callbacks;
  collect(eng.fail_all("a bug"));
  EXPECT_GT(callbacks, before) << "the failures reach the callbacks";
  EXPECT_FALSE(eng.has_unfinished());
  ASSERT_EQ(got.size(), 21u);
  for (const auto& [id, r] : got) {
    EXPECT_EQ(r.reason, FinishReason::kError) << id;
    EXPECT_NE(r.error.find("a bug"), std::string::npos) << id;
  }
  EXPECT_EQ(eng.stats().kv_blocks_used, 0);
  // A fresh start: the same prompts give their solo tokens.
  got.clear();
  for (int i : {3, 4}) eng.add_request(prompt_of(i), params_of(i));
  while (eng.has_unfinished()) collect(eng.step());
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got.begin()->second.tokens, solo[3].tokens);
  EXPECT_EQ(got.rbegin()->second.tokens, solo[4].tokens);
  EXPECT_EQ(eng.stats().kv_blocks_used, 0);
}

// ---- the vocabulary mask --------------------------------------------------

// Qwen's shape: 151936 embedding rows, a tokenizer of 151669 ids.
struct PaddedVocab {
  std::string hf, gguf;
};
const PaddedVocab& padded_vocab_model() {
  static const PaddedVocab made = [] {
    const std::string qwen3 = testing::shared_path("models/tokenizers/qwen3");
    SyntheticModelSpec s;
    s.arch = "qwen3";
    s.n_vocab = 151936;
    s.n_embd = 32;
    s.n_head = 2;
    s.n_head_kv = 1;
    s.n_ff = 64;
    s.n_layer = 1;
    s.tied_output = true;
    s.type = DType::kF16;
    PaddedVocab p{testing::temp_path("qwen-padded-hf"), testing::temp_path("qwen-padded.gguf")};
    write_synthetic_hf_folder(s, p.hf, "", 0, 1);
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) {
      fs::copy_file(qwen3 + "/" + f, p.hf + "/" + f, fs::copy_options::overwrite_existing);
    }
    convert_model(load_model(p.hf), p.gguf);
    return p;
  }();
  return made;
}

void expect_only_decodable_ids_sampled(const std::string& path) {
  const LoadedModel lm = load_model(path);
  const auto tok = load_tokenizer(lm);
  ASSERT_EQ(lm.model->config().n_vocab, 151936);
  EngineConfig c;
  c.threads = 1;
  c.max_num_seqs = 8;
  Engine eng(*lm.model, tok.get(), c);
  // Past the tokenizer (HF: 151669 ids) or padding it declares unused (GGUF).
  ASSERT_GE(eng.masked_ids().size(), 151936u - 151669u);
  for (int32_t id = 151669; id < 151936; ++id) {
    ASSERT_TRUE(std::binary_search(eng.masked_ids().begin(), eng.masked_ids().end(), id)) << id;
  }
  const std::vector<int32_t> prompt = tok->encode("Hello", true);
  SamplingParams p;
  p.temperature = 2.0f;  // near-uniform over a random model's 151936 logits
  p.max_tokens = 300;
  p.ignore_eos = true;
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    p.seed = seed;
    eng.add_request(prompt, p);
  }
  int64_t n = 0;
  while (eng.has_unfinished()) {
    for (const RequestOutput& o : eng.step()) {
      EXPECT_NE(o.finish_reason, FinishReason::kError) << o.error;
      for (int32_t t : o.new_tokens) {
        ++n;
        EXPECT_LT(t, 151669);
        EXPECT_FALSE(tok->is_unused(t)) << t;
      }
    }
  }
  EXPECT_EQ(n, 8 * 300);
}

TEST(VocabMask, PaddingRowsOfAnHfFolderAreNeverSampled) {
  TESSERA_REQUIRE_SHARED("models/tokenizers/qwen3/tokenizer.json");
  expect_only_decodable_ids_sampled(padded_vocab_model().hf);
}

TEST(VocabMask, PaddingRowsOfItsGgufConversionAreNeverSampled) {
  TESSERA_REQUIRE_SHARED("models/tokenizers/qwen3/tokenizer.json");
  expect_only_decodable_ids_sampled(padded_vocab_model().gguf);
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

// A request being prepared (validated, its detokenizer state built over the
// prompt) does not hold the lock the engine thread needs to deliver
// tokens: while one preparation is held inside Engine::prepare, a running
// stream keeps receiving outputs. (On 170be51 AsyncEngine::submit prepared
// under its lock: the stream stopped until the submission ended.)
TEST(AsyncEngineLock, StreamsFlowWhileARequestIsPrepared) {
  std::atomic<bool> hold{false}, entered{false}, release{false};
  EngineConfig c = config(false);
  c.fault_hook = [&](const FaultSite& s) {
    // The running stream makes a token every ~2 ms, so it is still running.
    if (s.stage == FaultStage::kSample) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    if (s.stage != FaultStage::kPrepare || !hold.load()) return;
    entered = true;
    for (int i = 0; i < 1000 && !release.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  };
  const auto& m = testing::stories260k();
  Engine eng(*m.lm.model, m.tok.get(), c);
  server::Metrics metrics;
  server::AsyncEngine async(eng, metrics, 256);
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = 1500;
  p.ignore_eos = true;
  engine::PromptLayout a;
  a.tokens = prompt_of(0);
  auto running = async.submit({std::move(a)}, p);
  std::vector<server::ChannelItem> items;
  while (items.empty()) running->wait(items, std::chrono::milliseconds(100));

  hold = true;
  std::thread submitter([&] {
    engine::PromptLayout b;
    b.tokens = prompt_of(1);
    auto ch = async.submit({std::move(b)}, params_of(1));
    async.abort(*ch);
  });
  for (int i = 0; i < 500 && !entered.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ASSERT_TRUE(entered.load());
  // The preparation is held: outputs must still arrive (those already
  // pending are dropped first).
  items.clear();
  running->take(items);
  items.clear();
  for (int i = 0; i < 20 && items.size() < 3; ++i) running->wait(items, std::chrono::milliseconds(50));
  const size_t during = items.size();
  release = true;
  submitter.join();
  EXPECT_GE(during, 3u) << "no tokens were delivered while a request was being prepared";
  async.abort(*running);
  drain(*running);
}

}  // namespace
}  // namespace tessera
