// Serving adapters by name (adapters/registry.h): the LoRA pool's
// memory budget and LRU eviction of idle adapters (reloaded from their
// files on demand), soft prompts over HTTP, and adapters loaded and
// unloaded every few hundred milliseconds under 32 streaming clients:
// nothing but a 404 for an adapter already gone, and nothing left behind
// (KV blocks, requests in flight, pool bytes, RSS).
#include <httplib.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "adapters/lora_gguf.h"
#include "core/log.h"
#include "template/chat_template.h"
#include "server/openai_request.h"
#include "util/server_stack.h"
#include "util/test_util.h"

namespace tessera::server {
namespace {

using nlohmann::json;

constexpr const char* kAdapter = "models/stories260K/lora-shakespeare.gguf";

using testing::kAddressSanitizer;
using testing::rss_kib;

TEST(AdapterPool, IdleAdaptersAreEvictedLeastRecentlyUsedFirstAndReloaded) {
  TESSERA_REQUIRE_SHARED(kAdapter);
  const ModelConfig& cfg = testing::stories260k().lm.model->config();
  const std::string path = testing::shared_path(kAdapter);
  const size_t one = adapters::load_lora(path, cfg)->bytes();
  AdapterRegistry r(cfg, 2 * one + one / 2);  // room for two
  r.load("a", path, "base");
  r.load("b", path, "base");
  EXPECT_EQ(r.pool_stats().resident, 2);
  r.load("c", path, "base");  // a is the least recently used: evicted
  AdapterRegistry::PoolStats st = r.pool_stats();
  EXPECT_EQ(st.registered, 3);
  EXPECT_EQ(st.resident, 2);
  EXPECT_EQ(st.resident_bytes, 2 * one);
  EXPECT_EQ(st.evictions_total, 1);
  EXPECT_EQ(st.loads_total, 3);
  auto listed = r.list();
  ASSERT_EQ(listed.size(), 3u);
  EXPECT_FALSE(listed[0].resident);  // a
  EXPECT_TRUE(listed[1].resident && listed[2].resident);

  // Finding a reloads it from its file and evicts b (c is more recent).
  std::shared_ptr<const LoraAdapter> a = r.find("a");
  ASSERT_TRUE(a);
  st = r.pool_stats();
  EXPECT_EQ(st.loads_total, 4);
  EXPECT_EQ(st.evictions_total, 2);
  EXPECT_FALSE(r.list()[1].resident);
  // The reloaded adapter computes what the first load did.
  const auto fresh = adapters::load_lora(path, cfg);
  EXPECT_EQ(a->layers[0][0].a, fresh->layers[0][0].a);

  // Adapters in use are never evicted: with a and c held, reloading b
  // leaves the pool over budget until one is released.
  std::shared_ptr<const LoraAdapter> c = r.find("c");
  std::shared_ptr<const LoraAdapter> b = r.find("b");
  EXPECT_EQ(r.pool_stats().resident, 3);
  EXPECT_GT(r.pool_stats().resident_bytes, 2 * one + one / 2);
  // Releasing b, the only idle one, evicts it at once.
  const int64_t evictions = r.pool_stats().evictions_total;
  b.reset();
  st = r.pool_stats();
  EXPECT_EQ(st.evictions_total, evictions + 1);
  EXPECT_EQ(st.resident, 2);
  EXPECT_FALSE(r.list()[1].resident);
  a.reset();
  EXPECT_EQ(r.pool_stats().resident, 2) << "within budget: nothing more to evict";
  // Loading d evicts a (idle, and used before c).
  r.load("d", path, "base");
  listed = r.list();
  EXPECT_FALSE(listed[0].resident);
  EXPECT_TRUE(listed[2].resident && listed[3].resident);
  // Unloading an evicted adapter forgets it; its bytes were already given back.
  EXPECT_TRUE(r.unload("a"));
  EXPECT_FALSE(r.find("a"));
  EXPECT_EQ(r.pool_stats().resident_bytes, 2 * one);
  EXPECT_TRUE(r.unload("c"));
  EXPECT_TRUE(r.unload("d"));
  EXPECT_EQ(r.pool_stats().resident_bytes, 0u);
  EXPECT_EQ(r.list().size(), 1u);  // b, evicted

  // A reload whose file is gone is a clear 500, and the name stays known.
  const std::string copy = testing::temp_path("gone.gguf");
  std::filesystem::copy_file(path, copy);
  AdapterRegistry small(cfg, one + one / 2);
  small.load("x", copy, "base");
  small.load("y", path, "base");  // evicts x
  std::filesystem::remove(copy);
  EXPECT_EQ(status_of([&] { small.find("x"); }), 500);
  EXPECT_EQ(small.list().size(), 2u);
  // An adapter larger than the whole budget is refused at load.
  AdapterRegistry tiny(cfg, one / 2);
  EXPECT_EQ(status_of([&] { tiny.load("z", path, "base"); }), 400);
}

// A pool that keeps adapters in Q8_0 (serve --lora-type q8_0): its bytes
// are the compact ones, so a budget holds about twice as many as in F16;
// an evicted adapter comes back in the same type, with the same weights.
TEST(AdapterPool, KeepsAdaptersInTheTypeItWasGiven) {
  TESSERA_REQUIRE_SHARED(kAdapter);
  const ModelConfig& cfg = testing::stories260k().lm.model->config();
  const std::string path = testing::shared_path(kAdapter);
  const auto f32 = adapters::load_lora(path, cfg);
  const auto f16 = adapters::stored_as(f32, kernels::LoraWeightType::kF16);
  const auto q8 = adapters::stored_as(f32, kernels::LoraWeightType::kQ8_0);
  EXPECT_EQ(adapters::stored_as(f32, kernels::LoraWeightType::kF32), f32);
  EXPECT_NE(q8->uid, f32->uid);
  EXPECT_NE(q8->content_hash, f32->content_hash) << "other weights, other prompt-cache keys";
  EXPECT_EQ(f16->bytes() * 2, f32->bytes());
  // Rank 8 on every linear of 5 layers: attention's rows (64 and 32 wide)
  // in Q8_0 (34 bytes per 32 values), the FFN's (172 wide) stay F16.
  const size_t attention = 8 * (64 + 64) * 2 + 8 * (64 + 32) * 2, ffn = 3 * 8 * (64 + 172);
  EXPECT_EQ(q8->bytes(), 5 * (attention / 32 * 34 + ffn * 2));
  AdapterRegistry r(cfg, 2 * q8->bytes() + q8->bytes() / 2, kernels::LoraWeightType::kQ8_0);
  r.load("a", path, "base");
  r.load("b", path, "base");
  r.load("c", path, "base");  // evicts a
  EXPECT_EQ(r.pool_stats().resident_bytes, 2 * q8->bytes());
  const std::shared_ptr<const LoraAdapter> a = r.find("a");  // reloaded
  ASSERT_TRUE(a);
  EXPECT_EQ(r.pool_stats().loads_total, 4);
  EXPECT_EQ(a->content_hash, q8->content_hash);
  for (size_t il = 0; il < a->layers.size(); ++il) {
    for (int t = 0; t < kNumLoraTargets; ++t) {
      const LoraPair& got = a->layers[il][static_cast<size_t>(t)];
      const LoraPair& want = q8->layers[il][static_cast<size_t>(t)];
      EXPECT_EQ(got.type, want.type);
      EXPECT_EQ(got.a_packed, want.a_packed);
      EXPECT_EQ(got.b_packed, want.b_packed);
    }
  }
}

class AdapterServing : public ::testing::Test {
 protected:
  const LoadedModel& lm() const { return testing::stories260k().lm; }
  const Tokenizer& tok() const { return *testing::stories260k().tok; }
};

// A .npy soft prompt of `n` rows (float32), and its rows.
std::vector<float> write_soft_prompt(const std::string& path, int64_t n, int64_t width, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> rows(static_cast<size_t>(n * width));
  for (float& v : rows) v = nd(rng);
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(n) + ", " +
                       std::to_string(width) + "), }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::ofstream f(path, std::ios::binary);
  f.write("\x93NUMPY\x01\x00", 8);
  const char len[2] = {static_cast<char>(header.size() & 0xff), static_cast<char>(header.size() >> 8)};
  f.write(len, 2);
  f << header;
  f.write(reinterpret_cast<const char*>(rows.data()), static_cast<std::streamsize>(rows.size() * 4));
  return rows;
}

TEST_F(AdapterServing, SoftPromptsAreServedByName) {
  const std::string path = testing::temp_path("served.npy");
  const std::vector<float> rows = write_soft_prompt(path, 6, lm().model->config().n_embd, 3);
  auto sp = std::make_shared<SoftPrompt>();
  sp->n_virtual = 6;
  sp->n_embd = lm().model->config().n_embd;
  sp->embd = rows;
  const std::string want = direct_greedy(lm(), tok(), "The dog", 24, {nullptr, sp});
  const std::string plain = direct_greedy(lm(), tok(), "The dog", 24);
  ASSERT_NE(want, plain);

  Stack s(lm(), tok());
  s.adapters.add_soft_prompt("story", path, "stories");
  s.attach();
  httplib::Client cli("127.0.0.1", s.port());
  auto post = [&](const json& body) { return cli.Post("/v1/completions", body.dump(), "application/json"); };
  json body = {{"prompt", "The dog"}, {"max_tokens", 24}, {"temperature", 0}, {"soft_prompt", "story"}};
  auto r = post(body);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["choices"][0]["text"], want);
  body.erase("soft_prompt");
  EXPECT_EQ(json::parse(post(body)->body)["choices"][0]["text"], plain);
  body["soft_prompt"] = "nope";
  r = post(body);
  EXPECT_EQ(r->status, 404);
  EXPECT_NE(r->body.find("soft prompt"), std::string::npos) << r->body;
  body["soft_prompt"] = 3;
  EXPECT_EQ(post(body)->status, 400);
  // A soft prompt and a LoRA adapter together, in chat too.
  TESSERA_REQUIRE_SHARED(kAdapter);
  s.adapters.load("shakespeare", testing::shared_path(kAdapter), "stories");
  const auto lora = adapters::load_lora(testing::shared_path(kAdapter), lm().model->config());
  body = {{"model", "shakespeare"}, {"prompt", "The dog"}, {"max_tokens", 24}, {"temperature", 0},
          {"soft_prompt", "story"}};
  r = post(body);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["choices"][0]["text"], direct_greedy(lm(), tok(), "The dog", 24, {lora, sp}));
  // Bad files at start are refused with the loader's message.
  EXPECT_EQ(status_of([&] { s.adapters.add_soft_prompt("bad", testing::stories260k_path(), "stories"); }), 400);
  EXPECT_EQ(status_of([&] { s.adapters.add_soft_prompt("story", path, "stories"); }), 400);
}

