#include "server/openai_request.h"

#include <fmt/format.h>

#include <limits>

#include "core/error.h"
#include "grammar/gbnf.h"
#include "grammar/json_schema.h"
#include "tokenizer/tokenizer.h"
#include "adapters/registry.h"
#include "template/chat_template.h"
#include "server/sampling_json.h"
#include "server/tool_calls.h"

namespace tessera::server {
namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& param, const std::string& msg) { throw ApiError(400, msg, param); }

const json* field(const json& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

bool boolean(const json& body, const char* name, bool fallback) {
  const json* v = field(body, name);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) bad(name, fmt::format("'{}' must be a boolean", name));
  return v->get<bool>();
}

int64_t bounded_int(const json& v, const char* name, int64_t lo, int64_t hi) {
  try {
    return integer_value(v, name, lo, hi);
  } catch (const FieldError& e) {
    bad(e.field(), e.what());
  }
}

// The served model or one of its LoRA adapters, by name.
void check_model(const json& body, const ModelContext& ctx, ApiRequest& r) {
  r.model = ctx.served_model_name;
  const json* m = field(body, "model");
  if (m == nullptr) return;  // optional here (OpenAI requires it; vLLM does not)
  if (!m->is_string()) bad("model", "'model' must be a string");
  const std::string& name = m->get_ref<const std::string&>();
  if (name == ctx.served_model_name) return;
  if (ctx.adapters != nullptr) {
    if (auto a = ctx.adapters->find(name)) {
      r.model = name;
      r.lora = std::move(a);
      return;
    }
  }
  throw ApiError(404, fmt::format("The model `{}` does not exist. This server serves `{}`{}.", name,
                                  ctx.served_model_name,
                                  ctx.adapters != nullptr && !ctx.adapters->list().empty() ? " and its LoRA adapters" : ""),
                 "model", "model_not_found");
}

// "soft_prompt": the name of a soft prompt the server was started with.
void check_soft_prompt(const json& body, const ModelContext& ctx, ApiRequest& r) {
  const json* s = field(body, "soft_prompt");
  if (s == nullptr || s->is_null()) return;
  if (!s->is_string()) bad("soft_prompt", "'soft_prompt' must be a string");
  const std::string& name = s->get_ref<const std::string&>();
  if (ctx.adapters != nullptr) r.soft_prompt = ctx.adapters->find_soft_prompt(name);
  if (!r.soft_prompt) {
    throw ApiError(404, fmt::format("The soft prompt `{}` does not exist (start the server with --soft-prompt {}=FILE).",
                                    name, name),
                   "soft_prompt", "soft_prompt_not_found");
  }
}

// The top-level fields each endpoint reads (besides kSamplingFields). A
// field in none of these lists is refused (400, `param` naming it): a client
// asking for a grammar, tools or min_tokens must learn that it did not get
// them rather than receive text that silently ignores them.
constexpr std::string_view kCommonFields[] = {
    "model", "soft_prompt", "stream", "stream_options", "logit_bias",  // logit_bias: refused unless empty
    "response_format", "json_schema", "grammar", "regex",           // structured output
};
constexpr std::string_view kCompletionFields[] = {
    "prompt", "prompt_cache", "best_of", "echo", "logprobs",
    "suffix",  // refused unless empty
};
constexpr std::string_view kChatFields[] = {
    "messages", "logprobs", "top_logprobs", "add_generation_prompt", "chat_template_kwargs",
    "tools", "tool_choice", "parallel_tool_calls",  // server/tool_calls.h
    "prompt_cache",     // refused with its own reason
    "functions", "audio",  // refused unless empty
};
// OpenAI fields accepted because they change nothing this server computes:
// `user` and `safety_identifier` name the end user for OpenAI's abuse
// monitoring (there is none here to inform); `metadata` tags a stored
// completion (with `store`, which is refused unless false); `parallel_tool_calls`
// only matters with tools, which are refused.
constexpr std::string_view kNoEffectFields[] = {"user", "safety_identifier", "metadata", "store"};

template <size_t N>
bool listed(const std::string_view (&list)[N], std::string_view name) {
  for (std::string_view f : list) {
    if (f == name) return true;
  }
  return false;
}

bool known_field(std::string_view name, Endpoint ep) {
  return listed(kSamplingFields, name) || listed(kCommonFields, name) || listed(kNoEffectFields, name) ||
         (ep == Endpoint::kCompletions ? listed(kCompletionFields, name) : listed(kChatFields, name));
}

