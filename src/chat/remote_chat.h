// `tessera chat --url`: the same conversation against a running
// OpenAI-compatible server (`tessera serve`, vLLM, llama-server), over
// /v1/chat/completions with streaming. The server renders the template and
// its prefix cache reuses the earlier turns. Ctrl-C closes the connection,
// which aborts the reply on a server that notices disconnects (Tessera's
// does). /adapter NAME sends NAME as the request's model (how servers
// expose LoRA adapters).
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "chat/conversation.h"

namespace tessera::chat {

class RemoteChat final : public Conversation {
 public:
  // url: http://HOST:PORT (no path); sampling: the request's sampling
  // fields (temperature, top_p, max_tokens, ...).
  RemoteChat(std::string url, std::string api_key, nlohmann::json sampling);

  TurnStats send(const std::string& user, const TextSink& out, const StopCheck& stop = {}) override;
  TurnStats regenerate(const TextSink& out, const StopCheck& stop = {}) override;

  // The model (or adapter) named in requests; empty: the server's first.
  void set_model(std::string model) { model_ = std::move(model); }
  // The server's models (GET /v1/models): checks the URL and the key.
  nlohmann::json models() const;

 private:
  TurnStats generate(const TextSink& out, const StopCheck& stop);

  std::string url_, api_key_, model_;
  nlohmann::json sampling_;
};

}  // namespace tessera::chat