// Without max_tokens a chat reply may use the rest of the context; the soft
// prompt's virtual tokens take context too, so that rest is max_model_len
// minus both. Counting only the conversation asked for n_virtual tokens too
// many: every such request was a 400. Both ways of giving a soft prompt: by
// name, and the server's own (--soft-prompt FILE).
TEST_F(AdapterServing, SoftPromptChatWithoutMaxTokensUsesTheRestOfTheContext) {
  const std::string path = testing::temp_path("chat-soft.npy");
  const std::vector<float> rows = write_soft_prompt(path, 6, lm().model->config().n_embd, 5);
  auto sp = std::make_shared<SoftPrompt>();
  sp->n_virtual = 6;
  sp->n_embd = lm().model->config().n_embd;
  sp->embd = rows;
  const ChatTemplate chatml = ChatTemplate::resolve("chatml", std::nullopt);
  const json chat = {{"messages", json::array({{{"role", "user"}, {"content", "Tell me a story."}}})},
                     {"temperature", 0}, {"ignore_eos", true}};
  for (bool server_wide : {false, true}) {
    engine::EngineConfig ec = stack_config();
    ec.num_kv_blocks = 16;  // 256 tokens
    if (server_wide) ec.soft_prompt = sp;
    Stack s(lm(), tok(), ec);
    ASSERT_EQ(s.engine->config().max_model_len, 256);
    s.adapters.add_soft_prompt("story", path, "stories");
    s.served.ctx.chat_template = &chatml;
    s.attach();
    httplib::Client cli("127.0.0.1", s.port());
    cli.set_read_timeout(120);
    json body = chat;
    if (!server_wide) body["soft_prompt"] = "story";
    for (const char* endpoint : {"/v1/chat/completions", "/v1/completions"}) {
      if (endpoint == std::string("/v1/completions")) {
        // A completion prompt that leaves 10 positions after the soft prompt:
        // max_tokens 10 fits, 11 does not, and the 400 says so.
        body = {{"prompt", json::array()}, {"temperature", 0}, {"ignore_eos", true}, {"max_tokens", 10}};
        if (!server_wide) body["soft_prompt"] = "story";
        for (int i = 0; i < 256 - 6 - 10; ++i) body["prompt"].push_back(1 + i % 20);
      }
      auto r = cli.Post(endpoint, body.dump(), "application/json");
      ASSERT_TRUE(r);
      ASSERT_EQ(r->status, 200) << endpoint << " server_wide=" << server_wide << ": " << r->body;
      const json j = json::parse(r->body);
      EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
      EXPECT_EQ(j["usage"]["total_tokens"], 256) << "virtual + prompt + generated fill the context: " << j["usage"].dump();
      if (endpoint == std::string("/v1/completions")) {
        body["max_tokens"] = 11;
        r = cli.Post(endpoint, body.dump(), "application/json");
        ASSERT_TRUE(r);
        EXPECT_EQ(r->status, 400) << r->body;
        // A prompt that only the virtual tokens push over the context is a
        // 400 naming the context length, not an engine error.
        body.erase("max_tokens");
        for (int i = 0; i < 10; ++i) body["prompt"].push_back(1);
        r = cli.Post(endpoint, body.dump(), "application/json");
        ASSERT_TRUE(r);
        EXPECT_EQ(r->status, 400) << r->body;
        EXPECT_NE(r->body.find("context_length_exceeded"), std::string::npos) << r->body;
      }
    }
  }
}