// A null value is "not given" everywhere in this parser, so it is no
// request for anything and passes.
void refuse_unknown_fields(const json& body, Endpoint ep) {
  for (const auto& [key, v] : body.items()) {
    if (v.is_null() || known_field(key, ep)) continue;
    bad(key, fmt::format("Unrecognized request field '{}': this server does not implement it and refuses it rather "
                         "than ignore it (docs/SERVER.md lists the fields it takes)",
                         key));
  }
}

// A field accepted only with the value that asks for nothing.
void refuse_unless(const json& body, const char* name, const json& harmless) {
  const json* v = field(body, name);
  if (v != nullptr && *v != harmless) {
    bad(name, fmt::format("'{}' is not supported by this server (only {} is accepted)", name, harmless.dump()));
  }
}

// Fields OpenAI defines that this server cannot honour: refused rather than
// silently ignored, so a client never gets something it did not ask for.
void refuse_unsupported(const json& body, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    const json* v = field(body, name);
    if (v == nullptr) continue;
    // json::empty() is false for every string, so "" is checked as a string.
    if (((v->is_object() || v->is_array()) && v->empty()) || (v->is_string() && v->get_ref<const std::string&>().empty())) {
      continue;
    }
    bad(name, fmt::format("'{}' is not supported by this server", name));
  }
}

engine::SamplingParams sampling(const json& body, int32_t default_max_tokens, const ModelContext& ctx) {
  try {
    engine::SamplingParams p =
        parse_sampling(body, {.temperature = 1.0f, .max_tokens = default_max_tokens, .kv_policy = ctx.kv_policy});
    if (p.kv_policy.bounded() && !ctx.bounded_kv) {
      bad("kv_policy", "this server runs a tensor-parallel model (--tp), which does not support bounded KV caches yet");
    }
    return p;
  } catch (const FieldError& e) {
    bad(e.field(), e.what());
  }
}

void parse_stream(const json& body, ApiRequest& r) {
  r.stream = boolean(body, "stream", false);
  if (const json* so = field(body, "stream_options")) {
    if (!so->is_object()) bad("stream_options", "'stream_options' must be an object");
    r.include_usage = boolean(*so, "include_usage", false);
    if (!r.stream) r.include_usage = false;
  }
}

// The soft prompt's virtual tokens the engine puts ahead of the prompt: the
// request's own, else the server's (--soft-prompt FILE), else none.
int64_t virtual_tokens(const ApiRequest& r, const ModelContext& ctx) {
  const SoftPrompt* sp = r.soft_prompt ? r.soft_prompt.get() : ctx.soft_prompt.get();
  return sp != nullptr ? sp->n_virtual : 0;
}

// prompt_len counts the virtual tokens too: they take context like tokens.
void check_context(int64_t prompt_len, const ModelContext& ctx, const char* param) {
  if (prompt_len >= ctx.max_model_len) {
    throw ApiError(400,
                   fmt::format("This model's maximum context length is {} tokens, but the prompt has {} tokens "
                               "(with the soft prompt's, if any); shorten the prompt",
                               ctx.max_model_len, prompt_len),
                   param, "context_length_exceeded");
  }
}

std::vector<int32_t> token_array(const json& a, const char* param) {
  std::vector<int32_t> ids;
  ids.reserve(a.size());
  for (const json& t : a) {
    if (!t.is_number_integer()) bad(param, "token ids in 'prompt' must be integers");
    ids.push_back(static_cast<int32_t>(bounded_int(t, param, 0, std::numeric_limits<int32_t>::max())));
  }
  return ids;
}

void add_text_prompt(ApiRequest& r, const std::string& text, const ModelContext& ctx) {
  r.prompts.push_back(ctx.tokenizer->encode(text, /*add_special=*/true, /*parse_special=*/true));
  r.prompt_texts.push_back(text);
}

void add_token_prompt(ApiRequest& r, std::vector<int32_t> ids, const ModelContext& ctx) {
  const int32_t V = ctx.tokenizer->n_vocab();
  for (int32_t t : ids) {
    if (t >= V) bad("prompt", fmt::format("prompt token id {} is out of range (vocabulary of {})", t, V));
  }
  r.prompt_texts.push_back(ctx.tokenizer->decode(ids));
  r.prompts.push_back(std::move(ids));
}

