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

#include "chat/conversation.h"
#include "engine/engine.h"
#include "template/chat_template.h"

namespace tessera {
class Tokenizer;
}

namespace tessera::chat {

class ChatSession final : public Conversation {
 public:
  ChatSession(engine::Engine& engine, const Tokenizer& tok, server::ChatTemplate tmpl, engine::SamplingParams params);

  // /adapter: the LoRA adapter the next turns run with (nullptr: none).
  void set_adapter(std::shared_ptr<const LoraAdapter> adapter) { adapter_ = std::move(adapter); }

  TurnStats send(const std::string& user, const TextSink& out, const StopCheck& stop = {}) override;
  // /regen: the same prompt sent again (the tokens the model saw before the reply).
  TurnStats regenerate(const TextSink& out, const StopCheck& stop = {}) override;

  engine::SamplingParams& params() { return params_; }

 private:
  // The conversation rendered by the template, ending with the assistant's opening.
  std::string render() const;
  // Its tokens: what the model has seen, then the tokens of what the
  // template added (new_tokens of them).
  std::vector<int32_t> prompt_tokens(int64_t& new_tokens) const;
  TurnStats generate(const TextSink& out, const StopCheck& stop);
  void history_changed() override;

  engine::Engine& engine_;
  const Tokenizer& tok_;
  server::ChatTemplate template_;
  engine::SamplingParams params_;
  std::shared_ptr<const LoraAdapter> adapter_;
  // What the model has seen: the last prompt's text and tokens, then the
  // reply's text and tokens as generated (cleared when the history changes
  // in any other way).
  std::string seen_text_;
  std::vector<int32_t> seen_tokens_;
  std::string prompt_text_;  // the last turn's prompt (/regen sends it again)
  std::vector<int32_t> prompt_tokens_;
};

}  // namespace tessera::chat
