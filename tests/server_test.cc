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
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "model/model.h"
#include "model/tokenizer.h"
#include "server/async_engine.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/openai_request.h"
#include "server/sampling_json.h"
#include "util/test_util.h"

namespace tessera::server {
namespace {

using nlohmann::json;

int status_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ApiError& e) {
    return e.status();
  }
  return 0;
}

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

struct Stack {
  explicit Stack(const LoadedModel& lm, const Tokenizer& tok) {
    engine::EngineConfig ec;
    ec.threads = 1;
    ec.max_num_seqs = 8;
    ec.num_kv_blocks = 512;
    engine = std::make_unique<engine::Engine>(*lm.model, &tok, ec);
    async = std::make_unique<AsyncEngine>(*engine, metrics, 8 + 8);
    ServerOptions opt;
    opt.port = 0;
    opt.served_model_name = "stories";
    opt.threads = 24;
    opt.max_body_bytes = 64 << 10;
    opt.poll_interval = std::chrono::milliseconds(20);
    http = std::make_unique<HttpServer>(opt, metrics);
    http->bind();
    http->start();
    served.engine = async.get();
    served.ctx.tokenizer = &tok;
    served.ctx.max_model_len = engine->config().max_model_len;
    served.ctx.served_model_name = "stories";
  }
  ~Stack() {
    http->begin_shutdown();
    async->shutdown();
    http->wait_idle(std::chrono::seconds(10));
    http->stop();
  }
  void attach() { http->attach(&served); }
  int port() const { return http->bound_port(); }

  Metrics metrics;
  std::unique_ptr<engine::Engine> engine;
  std::unique_ptr<AsyncEngine> async;
  std::unique_ptr<HttpServer> http;
  ServedModel served;
};

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
  // Reference: a separate engine, no server, same prompt tokens.
  engine::EngineConfig ec;
  ec.threads = 1;
  ec.num_kv_blocks = 64;
  engine::Engine ref(*lm_->model, tok_, ec);
  engine::SamplingParams p;
  p.temperature = 0;
  p.max_tokens = 40;
  std::string want;
  ref.add_request(tok_->encode("Once upon a time", true, true), p,
                  [&](const engine::RequestOutput& o) { want += o.text; });
  while (ref.has_unfinished()) ref.step();
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
