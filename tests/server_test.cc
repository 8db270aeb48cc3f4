// The HTTP server in-process, on stories260K: request parsing limits, the
// Prometheus exposition, greedy output against the engine driven directly,
// hostile bodies, a client vanishing mid-stream, and shutdown with a stream
// open. (The OpenAI-client suite is tests/server/*.mjs.)
#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cstring>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "adapters/lora_gguf.h"
#include "model/model.h"
#include "model/synthetic.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"
#include "adapters/registry.h"
#include "server/async_engine.h"
#include "template/chat_template.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/openai_request.h"
#include "server/sampling_json.h"
#include "util/server_stack.h"
#include "util/test_util.h"

namespace tessera::server {
namespace {

using nlohmann::json;

TEST(ServerJson, DeepNestingIsRefusedNotOverflowed) {
  for (const std::string open : {"[", "{\"a\":"}) {
    std::string body;
    for (int i = 0; i < 100000; ++i) body += open;
    EXPECT_EQ(status_of([&] { parse_body(body); }), 400);
  }
  std::string ok(64, '[');
  ok += std::string(64, ']');
  EXPECT_NO_THROW(parse_body(ok, 64));
  std::string deep(65, '[');
  deep += std::string(65, ']');
  EXPECT_EQ(status_of([&] { parse_body(deep, 64); }), 400);
}

TEST(ServerJson, HostileScalars) {
  EXPECT_EQ(status_of([] { parse_body(R"({"max_tokens": 1e400})"); }), 400);
  EXPECT_EQ(status_of([] { parse_body("{\"prompt\": \"\xff\xfe\"}"); }), 400);     // invalid UTF-8
  EXPECT_EQ(status_of([] { parse_body(std::string("{\"a\":1}\0garbage", 15)); }), 400);
  EXPECT_EQ(status_of([] { parse_body(""); }), 400);
  EXPECT_NO_THROW(parse_body(R"({"seed": 18446744073709551616})"));  // above uint64: a double
}

TEST(SamplingJson, IntegerValueEdges) {
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min(), kMax = std::numeric_limits<int64_t>::max();
  // 2^63 as a double is one past int64: refused, not converted (UB).
  EXPECT_THROW(integer_value(json(9223372036854775808.0), "seed", kMin, kMax), FieldError);
  EXPECT_EQ(integer_value(json(-9223372036854775808.0), "seed", kMin, kMax), kMin);
  EXPECT_THROW(integer_value(json(std::numeric_limits<uint64_t>::max()), "seed", kMin, kMax), FieldError);
  EXPECT_EQ(integer_value(json(int64_t{9007199254740993}), "seed", kMin, kMax), 9007199254740993);  // no double rounding
  EXPECT_THROW(integer_value(json(1.5), "n", 1, 128), FieldError);
  EXPECT_EQ(integer_value(json(3.0), "n", 1, 128), 3);
  EXPECT_THROW(integer_value(json(0u), "max_tokens", 1, 100), FieldError);
  EXPECT_THROW(integer_value(json("7"), "n", 1, 128), FieldError);
  try {
    parse_sampling(json{{"top_p", "x"}}, {});
    FAIL();
  } catch (const FieldError& e) {
    EXPECT_EQ(e.field(), "top_p");
  }
}

TEST(Metrics, HistogramBucketsAreCumulativeAndInclusive) {
  Histogram h({0.1, 1.0, 10.0});
  for (double v : {0.05, 0.1, 0.5, 20.0, 1.0}) h.observe(v);
  const Histogram::Snapshot s = h.snapshot();
  // le=0.1 holds 0.05 and 0.1; le=1 adds 0.5 and 1.0; +Inf adds 20.
  EXPECT_EQ(s.cumulative, (std::vector<uint64_t>{2, 4, 4, 5}));
  EXPECT_EQ(s.count, 5u);
  EXPECT_DOUBLE_EQ(s.sum, 21.65);
}

TEST(Metrics, ExpositionIsWellFormed) {
  Metrics m;
  m.observe_ttft(0.03);
  m.observe_e2e(1.2);
  m.count_http("/v1/completions", 200);
  m.count_finished("length");
  engine::EngineStats st;
  st.kv_blocks_used = 3;
  st.kv_blocks_total = 100;
  const std::string text = m.render(&st, 2);
  const std::regex sample(R"(^([a-z0-9_]+)(\{[a-z_]+="[^"]*"(,[a-z_]+="[^"]*")*\})? (-?[0-9.e+-]+|\+Inf)$)");
  const std::regex type(R"(^# TYPE ([a-z0-9_]+) (gauge|counter|histogram)$)");
  std::set<std::string> typed;
  std::istringstream in(text);
  std::string line;
  int samples = 0;
  while (std::getline(in, line)) {
    std::smatch mt;
    if (std::regex_match(line, mt, type)) {
      typed.insert(mt[1]);
      continue;
    }
    if (line.starts_with("# HELP ")) continue;
    ASSERT_TRUE(std::regex_match(line, mt, sample)) << line;
    std::string name = mt[1];
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      if (name.ends_with(suffix) && typed.count(name.substr(0, name.size() - std::strlen(suffix)))) {
        name = name.substr(0, name.size() - std::strlen(suffix));
      }
    }
    EXPECT_TRUE(typed.count(name)) << "no # TYPE before " << line;
    ++samples;
  }
  EXPECT_GT(samples, 40);
  EXPECT_NE(text.find("\ntessera_kv_blocks_used 3\n"), std::string::npos);
  EXPECT_NE(text.find("tessera_time_to_first_token_seconds_bucket{le=\"0.04\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("tessera_time_to_first_token_seconds_bucket{le=\"0.02\"} 0\n"), std::string::npos);
  EXPECT_NE(text.find("tessera_e2e_request_latency_seconds_count 1\n"), std::string::npos);
}

// ---- in-process server ------------------------------------------------------

// A raw connection: the test decides when to hang up.
class RawConn {
 public:
  explicit RawConn(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ok_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    timeval tv{10, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  ~RawConn() { close(); }
  bool ok() const { return ok_; }
  void send(const std::string& s) { ASSERT_EQ(::send(fd_, s.data(), s.size(), MSG_NOSIGNAL), static_cast<ssize_t>(s.size())); }
  // Reads until `needle` has appeared `times` times, EOF, or timeout.
  std::string read_until(const std::string& needle, int times = 1) {
    char buf[4096];
    for (;;) {
      int seen = 0;
      for (size_t p = got_.find(needle); p != std::string::npos; p = got_.find(needle, p + 1)) ++seen;
      if (seen >= times) break;
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) break;
      got_.append(buf, static_cast<size_t>(n));
    }
    return got_;
  }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
  bool ok_ = false;
  std::string got_;
};

std::string post_request(const std::string& path, const std::string& body) {
  return fmt::format("POST {} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{}",
                     path, body.size(), body);
}

class ServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    lm_ = new LoadedModel(load_model(testing::stories260k_path()));
    tok_ = Tokenizer::from_gguf(*lm_->file).release();
  }
  static void TearDownTestSuite() {
    delete tok_;
    delete lm_;
  }
  static LoadedModel* lm_;
  static Tokenizer* tok_;
};
LoadedModel* ServerTest::lm_ = nullptr;
Tokenizer* ServerTest::tok_ = nullptr;

TEST_F(ServerTest, LoadingThenReady) {
  Stack s(*lm_, *tok_);
  httplib::Client cli("127.0.0.1", s.port());
  auto h = cli.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 503);
  EXPECT_EQ(json::parse(h->body)["status"], "loading");
  auto c = cli.Post("/v1/completions", R"({"prompt": "a"})", "application/json");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->status, 503);
  EXPECT_EQ(c->get_header_value("Retry-After"), "1");
  s.attach();
  h = cli.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
}