// prompt: "text" | ["text", ...] | [ids...] | [[ids...], ...]
void parse_prompts(const json& body, ApiRequest& r, const ModelContext& ctx) {
  const json* p = field(body, "prompt");
  if (p == nullptr) bad("prompt", "'prompt' is required");
  if (p->is_string()) {
    add_text_prompt(r, p->get<std::string>(), ctx);
    return;
  }
  if (!p->is_array() || p->empty()) {
    bad("prompt", "'prompt' must be a string, an array of strings, an array of token ids, or an array of such arrays");
  }
  const json& first = p->front();
  if (first.is_number()) {
    add_token_prompt(r, token_array(*p, "prompt"), ctx);
    return;
  }
  for (const json& e : *p) {
    if (first.is_string() && e.is_string()) {
      add_text_prompt(r, e.get<std::string>(), ctx);
    } else if (first.is_array() && e.is_array()) {
      add_token_prompt(r, token_array(e, "prompt"), ctx);
    } else {
      bad("prompt", "'prompt' arrays must hold only strings or only arrays of token ids");
    }
  }
}

// The Prompt Cache extension (docs/SERVER.md):
//   "prompt_cache": {"modules": ["name", ...]}
// imports the named modules of the server's schema, in schema order, before
// each prompt; the prompt is the free text after them (a leading BOS is
// dropped: the layout starts with its own).
void parse_prompt_cache(const json& body, ApiRequest& r, const ModelContext& ctx) {
  const json* pc = field(body, "prompt_cache");
  if (pc == nullptr) return;
  if (!pc->is_object()) bad("prompt_cache", "'prompt_cache' must be an object {\"modules\": [names]}");
  if (ctx.prompt_cache == nullptr) {
    bad("prompt_cache", "this server has no Prompt Cache schema (start it with --prompt-schema FILE)");
  }
  std::vector<std::string> modules;
  if (const json* m = field(*pc, "modules")) {
    if (!m->is_array()) bad("prompt_cache.modules", "'prompt_cache.modules' must be an array of module names");
    for (const json& e : *m) {
      if (!e.is_string()) bad("prompt_cache.modules", "'prompt_cache.modules' must be an array of module names");
      modules.push_back(e.get<std::string>());
    }
  }
  const int32_t bos = ctx.tokenizer->bos_id();
  for (std::vector<int32_t>& p : r.prompts) {
    std::vector<int32_t> free(p.begin() + (!p.empty() && p.front() == bos ? 1 : 0), p.end());
    if (free.empty()) bad("prompt", "with 'prompt_cache' the prompt must have at least one token after the modules");
    try {
      r.layouts.push_back(ctx.prompt_cache->compose(modules, free));
    } catch (const Error& e) {
      bad("prompt_cache.modules", e.what());
    }
    p = r.layouts.back().tokens;
  }
}

// Chat content: a string, or an array of {"type": "text", "text": ...}
// parts (passed on as they are: the template joins them).
json message_content(const json& m, size_t i) {
  const json* c = field(m, "content");
  if (c == nullptr) return "";
  if (c->is_string()) return *c;
  const std::string param = fmt::format("messages[{}].content", i);
  if (!c->is_array()) bad(param, "message content must be a string or an array of content parts");
  json parts = json::array();
  for (const json& part : *c) {
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) {
      bad(param, "each content part must be an object with a string 'type'");
    }
    if (part["type"].get_ref<const std::string&>() != "text") {
      bad(param, fmt::format("content parts of type '{}' are not supported (text only)",
                             part["type"].get_ref<const std::string&>()));
    }
    if (!part.contains("text") || !part["text"].is_string()) bad(param, "a text content part needs a string 'text'");
    parts.push_back({{"type", "text"}, {"text", part["text"]}});
  }
  return parts;
}

// Messages checked and normalised for the template: role and content (plus
// `name` when given), everything else dropped.
json normalise_messages(const json& body) {
  const json* msgs = field(body, "messages");
  if (msgs == nullptr) bad("messages", "'messages' is required");
  if (!msgs->is_array() || msgs->empty()) bad("messages", "'messages' must be a non-empty array");
  json out = json::array();
  for (size_t i = 0; i < msgs->size(); ++i) {
    const json& m = (*msgs)[i];
    const std::string param = fmt::format("messages[{}]", i);
    if (!m.is_object()) bad(param, "each message must be an object");
    const json* role = field(m, "role");
    if (role == nullptr || !role->is_string()) bad(param + ".role", "each message needs a string 'role'");
    json n = {{"role", *role}, {"content", message_content(m, i)}};
    if (const json* name = field(m, "name")) {
      if (!name->is_string()) bad(param + ".name", "'name' must be a string");
      n["name"] = *name;
    }
    // Tool turns go back through the template as the client sent them.
    if (const json* calls = field(m, "tool_calls")) {
      if (!calls->is_array()) bad(param + ".tool_calls", "'tool_calls' must be an array");
      n["tool_calls"] = *calls;
    }
    if (const json* id = field(m, "tool_call_id")) {
      if (!id->is_string()) bad(param + ".tool_call_id", "'tool_call_id' must be a string");
      n["tool_call_id"] = *id;
    }
    out.push_back(std::move(n));
  }
  return out;
}

