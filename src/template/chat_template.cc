#include "template/chat_template.h"

#include <array>
#include <fstream>
#include <sstream>
#include <utility>

#include "core/error.h"

namespace tessera::server {

namespace {

constexpr const char* kBuiltinNames = "llama-2, llama-3, chatml, mistral, phi-3, gemma";

// Written from each family's documented prompt format. `content` may be
// none (an assistant turn that only calls tools): it renders as "".

// <s>[INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST] {answer} </s><s>[INST] {user} [/INST]
constexpr const char* kLlama2 = R"JINJA(
{%- if messages and messages[0].role == 'system' -%}
  {%- set system = (messages[0].content or '') | trim -%}
  {%- set turns = messages[1:] -%}
{%- else -%}
  {%- set system = none -%}
  {%- set turns = messages -%}
{%- endif -%}
{%- for message in turns -%}
  {%- if message.role != ('user' if loop.index0 is even else 'assistant') -%}
    {{- raise_exception('llama-2 chat template: after an optional system message, roles must alternate user/assistant/user/...') -}}
  {%- endif -%}
  {%- set text = (message.content or '') | trim -%}
  {%- if message.role == 'user' -%}
    {%- if loop.first and system is not none -%}
      {%- set text = '<<SYS>>\n' ~ system ~ '\n<</SYS>>\n\n' ~ text -%}
    {%- endif -%}
    {{- bos_token ~ '[INST] ' ~ text ~ ' [/INST]' -}}
  {%- else -%}
    {{- ' ' ~ text ~ ' ' ~ eos_token -}}
  {%- endif -%}
{%- endfor -%}
)JINJA";

// <|begin_of_text|><|start_header_id|>{role}<|end_header_id|>\n\n{content}<|eot_id|>...
constexpr const char* kLlama3 = R"JINJA(
{{- bos_token -}}
{%- for message in messages -%}
  {{- '<|start_header_id|>' ~ message.role ~ '<|end_header_id|>\n\n' ~ ((message.content or '') | trim) ~ '<|eot_id|>' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
  {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
{%- endif -%}
)JINJA";

// <|im_start|>{role}\n{content}<|im_end|>\n ... <|im_start|>assistant\n
constexpr const char* kChatml = R"JINJA(
{%- for message in messages -%}
  {{- '<|im_start|>' ~ message.role ~ '\n' ~ (message.content or '') ~ '<|im_end|>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
  {{- '<|im_start|>assistant\n' -}}
{%- endif -%}
)JINJA";

// <s>[INST] {system}\n\n{user} [/INST] {answer}</s>[INST] {user} [/INST]
constexpr const char* kMistral = R"JINJA(
{%- if messages and messages[0].role == 'system' -%}
  {%- set system = messages[0].content or '' -%}
  {%- set turns = messages[1:] -%}
{%- else -%}
  {%- set system = none -%}
  {%- set turns = messages -%}
{%- endif -%}
{{- bos_token -}}
{%- for message in turns -%}
  {%- if message.role != ('user' if loop.index0 is even else 'assistant') -%}
    {{- raise_exception('mistral chat template: after an optional system message, roles must alternate user/assistant/user/...') -}}
  {%- endif -%}
  {%- if message.role == 'user' -%}
    {%- set text = message.content or '' -%}
    {%- if loop.first and system is not none -%}
      {%- set text = system ~ '\n\n' ~ text -%}
    {%- endif -%}
    {{- '[INST] ' ~ text ~ ' [/INST]' -}}
  {%- else -%}
    {{- ' ' ~ (message.content or '') ~ eos_token -}}
  {%- endif -%}
{%- endfor -%}
)JINJA";

// <|system|>\n{system}<|end|>\n<|user|>\n{user}<|end|>\n<|assistant|>\n
constexpr const char* kPhi3 = R"JINJA(
{%- for message in messages -%}
  {%- if message.role not in ['system', 'user', 'assistant'] -%}
    {{- raise_exception('phi-3 chat template: unsupported role ' ~ message.role) -}}
  {%- endif -%}
  {{- '<|' ~ message.role ~ '|>\n' ~ (message.content or '') ~ '<|end|>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
  {{- '<|assistant|>\n' -}}
{%- endif -%}
)JINJA";

// <bos><start_of_turn>user\n{system}\n\n{user}<end_of_turn>\n<start_of_turn>model\n{answer}<end_of_turn>\n
constexpr const char* kGemma = R"JINJA(
{{- bos_token -}}
{%- if messages and messages[0].role == 'system' -%}
  {%- set system = (messages[0].content or '') ~ '\n\n' -%}
  {%- set turns = messages[1:] -%}
{%- else -%}
  {%- set system = '' -%}
  {%- set turns = messages -%}
{%- endif -%}
{%- for message in turns -%}
  {%- if message.role != ('user' if loop.index0 is even else 'assistant') -%}
    {{- raise_exception('gemma chat template: roles must alternate user/assistant/user/... (a system message may come first)') -}}
  {%- endif -%}
  {{- '<start_of_turn>' ~ ('model' if message.role == 'assistant' else 'user') ~ '\n' -}}
  {{- (system if loop.first else '') ~ ((message.content or '') | trim) ~ '<end_of_turn>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
  {{- '<start_of_turn>model\n' -}}
{%- endif -%}
)JINJA";

constexpr std::array<std::pair<std::string_view, const char*>, 6> kBuiltins = {{
    {"llama-2", kLlama2},
    {"llama-3", kLlama3},
    {"chatml", kChatml},
    {"mistral", kMistral},
    {"phi-3", kPhi3},
    {"gemma", kGemma},
}};

std::optional<std::string> read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return std::nullopt;
  return ss.str();
}

// A tokenizer_config.json holds the template in "chat_template": a string,
// or a list of {name, template} where "default" is the chat template.
std::optional<std::string> template_from_config(const std::string& text) {
  const nlohmann::json config = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!config.is_object() || !config.contains("chat_template")) return std::nullopt;
  const auto& t = config["chat_template"];
  if (t.is_string()) return t.get<std::string>();
  if (t.is_array()) {
    for (const auto& entry : t) {
      if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template") &&
          entry["template"].is_string()) {
        return entry["template"].get<std::string>();
      }
    }
  }
  return std::nullopt;
}

// OpenAI content parts: [{type: "text", text}, ...] becomes one string.
template <class Json>
Json flatten_content(const Json& content, size_t index) {
  if (!content.is_array()) return content;
  std::string text;
  for (const auto& part : content) {
    TESSERA_CHECK(part.is_object() && part.contains("type") && part["type"].is_string(), kInvalidArgument,
                  "messages[{}].content: each part must be an object with a \"type\"", index);
    const std::string type = part["type"].template get<std::string>();
    TESSERA_CHECK(type == "text", kInvalidArgument,
                  "messages[{}].content: part type '{}' is not supported (text only)", index, type);
    TESSERA_CHECK(part.contains("text") && part["text"].is_string(), kInvalidArgument,
                  "messages[{}].content: a text part needs a string \"text\"", index);
    if (!text.empty()) text += '\n';
    text += part["text"].template get<std::string>();
  }
  return text;
}

}  // namespace

ChatTemplate ChatTemplate::from_source(std::string source) {
  ChatTemplate t;
  try {
    t.template_ = jinja::Template::parse(source);
  } catch (const jinja::TemplateError& e) {
    fail(ErrorCode::kInvalidArgument, "chat template {}", e.what());
  }
  t.source_ = std::move(source);
  return t;
}

std::optional<std::string> ChatTemplate::builtin_source(std::string_view name) {
  for (const auto& [n, src] : kBuiltins) {
    if (n == name) return std::string(src);
  }
  return std::nullopt;
}

ChatTemplate ChatTemplate::resolve(const std::string& option, const std::optional<std::string>& gguf_template) {
  if (!option.empty()) {
    if (auto src = builtin_source(option)) return from_source(std::move(*src));
    std::optional<std::string> text = read_text_file(option);
    TESSERA_CHECK(text, kInvalidArgument, "--chat-template '{}' is neither a built-in template ({}) nor a readable file",
                  option, kBuiltinNames);
    if (option.size() >= 5 && option.compare(option.size() - 5, 5, ".json") == 0) {
      std::optional<std::string> from_config = template_from_config(*text);
      TESSERA_CHECK(from_config, kInvalidArgument, "--chat-template '{}': no \"chat_template\" string in this JSON file",
                    option);
      return from_source(std::move(*from_config));
    }
    return from_source(std::move(*text));
  }
  TESSERA_CHECK(gguf_template && !gguf_template->empty(), kInvalidArgument,
                "this model has no chat template; start the server with --chat-template NAME|FILE ({})", kBuiltinNames);
  return from_source(*gguf_template);
}

std::string ChatTemplate::apply(const nlohmann::json& messages, bool add_generation_prompt, const std::string& bos_token,
                                const std::string& eos_token, const nlohmann::json& extra) const {
  return apply_impl(messages, add_generation_prompt, bos_token, eos_token, extra);
}

std::string ChatTemplate::apply(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                const std::string& bos_token, const std::string& eos_token,
                                const nlohmann::ordered_json& extra) const {
  return apply_impl(messages, add_generation_prompt, bos_token, eos_token, extra);
}

template <class Json>
std::string ChatTemplate::apply_impl(const Json& messages, bool add_generation_prompt, const std::string& bos_token,
                                     const std::string& eos_token, const Json& extra) const {
  TESSERA_CHECK(messages.is_array(), kInvalidArgument, "messages must be an array");
  TESSERA_CHECK(extra.is_object(), kInvalidArgument, "chat template variables must be a JSON object");
  Json prepared = Json::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    TESSERA_CHECK(m.is_object(), kInvalidArgument, "messages[{}] must be an object", i);
    Json copy = m;
    if (copy.contains("content")) copy["content"] = flatten_content(copy["content"], i);
    prepared.push_back(std::move(copy));
  }

