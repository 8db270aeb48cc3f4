// A conversation with a model through the engine: what `tessera chat` runs
// (the terminal front end is src/cli/cmd_chat.cc), testable without a
// terminal.
//
// Each turn renders the conversation with the model's chat template and
// sends it as one request through the engine's ordinary path (scheduler,
// prefix cache, sampler): no generation loop of its own. The KV cache of
// the turns before is reused by the prefix cache, and so that it matches
// exactly, the session keeps the token ids the model has seen — the last
// prompt and the reply as generated — and tokenizes only what the template
// adds after them (the end of the reply's turn, the new user turn, the
// assistant's opening). When the template rewrites earlier turns (some trim
// or drop them), the whole rendering is tokenized and the prefix cache
// matches what it can.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "template/chat_template.h"

namespace tessera {
class Tokenizer;
}

namespace tessera::chat {

struct Message {
  std::string role;  // system, user, assistant
  std::string content;
};

// One turn's figures (/stats).
struct TurnStats {
  int64_t prompt_tokens = 0;    // the whole conversation, as sent
  int64_t cached_tokens = 0;    // found in the prefix cache
  int64_t new_tokens = 0;       // tokens this turn added to the conversation (its delta)
  int64_t output_tokens = 0;
  double ttft_s = 0.0;
  double seconds = 0.0;
  std::string finish;           // stop, length, abort (interrupted), error
  int64_t prefilled() const { return prompt_tokens - cached_tokens; }
};

class ChatSession {
 public:
  ChatSession(engine::Engine& engine, const Tokenizer& tok, server::ChatTemplate tmpl, engine::SamplingParams params);

  // /system: sets (or, empty, removes) the system message; the
  // conversation is kept.
  void set_system(std::string text);
  // /reset: forgets the conversation (the system message stays).
  void reset();
  // /adapter: the LoRA adapter the next turns run with (nullptr: none).
  void set_adapter(std::shared_ptr<const LoraAdapter> adapter) { adapter_ = std::move(adapter); }

  using TextSink = std::function<void(std::string_view)>;
  using StopCheck = std::function<bool()>;
  // Adds a user message and generates the reply, handing its text to `out`
  // as it comes. `stop` is asked after every engine step: true aborts the
  // reply, which is kept as far as it got (finish "abort").
  TurnStats send(const std::string& user, const TextSink& out, const StopCheck& stop = {});
  // /regen: replaces the last reply with a new one (sampled again).
  TurnStats regenerate(const TextSink& out, const StopCheck& stop = {});

  // /save and /load: the conversation as JSON ({"messages": [...]}).
  nlohmann::json to_json() const;
  void load_json(const nlohmann::json& j);

  const std::vector<Message>& messages() const { return messages_; }
  const TurnStats& last() const { return last_; }
  engine::SamplingParams& params() { return params_; }

 private:
  // The conversation rendered by the template, ending with the assistant's opening.
  std::string render() const;
  // Its tokens: what the model has seen, then the tokens of what the
  // template added (new_tokens of them).
  std::vector<int32_t> prompt_tokens(int64_t& new_tokens) const;
  TurnStats generate(const TextSink& out, const StopCheck& stop);
  nlohmann::json messages_json() const;

  engine::Engine& engine_;
  const Tokenizer& tok_;
  server::ChatTemplate template_;
  engine::SamplingParams params_;
  std::shared_ptr<const LoraAdapter> adapter_;
  std::string system_;
  std::vector<Message> messages_;  // without the system message
  // What the model has seen: the last prompt's text and tokens, then the
  // reply's text and tokens as generated (cleared when the history changes
  // in any other way).
  std::string seen_text_;
  std::vector<int32_t> seen_tokens_;
  std::string prompt_text_;  // the last turn's prompt (/regen sends it again)
  std::vector<int32_t> prompt_tokens_;
  TurnStats last_;
};

}  // namespace tessera::chat
