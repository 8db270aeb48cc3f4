// tessera chat's session (src/chat/chat_session.h) on stories260K: turns
// reuse the KV cache of the turns before (the prompt is the tokens the model
// saw plus what the template adds), /regen sends the same prompt again, a
// stop aborts a reply and keeps what it said, /load refuses what it cannot
// read. The terminal itself: tests/chat/drive_pty.py.
#include <gtest/gtest.h>

#include "chat/chat_session.h"
#include "tokenizer/tokenizer.h"
#include "util/test_util.h"

namespace tessera::chat {
namespace {

struct Fixture {
  engine::Engine engine;
  ChatSession session;
  static engine::EngineConfig config() {
    engine::EngineConfig c;
    c.max_model_len = 2048;
    c.threads = 1;
    c.max_num_seqs = 1;
    return c;
  }
  static engine::SamplingParams params() {
    engine::SamplingParams p;
    p.temperature = 0.0f;
    p.max_tokens = 40;
    p.ignore_eos = true;
    return p;
  }
  Fixture()
      : engine(*testing::stories260k().lm.model, testing::stories260k().tok.get(), config()),
        session(engine, *testing::stories260k().tok, server::ChatTemplate::resolve("chatml", std::nullopt), params()) {}
};

TEST(ChatSession, LaterTurnsSendWhatTheModelSawPlusTheNewTurn) {
  Fixture f;
  std::string streamed;
  const TurnStats t1 = f.session.send("Hello there.", [&](std::string_view s) { streamed += s; });
  EXPECT_EQ(t1.output_tokens, 40);
  EXPECT_EQ(t1.new_tokens, t1.prompt_tokens);
  EXPECT_EQ(f.session.messages().back().content, streamed);
  const TurnStats t2 = f.session.send("Tell me more.", [](std::string_view) {});
  // The prompt is the first prompt, the reply's tokens as generated, and
  // the tokens of what the template added (end of turn, new user turn,
  // assistant opening).
  EXPECT_EQ(t2.prompt_tokens, t1.prompt_tokens + t1.output_tokens + t2.new_tokens);
  // ... which are the tokens of the text the template adds after the reply.
  const Tokenizer& tok = *testing::stories260k().tok;
  const auto tmpl = server::ChatTemplate::resolve("chatml", std::nullopt);
  const std::string bos = tok.token_text(tok.bos_id()), eos = tok.token_text(tok.eos_id());
  nlohmann::json m = {{{"role", "user"}, {"content", "Hello there."}}};
  const std::string before = tmpl.apply(m, true, bos, eos) + streamed;
  m.push_back({{"role", "assistant"}, {"content", streamed}});
  m.push_back({{"role", "user"}, {"content", "Tell me more."}});
  const std::string now = tmpl.apply(m, true, bos, eos);
  ASSERT_TRUE(now.starts_with(before));
  EXPECT_EQ(t2.new_tokens, static_cast<int64_t>(tok.encode(now.substr(before.size()), false, true).size()));
  // Prefix caching reuses everything before, but the last partial block.
  EXPECT_GE(t2.cached_tokens, t1.prompt_tokens + t1.output_tokens - 15);
  EXPECT_LE(t2.prefilled(), t2.new_tokens + 15);
  EXPECT_EQ(f.session.messages().size(), 4u);
}

TEST(ChatSession, RegenerateSendsTheSamePromptAgain) {
  Fixture f;
  f.session.send("Hello there.", [](std::string_view) {});
  const TurnStats t2 = f.session.send("Tell me more.", [](std::string_view) {});
  const std::string reply = f.session.messages().back().content;
  const TurnStats r = f.session.regenerate([](std::string_view) {});
  EXPECT_EQ(r.prompt_tokens, t2.prompt_tokens);
  EXPECT_EQ(r.new_tokens, 0);
  EXPECT_GE(r.cached_tokens, r.prompt_tokens - 16);
  EXPECT_EQ(f.session.messages().back().content, reply);  // greedy: the same reply
  EXPECT_EQ(f.session.messages().size(), 4u);
}

TEST(ChatSession, AStopAbortsTheReplyAndKeepsWhatItSaid) {
  Fixture f;
  int chunks = 0;
  const TurnStats t = f.session.send("Hello there.", [&](std::string_view) { ++chunks; }, [&] { return chunks >= 3; });
  EXPECT_EQ(t.finish, "abort");
  EXPECT_LT(t.output_tokens, 40);
  EXPECT_FALSE(f.session.messages().back().content.empty());
  const TurnStats t2 = f.session.send("Go on.", [](std::string_view) {});
  EXPECT_EQ(t2.finish, "length");
  EXPECT_EQ(t2.prompt_tokens, t.prompt_tokens + t.output_tokens + t2.new_tokens);
}

TEST(ChatSession, SaveLoadAndBadInput) {
  Fixture f;
  f.session.set_system("You tell stories.");
  f.session.send("Hello there.", [](std::string_view) {});
  const nlohmann::json saved = f.session.to_json();
  ASSERT_EQ(saved["messages"].size(), 3u);
  EXPECT_EQ(saved["messages"][0]["role"], "system");
  f.session.reset();
  EXPECT_TRUE(f.session.messages().empty());
  f.session.load_json(saved);
  EXPECT_EQ(f.session.to_json(), saved);
  EXPECT_THROW(f.session.load_json(nlohmann::json::array()), Error);
  EXPECT_THROW(f.session.load_json({{"messages", {{{"role", "robot"}, {"content", "x"}}}}}), Error);
  EXPECT_EQ(f.session.to_json(), saved);  // a refused load changes nothing
  f.session.reset();
  EXPECT_THROW(f.session.regenerate([](std::string_view) {}), Error);
}

}  // namespace
}  // namespace tessera::chat