  std::vector<std::pair<std::string, jinja::Value>> vars;
  // Room for the fixed six and the extras up front: no reallocation while
  // filling (and none of GCC 12's false -Warray-bounds on the realloc path).
  vars.reserve(6 + extra.size());
  vars.emplace_back("messages", jinja::from_json(prepared));
  vars.emplace_back("add_generation_prompt", jinja::Value::boolean(add_generation_prompt));
  vars.emplace_back("bos_token", jinja::Value::string(bos_token));
  vars.emplace_back("eos_token", jinja::Value::string(eos_token));
  // HF passes tools and documents always, as None when absent.
  vars.emplace_back("tools", jinja::Value::none());
  vars.emplace_back("documents", jinja::Value::none());
  for (const auto& [key, value] : extra.items()) {
    TESSERA_CHECK(key != "messages" && key != "add_generation_prompt", kInvalidArgument,
                  "chat template variable '{}' is set by the server", key);
    jinja::Value v = jinja::from_json(value);
    bool replaced = false;
    for (auto& [name, existing] : vars) {
      if (name == key) {
        existing = v;
        replaced = true;
      }
    }
    if (!replaced) vars.emplace_back(key, std::move(v));
  }
  try {
    return template_.render(std::move(vars), limits_);
  } catch (const jinja::TemplateError& e) {
    if (e.kind() == jinja::TemplateError::Kind::kRaised) throw Error(ErrorCode::kInvalidArgument, e.message());
    fail(ErrorCode::kInvalidArgument, "chat template {}", e.what());
  }
}

std::vector<int32_t> tokenize_rendered(const std::string& text, const Tokenizer& tok) {
  const int32_t bos = tok.bos_id();
  const bool has_bos = bos >= 0 && !tok.token_text(bos).empty() && text.starts_with(tok.token_text(bos));
  return tok.encode(text, /*add_special=*/!has_bos, /*parse_special=*/true);
}

}  // namespace tessera::server