TEST_F(ServerTest, GreedyCompletionEqualsTheEngineDrivenDirectly) {
  const std::string want = direct_greedy(*lm_, *tok_, "Once upon a time", 40);
  ASSERT_FALSE(want.empty());

  Stack s(*lm_, *tok_);
  s.attach();
  httplib::Client cli("127.0.0.1", s.port());
  auto r = cli.Post("/v1/completions", R"({"prompt": "Once upon a time", "max_tokens": 40, "temperature": 0})",
                    "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json j = json::parse(r->body);
  EXPECT_EQ(j["choices"][0]["text"], want);
  EXPECT_EQ(j["usage"]["completion_tokens"], 40);
}

TEST_F(ServerTest, LoraAdaptersAreServedByNameLoadedAndUnloaded) {
  TESSERA_REQUIRE_SHARED("models/stories260K/lora-shakespeare.gguf");
  const std::string path = testing::shared_path("models/stories260K/lora-shakespeare.gguf");
  // Reference: the engine driven directly with the adapter.
  const auto lora = adapters::load_lora(path, lm_->model->config());
  const std::string with = direct_greedy(*lm_, *tok_, "The king", 30, lora);
  const std::string without = direct_greedy(*lm_, *tok_, "The king", 30);
  ASSERT_NE(with, without);

  Stack s(*lm_, *tok_, stack_config(), /*runtime_lora=*/true);
  s.attach();
  httplib::Client cli("127.0.0.1", s.port());
  auto complete = [&](const std::string& model) {
    return cli.Post("/v1/completions",
                    json{{"model", model}, {"prompt", "The king"}, {"max_tokens", 30}, {"temperature", 0}}.dump(),
                    "application/json");
  };
  auto post = [&](const std::string& url, const json& body) { return cli.Post(url, body.dump(), "application/json"); };
  auto r = complete("shakespeare");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404) << r->body;
  r = post("/v1/load_lora_adapter", {{"lora_name", "shakespeare"}, {"lora_path", path}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  r = complete("shakespeare");
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["choices"][0]["text"], with);
  EXPECT_EQ(json::parse(r->body)["model"], "shakespeare");
  r = complete("stories");
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["choices"][0]["text"], without);
  // Listed beside the base model, with its file and parent.
  auto models = cli.Get("/v1/models");
  ASSERT_TRUE(models);
  const json data = json::parse(models->body)["data"];
  ASSERT_EQ(data.size(), 2u);
  EXPECT_EQ(data[1]["id"], "shakespeare");
  EXPECT_EQ(data[1]["parent"], "stories");
  EXPECT_EQ(data[1]["root"], path);
  EXPECT_EQ(cli.Get("/v1/models/shakespeare")->status, 200);
  // Refused: a name in use, the base model's name, a file that is not an
  // adapter, missing fields; unloading an unknown name.
  EXPECT_EQ(post("/v1/load_lora_adapter", {{"lora_name", "shakespeare"}, {"lora_path", path}})->status, 400);
  EXPECT_EQ(post("/v1/load_lora_adapter", {{"lora_name", "stories"}, {"lora_path", path}})->status, 400);
  auto bad = post("/v1/load_lora_adapter", {{"lora_name", "x"}, {"lora_path", testing::stories260k_path()}});
  EXPECT_EQ(bad->status, 400);
  EXPECT_NE(bad->body.find("not a LoRA adapter"), std::string::npos) << bad->body;
  EXPECT_EQ(post("/v1/load_lora_adapter", {{"lora_name", "y"}})->status, 400);
  EXPECT_EQ(post("/v1/unload_lora_adapter", {{"lora_name", "nope"}})->status, 404);
  // Unloaded: new requests naming it get 404, the base model still serves.
  EXPECT_EQ(post("/v1/unload_lora_adapter", {{"lora_name", "shakespeare"}})->status, 200);
  EXPECT_EQ(complete("shakespeare")->status, 404);
  EXPECT_EQ(complete("stories")->status, 200);
  EXPECT_EQ(json::parse(cli.Get("/v1/models")->body)["data"].size(), 1u);

  // Without --allow-runtime-lora the endpoints are refused.
  Stack locked(*lm_, *tok_);
  locked.attach();
  httplib::Client c2("127.0.0.1", locked.port());
  auto l = c2.Post("/v1/load_lora_adapter", json{{"lora_name", "a"}, {"lora_path", path}}.dump(), "application/json");
  ASSERT_TRUE(l);
  EXPECT_EQ(l->status, 403);
}