// The request's schema as its client wrote it: nlohmann::json sorts object
// keys, and a schema's property order is the order outputs follow.
nlohmann::ordered_json ordered_schema(std::string_view raw, const json& fallback,
                                      std::initializer_list<const char*> path) {
  if (raw.empty()) return nlohmann::ordered_json::parse(fallback.dump());
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(raw);
  for (const char* k : path) j = std::move(j[k]);
  return j;
}

// Structured output (docs/STRUCTURED_OUTPUT.md): response_format (OpenAI:
// text, json_object, json_schema), json_schema and grammar (llama-server),
// regex; at most one. A schema or grammar that cannot be honoured is a 400
// naming what is wrong.
void parse_structured(const json& body, std::string_view raw, ApiRequest& r) {
  std::vector<const char*> given;
  for (const char* k : {"response_format", "json_schema", "grammar", "regex"}) {
    if (field(body, k) != nullptr) given.push_back(k);
  }
  if (given.empty()) return;
  if (given.size() > 1) bad(given[1], fmt::format("'{}' and '{}' both constrain the output: give one", given[0], given[1]));
  const std::string param = given[0];
  const json& v = *field(body, given[0]);
  grammar::JsonSchemaOptions o;
  try {
    if (param == "grammar" || param == "regex") {
      if (!v.is_string()) bad(param, fmt::format("'{}' must be a string", param));
      const std::string& text = v.get_ref<const std::string&>();
      r.params.constraint = param == "grammar" ? grammar::compile_gbnf(text) : grammar::compile_regex(text);
    } else if (param == "json_schema") {
      if (!v.is_object() && !v.is_boolean()) bad(param, "'json_schema' must be a JSON Schema (an object)");
      r.params.constraint = grammar::compile_json_schema(ordered_schema(raw, v, {"json_schema"}), o);
    } else {
      if (!v.is_object() || !v.contains("type") || !v["type"].is_string()) {
        bad(param, "'response_format' must be an object with a 'type'");
      }
      const std::string type = v["type"].get<std::string>();
      if (type == "text") return;
      if (type == "json_object") {
        // llama-server's extension: a schema beside the type.
        r.params.constraint = v.contains("schema")
                                  ? grammar::compile_json_schema(ordered_schema(raw, v["schema"], {"response_format", "schema"}), o)
                                  : grammar::compile_json_object(o);
      } else if (type == "json_schema") {
        const json* js = v.contains("json_schema") ? &v["json_schema"] : nullptr;
        if (js == nullptr || !js->is_object() || !js->contains("schema")) {
          bad("response_format", "response_format json_schema needs 'json_schema': {\"name\", \"schema\"}");
        }
        if (js->contains("strict") && !(*js)["strict"].is_boolean()) bad("response_format", "'strict' must be a boolean");
        o.strict = js->value("strict", false);
        r.params.constraint =
            grammar::compile_json_schema(ordered_schema(raw, (*js)["schema"], {"response_format", "json_schema", "schema"}), o);
      } else {
        bad(param, fmt::format("response_format type '{}' is not one of text, json_object, json_schema", type));
      }
    }
  } catch (const Error& e) {
    bad(param, e.what());
  }
}

