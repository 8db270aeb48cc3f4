// Chat templates: turns an OpenAI-style `messages` array into the prompt text
// a model was trained on, with the model's own Jinja template (GGUF
// tokenizer.chat_template) or a built-in one chosen by --chat-template.
//
// Rendering follows Hugging Face's apply_chat_template: the variables
// messages, add_generation_prompt, bos_token, eos_token, tools and documents
// (none unless given), plus any extra variables (e.g. enable_thinking).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "template/jinja.h"
#include "tokenizer/tokenizer.h"

namespace tessera::server {

class ChatTemplate {
 public:
  // Parses Jinja source; throws Error(kInvalidArgument) "chat template syntax
  // error at LINE:COL: ..." on syntax errors.
  static ChatTemplate from_source(std::string source);

  // Built-in template source for llama-2, llama-3, chatml, mistral, phi-3,
  // gemma; nullopt for any other name.
  static std::optional<std::string> builtin_source(std::string_view name);

  // `option` (from --chat-template) is a built-in name or a file path (a
  // Jinja file, or a tokenizer_config.json with a chat_template field); empty
  // means the GGUF's tokenizer.chat_template (nullopt when the model has
  // none). Throws Error(kInvalidArgument) when there is no template.
  static ChatTemplate resolve(const std::string& option, const std::optional<std::string>& gguf_template);

  // Renders `messages` (an array of {role, content, ...}; a content array of
  // {type: "text", text} parts is joined with "\n"). Errors, including the
  // template's own raise_exception("..."), throw Error(kInvalidArgument)
  // with the message.
  std::string apply(const nlohmann::json& messages, bool add_generation_prompt, const std::string& bos_token,
                    const std::string& eos_token, const nlohmann::json& extra = nlohmann::json::object()) const;
  // The same for ordered_json, whose objects keep the request's key order
  // (what `tools | tojson` then prints, as Hugging Face would); nlohmann::json
  // sorts keys.
  std::string apply(const nlohmann::ordered_json& messages, bool add_generation_prompt, const std::string& bos_token,
                    const std::string& eos_token, const nlohmann::ordered_json& extra) const;

  const std::string& source() const { return source_; }

  // Bounds on one render (output size, steps, call depth); defaults suit a
  // server.
  void set_limits(const jinja::RenderLimits& limits) { limits_ = limits; }

 private:
  template <class Json>
  std::string apply_impl(const Json& messages, bool add_generation_prompt, const std::string& bos_token,
                         const std::string& eos_token, const Json& extra) const;

  std::string source_;
  jinja::Template template_;
  jinja::RenderLimits limits_;
};

// A rendered conversation, tokenized. Templates usually write the BOS token
// themselves ("<s>[INST]..."): then the tokenizer must not add a second one
// (llama.cpp and vLLM avoid the double BOS the same way). Special tokens in
// the text are parsed.
std::vector<int32_t> tokenize_rendered(const std::string& text, const Tokenizer& tok);

}  // namespace tessera::server
