#include "chat/chat_session.h"

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace tessera::chat {
namespace {

std::string token_or_empty(const Tokenizer& tok, int32_t id) { return id >= 0 ? tok.token_text(id) : std::string(); }

}  // namespace

ChatSession::ChatSession(engine::Engine& engine, const Tokenizer& tok, server::ChatTemplate tmpl,
                         engine::SamplingParams params)
    : engine_(engine), tok_(tok), template_(std::move(tmpl)), params_(std::move(params)) {}

void ChatSession::history_changed() {
  seen_text_.clear();
  seen_tokens_.clear();
  prompt_text_.clear();
  prompt_tokens_.clear();
}

std::string ChatSession::render() const {
  return template_.apply(messages_json(), /*add_generation_prompt=*/true, token_or_empty(tok_, tok_.bos_id()),
                         token_or_empty(tok_, tok_.eos_id()));
}

std::vector<int32_t> ChatSession::prompt_tokens(int64_t& new_tokens) const {
  const std::string text = render();
  if (!seen_tokens_.empty() && text.size() >= seen_text_.size() && text.starts_with(seen_text_)) {
    // Only what the template added after what the model has seen.
    std::vector<int32_t> tokens = seen_tokens_;
    const std::vector<int32_t> delta =
        tok_.encode(std::string_view(text).substr(seen_text_.size()), /*add_special=*/false, /*parse_special=*/true);
    tokens.insert(tokens.end(), delta.begin(), delta.end());
    new_tokens = static_cast<int64_t>(delta.size());
    return tokens;
  }
  std::vector<int32_t> tokens = server::tokenize_rendered(text, tok_);
  new_tokens = static_cast<int64_t>(tokens.size());
  return tokens;
}

TurnStats ChatSession::send(const std::string& user, const TextSink& out, const StopCheck& stop) {
  messages_.push_back({"user", user});
  return generate(out, stop);
}

TurnStats ChatSession::regenerate(const TextSink& out, const StopCheck& stop) {
  drop_last_reply();
  // Back to what the model saw before the reply: the last prompt, exactly.
  seen_text_ = prompt_text_;
  seen_tokens_ = prompt_tokens_;
  return generate(out, stop);
}

TurnStats ChatSession::generate(const TextSink& out, const StopCheck& stop) {
  TurnStats st;
  std::vector<int32_t> prompt = prompt_tokens(st.new_tokens);
  engine::SamplingParams p = params_;
  const int64_t room = engine_.config().max_model_len - static_cast<int64_t>(prompt.size());
  TESSERA_CHECK(room > 0, kOutOfRange, "the conversation ({} tokens) fills the context of {}: /reset to start again",
                prompt.size(), engine_.config().max_model_len);
  if (p.max_tokens <= 0 || p.max_tokens > room) p.max_tokens = static_cast<int32_t>(room);
  std::string reply;
  std::vector<int32_t> reply_tokens;
  const auto t0 = engine::Clock::now();
  const engine::RequestId id = engine_.add_request(prompt, p, {}, engine::RequestAdapters(adapter_));
  bool aborted = false;
  while (engine_.has_unfinished()) {
    for (const engine::RequestOutput& o : engine_.step()) {
      if (o.id != id) continue;
      reply += o.text;
      reply_tokens.insert(reply_tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
      if (!o.text.empty()) out(o.text);
      st.prompt_tokens = o.num_prompt_tokens;
      st.cached_tokens = o.num_cached_tokens;
      st.output_tokens = o.num_output_tokens;
      st.ttft_s = o.time_to_first_token;
      if (o.finished) {
        st.finish = engine::finish_reason_name(o.finish_reason);
        if (o.finish_reason == engine::FinishReason::kError) {
          fail(ErrorCode::kInternal, "the reply failed: {}", o.error);
        }
      }
    }
    if (!aborted && stop && stop()) {
      engine_.abort(id);
      aborted = true;
    }
  }
  st.seconds = std::chrono::duration<double>(engine::Clock::now() - t0).count();
  // What the model has seen: the prompt as the template rendered it (the
  // rendering, not a decoding: they may differ in spaces), then the reply.
  prompt_text_ = render();
  prompt_tokens_ = std::move(prompt);
  messages_.push_back({"assistant", reply});
  seen_text_ = prompt_text_ + reply;
  seen_tokens_ = prompt_tokens_;
  seen_tokens_.insert(seen_tokens_.end(), reply_tokens.begin(), reply_tokens.end());
  last_ = st;
  return st;
}

}  // namespace tessera::chat