// tools, tool_choice, parallel_tool_calls (server/tool_calls.h). The tools
// are rendered by the chat template (as `tools`) unless tool_choice is
// "none"; "required" or a named function constrain the reply to calls in the
// model family's format, their arguments to the function's parameters.
void parse_tools(const json& body, std::string_view raw, const ModelContext& ctx, ApiRequest& r, json& extra) {
  const json* tools = field(body, "tools");
  const json* choice = field(body, "tool_choice");
  if (tools == nullptr || (tools->is_array() && tools->empty())) {
    if (choice != nullptr && *choice != "none" && *choice != "auto") bad("tool_choice", "'tool_choice' needs 'tools'");
    return;
  }
  if (!tools->is_array()) bad("tools", "'tools' must be an array");
  ToolConfig cfg;
  cfg.format = detect_tool_format(ctx.chat_template->source());
  const nlohmann::ordered_json ordered = raw.empty() ? nlohmann::ordered_json::parse(body.dump())
                                                     : nlohmann::ordered_json::parse(raw);
  for (size_t i = 0; i < tools->size(); ++i) {
    const json& t = (*tools)[i];
    const std::string param = fmt::format("tools[{}]", i);
    if (!t.is_object() || t.value("type", json()) != "function" || !t.contains("function") || !t["function"].is_object()) {
      bad(param, "each tool must be {\"type\": \"function\", \"function\": {...}}");
    }
    const json& f = t["function"];
    if (!f.contains("name") || !f["name"].is_string() || f["name"].get_ref<const std::string&>().empty()) {
      bad(param + ".function.name", "a function needs a non-empty string 'name'");
    }
    ToolSpec spec;
    spec.name = f["name"].get<std::string>();
    for (const ToolSpec& other : cfg.tools) {
      if (other.name == spec.name) bad(param + ".function.name", fmt::format("two tools are named '{}'", spec.name));
    }
    const auto& of = ordered["tools"][i]["function"];
    spec.parameters = of.contains("parameters") ? of["parameters"] : nlohmann::ordered_json{{"type", "object"}};
    if (f.contains("strict") && f["strict"].is_boolean()) spec.strict = f["strict"].get<bool>();
    cfg.tools.push_back(std::move(spec));
  }
  if (choice == nullptr || *choice == "auto") {
    cfg.choice = "auto";
  } else if (*choice == "none" || *choice == "required") {
    cfg.choice = choice->get<std::string>();
  } else if (choice->is_object() && choice->value("type", json()) == "function" && choice->contains("function") &&
             (*choice)["function"].is_object() && (*choice)["function"].contains("name") &&
             (*choice)["function"]["name"].is_string()) {
    cfg.choice = "named";
    cfg.named = (*choice)["function"]["name"].get<std::string>();
    bool found = false;
    for (const ToolSpec& t : cfg.tools) found = found || t.name == cfg.named;
    if (!found) bad("tool_choice", fmt::format("tool_choice names '{}', which is not among the tools", cfg.named));
  } else {
    bad("tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                       "\"function\": {\"name\": ...}}");
  }
  if (const json* p = field(body, "parallel_tool_calls")) {
    if (!p->is_boolean()) bad("parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
    cfg.parallel = p->get<bool>();
  }
  if (cfg.choice == "none") return;  // a plain reply: the tools are not shown
  extra["tools"] = *tools;
  if (cfg.choice == "required" || cfg.choice == "named") {
    if (r.params.constraint) bad("tool_choice", "a required tool call cannot be combined with response_format");
    try {
      r.params.constraint = tool_call_constraint(cfg);
    } catch (const Error& e) {
      bad("tools", e.what());
    }
  }
  r.tools = std::move(cfg);
}

}  // namespace

json parse_body(std::string_view body, int max_depth) {
  // A raw NUL can never be part of a JSON text (inside strings it must be
  // escaped), but the parser would take it for the end of the input.
  if (body.find('\0') != std::string_view::npos) throw ApiError(400, "the request body is not valid JSON: it holds a NUL byte");
  try {
    // The callback sees each value's depth as the parser reaches it; the
    // parser itself keeps its stack on the heap, so refusing here is enough.
    return json::parse(body.begin(), body.end(), [max_depth](int depth, json::parse_event_t, json&) {
      if (depth >= max_depth) throw ApiError(400, fmt::format("the request body nests deeper than {} levels", max_depth));
      return true;
    });
  } catch (const json::exception& e) {
    throw ApiError(400, fmt::format("the request body is not valid JSON: {}", e.what()));
  }
}

