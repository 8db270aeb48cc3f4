#include "server/openai_response.h"

#include <fmt/format.h>

#include "tokenizer/tokenizer.h"

namespace tessera::server {
namespace {

using nlohmann::json;

json bytes_of(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

json chat_token(const std::string& piece, float logprob) {
  return {{"token", piece}, {"logprob", logprob}, {"bytes", bytes_of(piece)}};
}

const char* finish_name(engine::FinishReason r) { return engine::finish_reason_name(r); }

}  // namespace

std::string dump_json(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

ResponseBuilder::ResponseBuilder(const ApiRequest& req, const Tokenizer& tok, std::string model, std::string id,
                                 int64_t created)
    : req_(req),
      tok_(tok),
      model_(std::move(model)),
      id_(std::move(id)),
      created_(created),
      chat_(req.endpoint == Endpoint::kChat),
      want_logprobs_(chat_ ? req.chat_logprobs : req.completion_logprobs >= 0) {
  for (const auto& p : req.prompts) prompt_tokens_ += static_cast<int64_t>(p.size()) + req.virtual_tokens;
  choices_.resize(req.prompts.size() * static_cast<size_t>(req.params.n));
  for (size_t i = 0; i < choices_.size(); ++i) {
    Choice& c = choices_[i];
    if (!chat_ && req.echo) c.text = req.prompt_texts[i / static_cast<size_t>(req.params.n)];
    if (want_logprobs_) {
      c.logprobs = chat_ ? json{{"content", json::array()}, {"refusal", nullptr}}
                         : json{{"tokens", json::array()}, {"token_logprobs", json::array()},
                                {"top_logprobs", json::array()}, {"text_offset", json::array()}};
    }
  }
}

int64_t ResponseBuilder::completion_tokens() const {
  int64_t n = 0;
  for (const Choice& c : choices_) n += c.num_tokens;
  return n;
}

bool ResponseBuilder::interrupted() const {
  for (const Choice& c : choices_) {
    if (c.finish_reason != "stop" && c.finish_reason != "length") return true;
  }
  return false;
}

json ResponseBuilder::usage() const {
  const int64_t out = completion_tokens();
  return {{"prompt_tokens", prompt_tokens_}, {"completion_tokens", out}, {"total_tokens", prompt_tokens_ + out}};
}

json ResponseBuilder::chunk_base() const {
  json j = {{"id", id_},
            {"object", chat_ ? "chat.completion.chunk" : "text_completion"},
            {"created", created_},
            {"model", model_},
            {"choices", json::array()}};
  if (req_.include_usage) j["usage"] = nullptr;  // "all other chunks ... with a null value"
  return j;
}

json ResponseBuilder::chunk_choice(size_t index, const std::string& text, json logprobs,
                                   const std::string& finish_reason) const {
  json c = {{"index", index}};
  if (chat_) {
    c["delta"] = text.empty() ? json::object() : json{{"content", text}};
  } else {
    c["text"] = text;
  }
  c["logprobs"] = std::move(logprobs);
  c["finish_reason"] = finish_reason.empty() ? json(nullptr) : json(finish_reason);
  return c;
}

std::vector<json> ResponseBuilder::opening_chunks() const {
  std::vector<json> out;
  if (!chat_ && !req_.echo) return out;
  json j = chunk_base();
  for (size_t i = 0; i < choices_.size(); ++i) {
    if (chat_) {
      j["choices"].push_back({{"index", i},
                              {"delta", {{"role", "assistant"}, {"content", ""}}},
                              {"logprobs", nullptr},
                              {"finish_reason", nullptr}});
    } else {
      j["choices"].push_back(chunk_choice(i, choices_[i].text, nullptr, ""));
    }
  }
  out.push_back(std::move(j));
  return out;
}

json ResponseBuilder::logprobs_of(Choice& c, const engine::RequestOutput& o) const {
  const size_t n = o.new_tokens.size();
  if (chat_) {
    json content = json::array();
    for (size_t t = 0; t < n && t < o.logprobs.size(); ++t) {
      json e = chat_token(tok_.token_to_piece(o.new_tokens[t], /*render_special=*/true), o.logprobs[t]);
      json top = json::array();
      if (t < o.top_logprobs.size()) {
        for (const engine::TokenLogprob& a : o.top_logprobs[t]) {
          top.push_back(chat_token(tok_.token_to_piece(a.token, true), a.logprob));
        }
      }
      e["top_logprobs"] = std::move(top);
      content.push_back(std::move(e));
    }
    return {{"content", std::move(content)}, {"refusal", nullptr}};
  }
  json lp = {{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()},
             {"text_offset", json::array()}};
  for (size_t t = 0; t < n && t < o.logprobs.size(); ++t) {
    const std::string piece = tok_.token_to_piece(o.new_tokens[t], /*render_special=*/true);
    lp["tokens"].push_back(piece);
    lp["token_logprobs"].push_back(o.logprobs[t]);
    // The top alternatives, and always the sampled token ("up to
    // logprobs + 1 elements", as OpenAI documents).
    json top = json::object();
    if (t < o.top_logprobs.size()) {
      for (const engine::TokenLogprob& a : o.top_logprobs[t]) top[tok_.token_to_piece(a.token, true)] = a.logprob;
    }
    if (!top.contains(piece)) top[piece] = o.logprobs[t];
    lp["top_logprobs"].push_back(std::move(top));
    lp["text_offset"].push_back(c.text_offset);
    c.text_offset += static_cast<int64_t>(tok_.token_to_piece(o.new_tokens[t]).size());
  }
  return lp;
}

void ResponseBuilder::append_logprobs(json& into, const json& part) {
  for (auto it = part.begin(); it != part.end(); ++it) {
    if (!it->is_array()) continue;
    for (const json& e : *it) into[it.key()].push_back(e);
  }
}

void ResponseBuilder::add(const ChannelItem& item, std::vector<json>* chunks) {
  const engine::RequestOutput& o = item.out;
  const size_t index = static_cast<size_t>(item.prompt) * static_cast<size_t>(req_.params.n) + static_cast<size_t>(o.index);
  if (index >= choices_.size()) return;
  Choice& c = choices_[index];
  // A completion's text continues its prompt (" was" after "The little
  // dog"). A chat reply starts a turn of its own, where a SentencePiece
  // word-start space is not text: one leading space is dropped there, as
  // llama-server does.
  std::string_view text = o.text;
  if (chat_ && !c.reply_started && !text.empty()) {
    c.reply_started = true;
    if (text.front() == ' ') text.remove_prefix(1);
  }
  c.text += text;
  c.num_tokens = std::max(c.num_tokens, o.num_output_tokens);
  json lp = nullptr;
  if (want_logprobs_ && !o.new_tokens.empty()) {
    lp = logprobs_of(c, o);
    append_logprobs(c.logprobs, lp);
  }
  if (o.finished) c.finish_reason = finish_name(o.finish_reason);
  if (chunks == nullptr) return;
  if (tools_active()) {
    // A reply that may hold calls is parsed whole: it streams as one
    // delta when it ends (content, or the calls with their arguments).
    if (!o.finished) return;
    std::string finish = c.finish_reason;
    json delta = tool_reply(index, c, /*streamed=*/true, finish);
    json j = chunk_base();
    json ch = chunk_choice(index, "", std::move(lp), finish);
    ch["delta"] = std::move(delta);
    j["choices"].push_back(std::move(ch));
    chunks->push_back(std::move(j));
    return;
  }
  if (text.empty() && lp.is_null() && !o.finished) return;
  json j = chunk_base();
  j["choices"].push_back(chunk_choice(index, std::string(text), std::move(lp), c.finish_reason));
  chunks->push_back(std::move(j));
}

json ResponseBuilder::tool_reply(size_t index, const Choice& c, bool streamed, std::string& finish_reason) const {
  const ParsedReply p = parse_tool_calls(c.text, req_.tools->format);
  json msg = streamed ? json::object() : json{{"role", "assistant"}};
  if (p.calls.empty()) {
    msg["content"] = c.text;
    return msg;
  }
  msg["content"] = p.content.empty() ? json(nullptr) : json(p.content);
  json calls = json::array();
  for (size_t k = 0; k < p.calls.size(); ++k) {
    json call = {{"id", fmt::format("call_{}_{}_{}", id_.substr(id_.find('-') + 1), index, k)},
                 {"type", "function"},
                 {"function", {{"name", p.calls[k].name}, {"arguments", p.calls[k].arguments}}}};
    if (streamed) call["index"] = k;
    calls.push_back(std::move(call));
  }
  msg["tool_calls"] = std::move(calls);
  if (finish_reason == "stop") finish_reason = "tool_calls";
  return msg;
}

json ResponseBuilder::usage_chunk() const {
  json j = chunk_base();
  j["usage"] = usage();
  return j;
}

json ResponseBuilder::response() const {
  json choices = json::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    const Choice& c = choices_[i];
    json ch = {{"index", i}};
    std::string finish = c.finish_reason;
    if (tools_active()) {
      ch["message"] = tool_reply(i, c, /*streamed=*/false, finish);
    } else if (chat_) {
      ch["message"] = {{"role", "assistant"}, {"content", c.text}};
    } else {
      ch["text"] = c.text;
    }
    ch["logprobs"] = want_logprobs_ ? c.logprobs : json(nullptr);
    ch["finish_reason"] = finish.empty() ? json(nullptr) : json(finish);
    choices.push_back(std::move(ch));
  }
  return {{"id", id_},
          {"object", chat_ ? "chat.completion" : "text_completion"},
          {"created", created_},
          {"model", model_},
          {"choices", std::move(choices)},
          {"usage", usage()}};
}

}  // namespace tessera::server
