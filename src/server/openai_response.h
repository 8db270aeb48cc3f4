// Engine outputs -> OpenAI response bodies: the whole response
// ("text_completion" / "chat.completion") or, when streaming, one
// "text_completion" / "chat.completion.chunk" object per step with the
// text delta of each choice, then a usage-only chunk when asked.
//
// Choice indices: prompt p, sample i of n -> choices[p * n + i] (as vLLM
// numbers them for several prompts).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "server/async_engine.h"
#include "server/openai_request.h"

namespace tessera {
class Tokenizer;
}

namespace tessera::server {

class ResponseBuilder {
 public:
  ResponseBuilder(const ApiRequest& req, const Tokenizer& tok, std::string model, std::string id, int64_t created);

  // Streaming: chunks to send before any output (chat: each choice's role;
  // completions with echo: each choice's prompt).
  std::vector<nlohmann::json> opening_chunks() const;
  // Records one output; when `chunks` is given, appends the chunk it makes
  // (none for a step that produced no visible text, logprobs or finish).
  void add(const ChannelItem& item, std::vector<nlohmann::json>* chunks);

  nlohmann::json usage() const;
  nlohmann::json usage_chunk() const;  // "choices": [] and the usage
  nlohmann::json response() const;     // the non-streamed body

  const std::string& id() const { return id_; }
  int64_t prompt_tokens() const { return prompt_tokens_; }
  int64_t completion_tokens() const;
  // Some choice ended for a reason OpenAI has no name for (abort, error).
  bool interrupted() const;

 private:
  struct Choice {
    std::string text;
    std::string finish_reason;  // empty while running
    int64_t num_tokens = 0;
    int64_t text_offset = 0;    // completions: running offset of the next token
    bool reply_started = false; // chat: the reply's first text has been seen
    nlohmann::json logprobs;    // accumulated (non-streamed) logprobs object
  };
  nlohmann::json chunk_base() const;
  // Chat with tools: the reply's calls as OpenAI `tool_calls` (index
  // numbered when streamed), its content, its finish_reason.
  bool tools_active() const { return chat_ && req_.tools.has_value(); }
  nlohmann::json tool_reply(size_t index, const Choice& c, bool streamed, std::string& finish_reason) const;
  nlohmann::json chunk_choice(size_t index, const std::string& text, nlohmann::json logprobs,
                              const std::string& finish_reason) const;
  // The logprobs of one output's tokens, in this endpoint's shape.
  nlohmann::json logprobs_of(Choice& c, const engine::RequestOutput& o) const;
  static void append_logprobs(nlohmann::json& into, const nlohmann::json& part);

  const ApiRequest& req_;
  const Tokenizer& tok_;
  std::string model_;
  std::string id_;
  int64_t created_;
  bool chat_;
  bool want_logprobs_;
  int64_t prompt_tokens_ = 0;
  std::vector<Choice> choices_;
};

// Serialises a response or chunk. Token strings may hold partial UTF-8
// (byte-fallback tokens): invalid bytes become U+FFFD instead of throwing.
std::string dump_json(const nlohmann::json& j);

}  // namespace tessera::server