ApiRequest parse_completion_request(const json& body, const ModelContext& ctx, std::string_view raw) {
  if (!body.is_object()) bad("", "the request body must be a JSON object");
  refuse_unknown_fields(body, Endpoint::kCompletions);
  ApiRequest r;
  check_model(body, ctx, r);
  check_soft_prompt(body, ctx, r);
  refuse_unsupported(body, {"suffix", "logit_bias"});
  refuse_unless(body, "store", false);
  r.endpoint = Endpoint::kCompletions;
  if (const json* b = field(body, "best_of")) {
    const int64_t best_of = bounded_int(*b, "best_of", 1, 128);
    const int64_t n = field(body, "n") ? bounded_int(body["n"], "n", 1, 128) : 1;
    if (best_of != n) bad("best_of", "'best_of' different from 'n' is not supported");
  }
  r.params = sampling(body, /*default_max_tokens=*/16, ctx);
  parse_structured(body, raw, r);
  parse_stream(body, r);
  r.echo = boolean(body, "echo", false);
  if (const json* lp = field(body, "logprobs")) {
    r.completion_logprobs = static_cast<int32_t>(bounded_int(*lp, "logprobs", 0, 20));
    r.params.logprobs = true;
    r.params.top_logprobs = r.completion_logprobs;
    if (r.echo) bad("echo", "'echo' together with 'logprobs' is not supported (no prompt logprobs)");
  }
  parse_prompts(body, r, ctx);
  parse_prompt_cache(body, r, ctx);
  r.virtual_tokens = virtual_tokens(r, ctx);
  for (size_t i = 0; i < r.prompts.size(); ++i) {
    // A Prompt Cache layout spans its modules' position ranges.
    const int64_t span = r.layouts.empty() ? static_cast<int64_t>(r.prompts[i].size()) : r.layouts[i].positions.back() + 1;
    check_context(span + r.virtual_tokens, ctx, "prompt");
  }
  return r;
}

ApiRequest parse_chat_request(const json& body, const ModelContext& ctx, std::string_view raw) {
  if (!body.is_object()) bad("", "the request body must be a JSON object");
  refuse_unknown_fields(body, Endpoint::kChat);
  ApiRequest r;
  check_model(body, ctx, r);
  check_soft_prompt(body, ctx, r);
  refuse_unsupported(body, {"functions", "logit_bias", "audio"});
  refuse_unless(body, "store", false);
  if (field(body, "prompt_cache") != nullptr) {
    bad("prompt_cache", "'prompt_cache' is supported on /v1/completions (a chat template would place text between modules)");
  }
  r.endpoint = Endpoint::kChat;
  const json messages = normalise_messages(body);
  r.params = sampling(body, /*default_max_tokens=*/1, ctx);  // replaced below when not given
  parse_structured(body, raw, r);
  parse_stream(body, r);
  r.chat_logprobs = boolean(body, "logprobs", false);
  if (const json* tl = field(body, "top_logprobs")) {
    const int32_t k = static_cast<int32_t>(bounded_int(*tl, "top_logprobs", 0, 20));
    if (!r.chat_logprobs && k > 0) bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    r.params.top_logprobs = k;
  }
  r.params.logprobs = r.chat_logprobs;

  if (ctx.chat_template == nullptr) {
    bad("messages", "this model has no chat template; start the server with --chat-template NAME|FILE "
                    "or use /v1/completions");
  }
  const bool add_generation_prompt = boolean(body, "add_generation_prompt", true);
  json extra = json::object();
  if (const json* kw = field(body, "chat_template_kwargs")) {
    if (!kw->is_object()) bad("chat_template_kwargs", "'chat_template_kwargs' must be an object");
    extra = *kw;
  }
  parse_tools(body, raw, ctx, r, extra);
  const Tokenizer& tok = *ctx.tokenizer;
  std::string rendered;
  try {
    const std::string bos = tok.bos_id() >= 0 ? tok.token_text(tok.bos_id()) : "";
    const std::string eos = tok.eos_id() >= 0 ? tok.token_text(tok.eos_id()) : "";
    rendered = ctx.chat_template->apply(messages, add_generation_prompt, bos, eos, extra);
  } catch (const Error& e) {
    bad("messages", e.what());
  }
  std::vector<int32_t> ids = tokenize_rendered(rendered, tok);
  // The context the engine fills: the soft prompt's virtual tokens, then the
  // conversation's.
  r.virtual_tokens = virtual_tokens(r, ctx);
  const int64_t prompt_len = r.virtual_tokens + static_cast<int64_t>(ids.size());
  check_context(prompt_len, ctx, "messages");
  // Without max_tokens / max_completion_tokens, a chat reply may use the
  // rest of the context (as vLLM does).
  if (field(body, "max_tokens") == nullptr && field(body, "max_completion_tokens") == nullptr) {
    r.params.max_tokens = static_cast<int32_t>(ctx.max_model_len - prompt_len);
  }
  r.prompt_texts.push_back(std::move(rendered));
  r.prompts.push_back(std::move(ids));
  return r;
}

}  // namespace tessera::server