// The text of an SSE stream: the concatenation of every chunk's choices[0]
// text (completions) or delta content (chat).
std::string streamed_text(const std::string& body, bool chat) {
  std::string text;
  std::istringstream lines(body);
  std::string line;
  while (std::getline(lines, line)) {
    if (!line.starts_with("data: {")) continue;
    const json j = json::parse(line.substr(6));
    if (j["choices"].empty()) continue;
    const json& c = j["choices"][0];
    if (chat) {
      if (c["delta"].contains("content")) text += c["delta"]["content"].get<std::string>();
    } else {
      text += c["text"].get<std::string>();
    }
  }
  return text;
}

// Issue 13: completion text is decode(prompt + output) minus decode(prompt)
// over HTTP, streamed and not, and the logprobs' tokens and text offsets
// agree with it; a chat reply does not start with the word-start space.
void check_http_text_continues_prompt(const LoadedModel& lm, const Tokenizer& tok) {
  Stack s(lm, tok);
  const ChatTemplate chatml = ChatTemplate::resolve("chatml", std::nullopt);
  s.served.ctx.chat_template = &chatml;
  s.attach();
  httplib::Client cli("127.0.0.1", s.port());
  int with_space = 0;
  for (const std::string prompt : {"The little dog", "Once upon a time", "She said", "\"Hi", "The end.\n"}) {
    // Reference: the engine's tokens, decoded with the prompt.
    engine::EngineConfig ec;
    ec.threads = 1;
    ec.num_kv_blocks = 64;
    engine::Engine ref(*lm.model, &tok, ec);
    engine::SamplingParams p;
    p.temperature = 0;
    p.max_tokens = 12;
    p.ignore_eos = true;
    const std::vector<int32_t> ids = tok.encode(prompt, true, true);
    std::vector<int32_t> all = ids;
    ref.add_request(ids, p, [&](const engine::RequestOutput& o) { all.insert(all.end(), o.new_tokens.begin(), o.new_tokens.end()); });
    while (ref.has_unfinished()) ref.step();
    const std::string head = tok.decode(ids), full = tok.decode(all);
    ASSERT_EQ(full.compare(0, head.size(), head), 0);
    const std::string want = full.substr(head.size());
    if (want.starts_with(" ")) ++with_space;

    json body = {{"prompt", prompt}, {"max_tokens", 12}, {"temperature", 0}, {"ignore_eos", true}, {"logprobs", 1}};
    auto r = cli.Post("/v1/completions", body.dump(), "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const json j = json::parse(r->body);
    EXPECT_EQ(j["choices"][0]["text"], want) << prompt;
    // Each token's offset is where its bytes start in the text (a byte-level
    // token may hold part of a character: its JSON string then shows U+FFFD).
    const json& lp = j["choices"][0]["logprobs"];
    ASSERT_EQ(lp["tokens"].size(), all.size() - ids.size());
    std::string pieces;
    for (size_t t = 0; t < lp["tokens"].size(); ++t) {
      EXPECT_EQ(lp["text_offset"][t], pieces.size());
      const std::string piece = tok.token_to_piece(all[ids.size() + t]);
      if (tok::is_valid_utf8(piece)) {
        EXPECT_EQ(lp["tokens"][t], piece);
      }
      pieces += piece;
    }
    if (tok::is_valid_utf8(pieces)) {
      EXPECT_EQ(pieces, want) << "the tokens' bytes, concatenated";
    }

    body["stream"] = true;
    auto st = cli.Post("/v1/completions", body.dump(), "application/json");
    ASSERT_TRUE(st);
    EXPECT_EQ(streamed_text(st->body, false), want) << prompt;

    // Chat: the reply starts a turn; no leading space, streamed or not.
    json chat = {{"messages", json::array({{{"role", "user"}, {"content", prompt}}})},
                 {"max_tokens", 8}, {"temperature", 0}, {"ignore_eos", true}};
    auto c = cli.Post("/v1/chat/completions", chat.dump(), "application/json");
    ASSERT_TRUE(c);
    ASSERT_EQ(c->status, 200) << c->body;
    const std::string reply = json::parse(c->body)["choices"][0]["message"]["content"];
    EXPECT_FALSE(reply.starts_with(" ")) << reply;
    chat["stream"] = true;
    auto cs = cli.Post("/v1/chat/completions", chat.dump(), "application/json");
    ASSERT_TRUE(cs);
    EXPECT_EQ(streamed_text(cs->body, true), reply);
  }
  EXPECT_GT(with_space, 0) << "no continuation started with a space";
}

TEST_F(ServerTest, CompletionTextContinuesThePromptSpm) { check_http_text_continues_prompt(*lm_, *tok_); }

// A random model with GPT-2's byte-level BPE vocabulary.
std::string random_bpe_model(const std::string& name, int64_t n_ctx, int64_t n_layer) {
  SyntheticModelSpec spec;
  spec.n_embd = 64;
  spec.n_head = 4;
  spec.n_head_kv = 4;
  spec.n_ff = 96;
  spec.n_layer = n_layer;
  spec.n_ctx = n_ctx;
  spec.vocab_from = testing::shared_path("models/vocab/ggml-vocab-gpt-2.gguf");
  const std::string path = testing::temp_path(name);
  write_synthetic_model(spec, path, 1);
  return path;
}

TEST_F(ServerTest, CompletionTextContinuesThePromptByteLevelBpe) {
  TESSERA_REQUIRE_SHARED("models/vocab/ggml-vocab-gpt-2.gguf");
  const LoadedModel lm = load_model(random_bpe_model("server-bpe.gguf", 512, 2));
  const auto tok = Tokenizer::from_gguf(*lm.file);
  check_http_text_continues_prompt(lm, *tok);
}

// Issue 13: most chat clients never send max_tokens. On a 131072-token
// model whose default cache (1 GiB here: 40 layers x 4 KV heads x 16 dims,
// 10 KiB a token) cannot hold one full context, the context is capped at
// what the cache holds, and a chat request without max_tokens is admitted
// and generates; with a smaller cache it runs to that cap and says "length".
TEST_F(ServerTest, ChatWithoutMaxTokensOnALongContextModel) {
  TESSERA_REQUIRE_SHARED("models/vocab/ggml-vocab-gpt-2.gguf");
  const LoadedModel lm = load_model(random_bpe_model("server-131k.gguf", 131072, 40));
  ASSERT_EQ(lm.model->config().n_ctx_train, 131072);
  const auto tok = Tokenizer::from_gguf(*lm.file);
  const ChatTemplate chatml = ChatTemplate::resolve("chatml", std::nullopt);
  const json chat = {{"messages", json::array({{{"role", "user"}, {"content", "Tell me a story."}}})},
                     {"temperature", 0}, {"ignore_eos", true}};
  {
    engine::EngineConfig ec;  // the defaults, as `tessera serve` has them
    ec.threads = 1;
    Stack s(lm, *tok, ec);
    const int64_t cap = s.engine->config().max_model_len;
    EXPECT_LT(cap, 131072) << "the default cache should not hold a whole 131072-token context here";
    EXPECT_EQ(cap, s.engine->stats().kv_blocks_total * ec.block_size);
    s.served.ctx.chat_template = &chatml;
    s.attach();
    RawConn c(s.port());
    json streamed = chat;
    streamed["stream"] = true;
    c.send(post_request("/v1/chat/completions", streamed.dump()));
    const std::string got = c.read_until("\"content\":", 4);
    EXPECT_NE(got.find("200 OK"), std::string::npos) << got.substr(0, 400);
    c.close();
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (s.async->in_flight() > 0 && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_EQ(s.async->in_flight(), 0);
  }
  engine::EngineConfig small;
  small.threads = 1;
  small.num_kv_blocks = 16;  // 256 tokens
  Stack s(lm, *tok, small);
  ASSERT_EQ(s.engine->config().max_model_len, 256);
  s.served.ctx.chat_template = &chatml;
  s.attach();
  httplib::Client cli("127.0.0.1", s.port());
  cli.set_read_timeout(120);
  auto r = cli.Post("/v1/chat/completions", chat.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json j = json::parse(r->body);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["total_tokens"], 256) << "generated up to the capped context";
}

// Issue 13: thousands of random submit / reject / abort / drop / finish
// sequences straight on the AsyncEngine (n in 1..8, one to four prompts, some
// longer than the context so the request is rejected after its first prompts
// were queued). Whatever happens, in-flight, waiting, running and KV blocks
// all return to zero, and the whole capacity can be admitted again.
TEST_F(ServerTest, InFlightAccountingSurvivesRandomLifecycles) {
  engine::EngineConfig ec;
  ec.threads = 1;
  ec.max_num_seqs = 16;
  ec.num_kv_blocks = 20;  // 320 tokens: prompts of ~400 tokens cannot fit
  engine::Engine eng(*lm_->model, tok_, ec);
  Metrics metrics;
  const int64_t capacity = 64;
  AsyncEngine async(eng, metrics, capacity);
  std::mt19937 rng(2024);
  auto prompt = [&](int len) {
    engine::PromptLayout p;
    p.tokens.push_back(1);
    for (int i = 1; i < len; ++i) p.tokens.push_back(3 + static_cast<int32_t>(rng() % 400));
    return p;
  };
  std::vector<std::shared_ptr<RequestChannel>> live;
  int submitted = 0, rejected = 0, refused = 0, aborted = 0, dropped = 0;
  // Until enough of each path has run (how many submissions the capacity
  // admits at a time depends on how fast the engine runs).
  for (int it = 0; it < 50000 && (submitted < 400 || rejected < 150 || aborted + dropped < 300); ++it) {
    const int action = static_cast<int>(rng() % 10);
    if (action < 5) {
      std::vector<engine::PromptLayout> prompts;
      const int n_prompts = 1 + static_cast<int>(rng() % 4);
      const bool too_long = rng() % 4 == 0;
      for (int i = 0; i < n_prompts; ++i) {
        prompts.push_back(prompt(too_long && i == n_prompts - 1 ? 400 : 2 + static_cast<int>(rng() % 20)));
      }
      engine::SamplingParams p;
      p.n = 1 + static_cast<int32_t>(rng() % 8);
      p.max_tokens = 1 + static_cast<int32_t>(rng() % 12);
      p.temperature = rng() % 2 ? 0.0f : 0.8f;
      try {
        live.push_back(async.submit(std::move(prompts), p));
        ++submitted;
      } catch (const Error& e) {
        if (e.code() != ErrorCode::kResourceExhausted) {
          ++rejected;
        } else if (++refused; !live.empty()) {
          // At capacity: a client reads one response to its end.
          std::vector<ChannelItem> items;
          while (!live.front()->finished()) live.front()->wait(items, std::chrono::milliseconds(20));
          live.erase(live.begin());
        }
      }
    } else if (action < 7 && !live.empty()) {
      async.abort(*live[rng() % live.size()]);
      ++aborted;
    } else if (action < 8 && !live.empty()) {
      // A client that vanishes: its request is aborted and nobody reads.
      const size_t i = rng() % live.size();
      async.abort(*live[i]);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
      ++dropped;
    } else if (!live.empty()) {
      // A reader: drain one channel a little; forget it once finished.
      const size_t i = rng() % live.size();
      std::vector<ChannelItem> items;
      live[i]->wait(items, std::chrono::milliseconds(1));
      if (live[i]->finished()) live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
    }
    ASSERT_GE(async.in_flight(), 0);
    ASSERT_LE(async.in_flight(), capacity);
  }
  for (auto& ch : live) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    std::vector<ChannelItem> items;
    while (!ch->finished() && std::chrono::steady_clock::now() < until) ch->wait(items, std::chrono::milliseconds(50));
    EXPECT_TRUE(ch->finished());
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  auto settled = [&] {
    const engine::EngineStats st = async.stats();  // updated at the end of each step
    return async.in_flight() == 0 && st.num_running == 0 && st.num_waiting == 0 && st.kv_blocks_used == 0;
  };
  while (!settled() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_GE(submitted, 400);
  EXPECT_GE(rejected, 150) << "rejections after queued prompts must be exercised";
  EXPECT_GE(aborted + dropped, 300);
  EXPECT_EQ(async.in_flight(), 0);
  const engine::EngineStats st = async.stats();
  EXPECT_EQ(st.num_waiting, 0);
  EXPECT_EQ(st.num_running, 0);
  EXPECT_EQ(st.kv_blocks_used, 0);
  // The whole capacity is admitted again.
  engine::SamplingParams p;
  p.n = 8;
  p.max_tokens = 2;
  std::vector<engine::PromptLayout> eight(8, prompt(4));
  std::shared_ptr<RequestChannel> ch;
  ASSERT_NO_THROW(ch = async.submit(std::move(eight), p));
  std::vector<ChannelItem> items;
  while (!ch->finished()) ch->wait(items, std::chrono::milliseconds(50));
}

// The same over HTTP: concurrent clients send streamed and non-streamed
// requests (n in 1..8, one to four prompts, some rejected after queueing),
// some hang up mid-way; afterwards in-flight, waiting, KV blocks and HTTP
// workers busy with a request are all zero.
TEST_F(ServerTest, RandomClientsLeaveNothingBehind) {
  engine::EngineConfig ec = stack_config();
  ec.max_num_seqs = 16;
  ec.num_kv_blocks = 20;
  Stack s(*lm_, *tok_, ec);
  s.attach();
  std::atomic<int> ok{0}, bad{0}, gone{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < 6; ++c) {
    clients.emplace_back([&, c] {
      std::mt19937 rng(77 + c);
      for (int i = 0; i < 40; ++i) {
        json prompts = json::array();
        const int n_prompts = 1 + static_cast<int>(rng() % 4);
        const bool too_long = rng() % 4 == 0;
        for (int k = 0; k < n_prompts; ++k) {
          std::string text = "Once upon a time";
          if (too_long && k == n_prompts - 1) {
            for (int r = 0; r < 60; ++r) text += " there was a little cat";
          }
          prompts.push_back(text);
        }
        json body = {{"prompt", prompts}, {"n", 1 + rng() % (i % 3 == 0 ? 8 : 3)}, {"max_tokens", 1 + rng() % 24},
                     {"stream", rng() % 2 == 0}};
        RawConn conn(s.port());
        if (!conn.ok()) continue;
        std::string req = post_request("/v1/completions", body.dump());
        req.insert(req.find("\r\n") + 2, "Connection: close\r\n");
        conn.send(req);
        if (rng() % 4 == 0) {  // hang up early
          conn.read_until("HTTP/1.1", 1);
          ++gone;
          continue;
        }
        const std::string got = conn.read_until("\x01 (read to the end)", 1);
        (got.find("200 OK") != std::string::npos ? ok : bad)++;
      }
    });
  }
  for (auto& t : clients) t.join();
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while ((s.async->in_flight() != 0 || s.http->active_requests() != 0 || s.async->stats().kv_blocks_used != 0) &&
         std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_GT(ok.load(), 20) << bad.load() << " refused or rejected, " << gone.load() << " hung up";
  EXPECT_GT(bad.load(), 10) << "rejections must be exercised";
  EXPECT_GT(gone.load(), 10);
  EXPECT_EQ(s.async->in_flight(), 0);
  EXPECT_EQ(s.http->active_requests(), 0);
  EXPECT_EQ(s.async->stats().num_waiting, 0);
  EXPECT_EQ(s.async->stats().kv_blocks_used, 0);
}

// Speculation is invisible in outputs: with --spec ngram, a greedy
// completion with the default, with "speculative": false and with
// {"method": "ngram", "k": 3} is the same text; misuse of the field is a
// 400 naming it; /metrics counts the drafts.
TEST_F(ServerTest, SpeculativeFieldChangesSpeedNotText) {
  engine::EngineConfig ec = stack_config();
  ec.spec_method = spec::Method::kNgram;
  ec.spec_adaptive = false;
  Stack s(*lm_, *tok_, ec);
  s.attach();
  httplib::Client cli("127.0.0.1", s.port());
  const std::string base =
      R"("prompt": "The cat sat on the mat. The dog sat on the log. The cat sat on the", "max_tokens": 60, "temperature": 0)";
  std::vector<std::string> texts;
  for (const std::string extra : {"", R"(, "speculative": false)", R"(, "speculative": {"method": "ngram", "k": 3})",
                                  R"(, "speculative": {"method": "none"})"}) {
    auto r = cli.Post("/v1/completions", "{" + base + extra + "}", "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << extra << ": " << r->body;
    texts.push_back(json::parse(r->body)["choices"][0]["text"].get<std::string>());
  }
  for (const std::string& t : texts) EXPECT_EQ(t, texts[0]);
  for (const auto& [extra, param] : std::vector<std::pair<std::string, std::string>>{
           {R"(, "speculative": 3)", "speculative"},
           {R"(, "speculative": {"k": 0})", "speculative.k"},
           {R"(, "speculative": {"method": 7})", "speculative.method"},
           {R"(, "speculative": {"depth": 2})", "speculative.depth"},
           {R"(, "speculative": {"method": "medusa"})", ""},
           {R"(, "speculative": {"method": "draft"})", ""}}) {
    auto r = cli.Post("/v1/completions", "{" + base + extra + "}", "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << extra << ": " << r->body;
    if (!param.empty()) {
      EXPECT_EQ(json::parse(r->body)["error"]["param"], param) << r->body;
    }
  }
  auto m = cli.Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_NE(m->body.find("tessera_spec_accepted_tokens_total "), std::string::npos);
  EXPECT_EQ(m->body.find("tessera_spec_draft_tokens_total 0\n"), std::string::npos) << "no draft was verified";
}

// "kv_policy" (docs/SERVER.md): a bounded request runs past the model's
// context (its cache holds its budget), with the server's default policy
// replaced field by field; bad values are a 400 naming the field.
TEST_F(ServerTest, KvPolicyFieldBoundsTheCache) {
  Stack s(*lm_, *tok_);
  s.served.ctx.kv_policy = {kv::KvPolicyKind::kDense, 48, 4, 0};  // as with --kv-budget 48
  s.attach();
  httplib::Client cli("127.0.0.1", s.port());
  cli.set_read_timeout(120, 0);  // recompute prefills its budget at every token
  const int64_t n = s.engine->config().max_model_len + 100;  // past the context
  const std::string base =
      fmt::format(R"("prompt": "Once upon a time", "max_tokens": {}, "temperature": 0, "ignore_eos": true)", n);
  auto dense = cli.Post("/v1/completions", "{" + base + "}", "application/json");
  ASSERT_TRUE(dense);
  EXPECT_EQ(dense->status, 400) << n << " tokens exceed the context: " << dense->body;
  std::vector<std::string> texts;
  for (const std::string extra : {R"(, "kv_policy": {"type": "sink", "budget": 64, "sinks": 4})",
                                  R"(, "kv_policy": {"type": "sink", "budget": 64})", R"(, "kv_policy": "window")"}) {
    auto r = cli.Post("/v1/completions", "{" + base + extra + "}", "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << extra << ": " << r->body;
    const json j = json::parse(r->body);
    EXPECT_EQ(j["usage"]["completion_tokens"], n) << extra;
    texts.push_back(j["choices"][0]["text"].get<std::string>());
  }
  EXPECT_EQ(texts[0], texts[1]) << "sinks default to the server's 4";
  // H2O and SpAtten, with the server's budget and their default recent
  // tokens, and recompute.
  for (const std::string extra : {R"(, "kv_policy": "h2o")", R"(, "kv_policy": {"type": "spatten", "recent": 8})",
                                  R"(, "kv_policy": {"type": "recompute", "budget": 32})"}) {
    auto r = cli.Post("/v1/completions", "{" + base + extra + "}", "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << extra << ": " << r->body;
    EXPECT_EQ(json::parse(r->body)["usage"]["completion_tokens"], n) << extra;
  }
  for (const auto& [extra, param] : std::vector<std::pair<std::string, std::string>>{
           {R"(, "kv_policy": 3)", "kv_policy"},
           {R"(, "kv_policy": "h3o")", "kv_policy"},
           {R"(, "kv_policy": {"type": "h2o", "budget": 64, "recent": 64})", "kv_policy"},
           {R"(, "kv_policy": {"type": "h2o", "recent": -1})", "kv_policy.recent"},
           {R"(, "kv_policy": {"type": "recompute2", "budget": 64})", "kv_policy.type"},
           {R"(, "kv_policy": {"type": "sink", "budget": -1})", "kv_policy.budget"},
           {R"(, "kv_policy": {"type": "sink", "budget": 4})", "kv_policy"},
           {R"(, "kv_policy": {"type": "sink", "sinks": "many"})", "kv_policy.sinks"},
           {R"(, "kv_policy": {"size": 4})", "kv_policy.size"}}) {
    auto r = cli.Post("/v1/completions", "{" + base + extra + "}", "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << extra << ": " << r->body;
    EXPECT_EQ(json::parse(r->body)["error"]["param"], param) << r->body;
  }
  // Refused by the engine (the pool cannot hold the budget): a 400 too.
  auto big = cli.Post("/v1/completions", "{" + base + R"(, "kv_policy": {"type": "window", "budget": 100000})" + "}",
                      "application/json");
  ASSERT_TRUE(big);
  EXPECT_EQ(big->status, 400) << big->body;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (s.async->stats().kv_blocks_used != 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(s.async->stats().kv_blocks_used, 0);
}

TEST_F(ServerTest, HostileRequestsGetOnly4xx) {
  Stack s(*lm_, *tok_);
  s.attach();
  std::vector<std::string> bodies = {
      "", "{", "}", "null", "[]", "123", "\"x\"", "{\"prompt\": }", std::string("\0\1\2\3", 4), "\xff\xfe\xfd",
      R"({"prompt": "a", "max_tokens": 1e400})", R"({"prompt": "a", "max_tokens": -1})",
      R"({"prompt": "a", "max_tokens": 9223372036854775808})", R"({"prompt": "a", "seed": 9.3e18})",
      R"({"prompt": "a", "temperature": "hot"})", R"({"prompt": "a", "n": 0})", R"({"prompt": "a", "n": 1000})",
      R"({"prompt": "a", "stop": [1, 2]})", R"({"prompt": "a", "stop": ["", "b"]})", R"({"prompt": [[]]})",
      R"({"prompt": [1, "a"]})", R"({"prompt": [-1]})", R"({"prompt": [1e10]})", R"({"prompt": {"a": 1}})",
      R"({"prompt": "a", "logprobs": 100})", R"({"prompt": "a", "stream": "yes"})",
      R"({"prompt": "a", "stream": true, "stream_options": 5})", R"({"messages": "hi"})",
      R"({"messages": [{"role": 1, "content": "x"}]})", R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})",
      R"({"prompt": "a", "model": 5})", R"({"prompt": "a", "model": "other"})", R"({"prompt": "a", "top_k": 1.5})",
      R"({"prompt": "a", "stop_token_ids": [99999999999]})", R"({"prompt": "a", "max_tokens": 5000})",
      std::string(70000, 'x'),  // over the 64 KiB limit: 413
  };
  std::string deep;
  for (int i = 0; i < 100000; ++i) deep += "[";
  bodies.push_back(R"({"prompt": )" + deep);
  httplib::Client cli("127.0.0.1", s.port());
  for (const char* path : {"/v1/completions", "/v1/chat/completions"}) {
    for (const std::string& b : bodies) {
      auto r = cli.Post(path, b, "application/json");
      ASSERT_TRUE(r) << path << " " << b.substr(0, 60);
      EXPECT_GE(r->status, 400) << path << " " << b.substr(0, 60);
      EXPECT_LT(r->status, 500) << path << " " << b.substr(0, 60) << " -> " << r->body;
      const json err = json::parse(r->body, nullptr, false);
      ASSERT_TRUE(err.is_object() && err.contains("error")) << r->body;
      EXPECT_TRUE(err["error"]["message"].is_string());
    }
  }
  for (const char* path : {"/", "/v1", "/v1/completion", "/../etc/passwd", "/metrics/x"}) {
    auto r = cli.Get(path);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 404) << path;
  }
  auto del = cli.Delete("/v1/completions");
  ASSERT_TRUE(del);
  EXPECT_EQ(del->status, 405);
  auto h = cli.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  EXPECT_EQ(s.async->in_flight(), 0);
}

TEST_F(ServerTest, ClientVanishingMidStreamFreesItsBlocks) {
  Stack s(*lm_, *tok_);
  s.attach();
  RawConn c(s.port());
  ASSERT_TRUE(c.ok());
  c.send(post_request("/v1/completions",
                      R"({"prompt": "Once upon a time", "max_tokens": 1500, "ignore_eos": true, "stream": true})"));
  const std::string got = c.read_until("data: {", 3);
  ASSERT_NE(got.find("200 OK"), std::string::npos) << got;
  EXPECT_GT(s.async->stats().kv_blocks_used, 0);
  c.close();
  // The next write fails, the request is aborted, the engine frees its
  // blocks at its next step.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while ((s.async->in_flight() > 0 || s.async->stats().kv_blocks_used > 0) && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(s.async->in_flight(), 0);
  EXPECT_EQ(s.async->stats().kv_blocks_used, 0);
  EXPECT_LT(s.engine->stats().generation_tokens_total, 1500);
}

TEST_F(ServerTest, ClientVanishingBeforeAWholeResponseAbortsIt) {
  Stack s(*lm_, *tok_);
  s.attach();
  RawConn c(s.port());
  c.send(post_request("/v1/completions", R"({"prompt": "Once upon a time", "max_tokens": 1900, "ignore_eos": true})"));
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (s.engine->stats().generation_tokens_total == 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  c.close();
  const auto until2 = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (s.async->in_flight() > 0 && std::chrono::steady_clock::now() < until2) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(s.async->in_flight(), 0);
  EXPECT_EQ(s.async->stats().kv_blocks_used, 0);
  EXPECT_LT(s.engine->stats().generation_tokens_total, 1900);
}

TEST_F(ServerTest, QueuedClientVanishingIsNoticedWhileWaiting) {
  Stack s(*lm_, *tok_);
  s.attach();
  // Fill the 8 running slots with long requests, then queue one more and
  // hang up before it ever gets a token.
  std::vector<std::unique_ptr<RawConn>> hold;
  for (int i = 0; i < 8; ++i) {
    hold.push_back(std::make_unique<RawConn>(s.port()));
    hold.back()->send(post_request("/v1/completions", R"({"prompt": "a", "max_tokens": 1800, "ignore_eos": true, "stream": true})"));
    hold.back()->read_until("data: {");
  }
  RawConn q(s.port());
  q.send(post_request("/v1/completions", R"({"prompt": "b", "max_tokens": 5, "stream": true})"));
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (s.async->in_flight() < 9 && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_EQ(s.async->in_flight(), 9);
  q.close();
  const auto until2 = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (s.async->in_flight() > 8 && std::chrono::steady_clock::now() < until2) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(s.async->in_flight(), 8);
  for (auto& h : hold) h->close();
}

TEST_F(ServerTest, ShutdownGivesOpenStreamsAFinalEvent) {
  auto s = std::make_unique<Stack>(*lm_, *tok_);
  s->attach();
  RawConn c(s->port());
  c.send(post_request("/v1/completions", R"({"prompt": "a", "max_tokens": 1800, "ignore_eos": true, "stream": true})"));
  c.read_until("data: {");
  std::thread stopper([&] { s.reset(); });  // begin_shutdown, abort, wait, stop
  const std::string got = c.read_until("data: [DONE]");
  c.close();  // else the server's worker waits out the keep-alive timeout
  stopper.join();
  EXPECT_NE(got.find("\"code\":\"shutting_down\""), std::string::npos) << got.substr(got.size() > 400 ? got.size() - 400 : 0);
  EXPECT_NE(got.find("data: [DONE]\n\n"), std::string::npos);
}

}  // namespace
}  // namespace tessera::server