TEST_F(AdapterServing, LoadAndUnloadUnderLoadLosesNothing) {
  // 32 streaming clients name the base model or one of four adapters (the
  // real Shakespeare adapter under four names) while a loader loads and
  // unloads them every 250 ms, under a pool budget of two adapters. The
  // only error allowed is a 404 for an adapter unloaded before the
  // request arrived; every 200 streams to its end.
  TESSERA_REQUIRE_SHARED(kAdapter);
  const std::string path = testing::shared_path(kAdapter);
  const size_t one = adapters::load_lora(path, lm().model->config())->bytes();
  set_log_level(LogLevel::kWarn);  // thousands of requests
  engine::EngineConfig ec = stack_config();
  ec.max_num_seqs = 32;
  ec.num_kv_blocks = 1024;
  Stack s(lm(), tok(), ec, /*runtime_lora=*/true, /*lora_pool_bytes=*/2 * one, /*http_threads=*/40);
  s.attach();
  const std::vector<std::string> names = {"a0", "a1", "a2", "a3"};
  std::atomic<int> ok{0}, not_found{0}, other{0}, truncated{0};
  std::string first_other;
  std::mutex first_mu;

  auto phase = [&](std::chrono::milliseconds how_long) {
    const auto until = std::chrono::steady_clock::now() + how_long;
    std::atomic<bool> stop{false};
    std::thread loader([&] {
      httplib::Client cli("127.0.0.1", s.port());
      std::mt19937 rng(5);
      while (!stop) {
        const std::string& n = names[rng() % names.size()];
        auto r = cli.Post("/v1/load_lora_adapter", json{{"lora_name", n}, {"lora_path", path}}.dump(),
                          "application/json");
        if (r && r->status == 400 && rng() % 3 == 0) {  // already loaded: sometimes unload it
          cli.Post("/v1/unload_lora_adapter", json{{"lora_name", n}}.dump(), "application/json");
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(250));
      }
    });
    std::vector<std::thread> clients;
    for (int c = 0; c < 32; ++c) {
      clients.emplace_back([&, c] {
        httplib::Client cli("127.0.0.1", s.port());
        cli.set_read_timeout(60, 0);
        std::mt19937 rng(100 + c);
        while (std::chrono::steady_clock::now() < until) {
          const size_t pick = rng() % (names.size() + 1);
          const std::string model = pick == names.size() ? "stories" : names[pick];
          const json body = {{"model", model}, {"prompt", "Once upon a time"}, {"max_tokens", 4 + rng() % 20},
                             {"stream", true}, {"ignore_eos", true}};
          auto r = cli.Post("/v1/completions", body.dump(), "application/json");
          if (r && r->status == 200) {
            ++ok;
            if (r->body.find("data: [DONE]") == std::string::npos) ++truncated;
          } else if (r && r->status == 404 && model != "stories" &&
                     r->body.find("does not exist") != std::string::npos) {
            ++not_found;
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
          } else {
            ++other;
            std::lock_guard<std::mutex> lock(first_mu);
            if (first_other.empty()) first_other = r ? std::to_string(r->status) + " " + r->body : "no response";
          }
        }
      });
    }
    for (auto& t : clients) t.join();
    stop = true;
    loader.join();
    const auto settle = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while ((s.async->in_flight() != 0 || s.http->active_requests() != 0) && std::chrono::steady_clock::now() < settle) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  };
  phase(std::chrono::milliseconds(1500));  // warm-up: arenas, buffers, the prefix cache
  const long rss0 = rss_kib();
  phase(std::chrono::milliseconds(4000));
  const long rss1 = rss_kib();

  EXPECT_EQ(other.load(), 0) << first_other;
  EXPECT_EQ(truncated.load(), 0);
  EXPECT_GT(ok.load(), 100);
  EXPECT_GT(not_found.load(), 0) << "requests for unloaded adapters must be exercised";
  EXPECT_EQ(s.async->in_flight(), 0);
  EXPECT_EQ(s.async->stats().num_running, 0);
  EXPECT_EQ(s.async->stats().kv_blocks_used, 0);
  // Nothing holds an adapter now: the pool is within its budget and its
  // bytes are those of its resident adapters.
  const AdapterRegistry::PoolStats st = s.adapters.pool_stats();
  EXPECT_LE(st.resident_bytes, 2 * one);
  EXPECT_EQ(st.resident_bytes, static_cast<size_t>(st.resident) * one);
  EXPECT_GT(st.loads_total, 8);
  EXPECT_GT(st.evictions_total, 0) << "the budget must be exercised";
  set_log_level(LogLevel::kInfo);
  // RSS after 4 s more of churn: within 16 MiB of after the warm-up (one
  // adapter is ~0.1 MiB; a leak per request or per load would show).
  // Under AddressSanitizer freed memory sits in its quarantine (RSS grows
  // by design) and LeakSanitizer checks for leaks at exit instead.
  if (!kAddressSanitizer) {
    EXPECT_LT(rss1 - rss0, 16 * 1024) << rss0 << " KiB -> " << rss1 << " KiB";
  }
  std::fprintf(stderr, "ok %d, 404 %d; RSS %ld -> %ld KiB; %lld loads, %lld evictions\n", ok.load(), not_found.load(),
               rss0, rss1, static_cast<long long>(st.loads_total), static_cast<long long>(st.evictions_total));
}

}  // namespace
}  // namespace tessera::server
