// OpenAI request bodies -> engine requests: /v1/completions and
// /v1/chat/completions. Field names and meanings follow the OpenAI API
// reference (vLLM's extensions where OpenAI has none: top_k, min_p,
// repetition_penalty, ignore_eos, stop_token_ids). A top-level field the
// endpoint does not implement is refused, not ignored, and so is a known one
// with a wrong type or value: ApiError (400) naming the field in `param`.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "core/api_error.h"
#include "server/tool_calls.h"
#include "engine/prompt_cache.h"
#include "engine/sampling_params.h"
#include "adapters/lora.h"
#include "adapters/soft_prompt.h"

namespace tessera {
class Tokenizer;
class AdapterRegistry;  // adapters/registry.h
}

namespace tessera::server {

class ChatTemplate;

using tessera::ApiError;  // core/api_error.h

// Parses a request body. Nesting deeper than `max_depth` is refused while
// parsing, before it can exhaust the stack; malformed JSON, invalid UTF-8
// and numbers out of double range are 400s too.
nlohmann::json parse_body(std::string_view body, int max_depth = 64);

enum class Endpoint { kCompletions, kChat };

// What request parsing needs to know about the served model.
struct ModelContext {
  const Tokenizer* tokenizer = nullptr;
  const ChatTemplate* chat_template = nullptr;  // null: the model has none and none was given
  int64_t max_model_len = 0;
  std::string served_model_name;
  const engine::PromptCache* prompt_cache = nullptr;  // null: started without --prompt-schema
  AdapterRegistry* adapters = nullptr;  // LoRA adapters served by name; null: none
  kv::KvPolicy kv_policy{};  // --kv-policy: requests without a "kv_policy" field run with it
  bool bounded_kv = true;    // false: a bounded "kv_policy" is refused (--tp)
  // --soft-prompt FILE: the engine's soft prompt for requests naming none
  // (EngineConfig::soft_prompt); its virtual tokens take context.
  std::shared_ptr<const SoftPrompt> soft_prompt;
  // Virtual tokens the engine puts ahead of each prompt: this soft prompt's,
  // else the server's (ModelContext::soft_prompt). They take context and
  // count in usage.prompt_tokens.
  int64_t virtual_tokens = 0;
};

struct ApiRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::vector<std::vector<int32_t>> prompts;  // token ids, one per prompt
  std::vector<std::string> prompt_texts;      // their text, for echo
  // With the `prompt_cache` extension (completions only): one layout per
  // prompt, layouts[i].tokens == prompts[i], imported modules' K/V preloaded.
  std::vector<engine::PromptLayout> layouts;
  engine::SamplingParams params;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool echo = false;           // completions: prepend the prompt to the text
  int32_t completion_logprobs = -1;  // completions' `logprobs`: alternatives per token; -1: off
  bool chat_logprobs = false;        // chat's `logprobs: true`
  // The model the request named: the served model, or a LoRA adapter of
  // ctx.adapters (then `lora` holds it for the request's whole life).
  std::string model;
  std::shared_ptr<const LoraAdapter> lora;
  // Its "soft_prompt" (one the server was started with), or none.
  std::shared_ptr<const SoftPrompt> soft_prompt;
  // Virtual tokens the engine puts ahead of each prompt: this soft prompt's,
  // else the server's (ModelContext::soft_prompt). They take context and
  // count in usage.prompt_tokens.
  int64_t virtual_tokens = 0;
  // Chat with tools (unless tool_choice "none"): replies are parsed for
  // calls in this format (server/tool_calls.h).
  std::optional<ToolConfig> tools;
};

// `model`, when present, must be the served name or a loaded adapter's (404
// otherwise).
// `raw`: the body's text, when there is one (a JSON Schema's property order,
// which `body` has lost, is read from it).
ApiRequest parse_completion_request(const nlohmann::json& body, const ModelContext& ctx, std::string_view raw = {});
ApiRequest parse_chat_request(const nlohmann::json& body, const ModelContext& ctx, std::string_view raw = {});

}  // namespace tessera::server
