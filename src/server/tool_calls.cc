#include "server/tool_calls.h"

#include "grammar/json_schema.h"

namespace tessera::server {

using Json = nlohmann::ordered_json;

ToolFormat detect_tool_format(std::string_view src) {
  if (src.find("<tool_call>") != std::string_view::npos) return ToolFormat::kHermes;
  if (src.find("[TOOL_CALLS]") != std::string_view::npos) return ToolFormat::kMistral;
  if (src.find("<|python_tag|>") != std::string_view::npos || src.find("ipython") != std::string_view::npos) {
    return ToolFormat::kLlama3;
  }
  return ToolFormat::kGeneric;
}

const char* tool_format_name(ToolFormat f) {
  switch (f) {
    case ToolFormat::kHermes: return "hermes";
    case ToolFormat::kLlama3: return "llama3";
    case ToolFormat::kMistral: return "mistral";
    case ToolFormat::kGeneric: return "generic";
  }
  return "generic";
}

std::shared_ptr<const grammar::Constraint> tool_call_constraint(const ToolConfig& cfg) {
  const char* args_key = cfg.format == ToolFormat::kLlama3 ? "parameters" : "arguments";
  Json options = Json::array();
  bool strict = true;
  for (const ToolSpec& t : cfg.tools) {
    if (cfg.choice == "named" && t.name != cfg.named) continue;
    options.push_back({{"type", "object"},
                       {"properties", {{"name", {{"const", t.name}}}, {args_key, t.parameters}}},
                       {"required", {"name", args_key}},
                       {"additionalProperties", false}});
    strict = strict && t.strict;
  }
  const Json item = options.size() == 1 ? options[0] : Json{{"anyOf", options}};
  grammar::JsonSequence seq;
  const int32_t many = cfg.parallel && cfg.choice != "named" ? -1 : 1;
  switch (cfg.format) {
    case ToolFormat::kHermes: seq = {"", "<tool_call>\n", "\n</tool_call>", "\n", "", many}; break;
    case ToolFormat::kLlama3: seq = {"", "", "", "", "", 1}; break;
    case ToolFormat::kMistral: seq = {"[TOOL_CALLS][", "", "", ", ", "]", many}; break;
    case ToolFormat::kGeneric: seq = {"{\"tool_calls\": [", "", "", ", ", "]}", many}; break;
  }
  grammar::JsonSchemaOptions o;
  o.strict = strict;
  return grammar::compile_json_sequence(item, seq, o);
}

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// {"name": N, "arguments"|"parameters": A} as a call.
bool call_of(const Json& j, ToolCall& out) {
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return false;
  const Json* a = j.contains("arguments") ? &j["arguments"] : j.contains("parameters") ? &j["parameters"] : nullptr;
  if (a == nullptr) return false;
  out.name = j["name"].get<std::string>();
  out.arguments = a->is_string() ? a->get<std::string>() : a->dump();
  return true;
}

bool calls_of(const Json& arr, std::vector<ToolCall>& out) {
  if (!arr.is_array() || arr.empty()) return false;
  for (const Json& j : arr) {
    ToolCall c;
    if (!call_of(j, c)) return false;
    out.push_back(std::move(c));
  }
  return true;
}

Json parse_or_null(std::string_view s) {
  try {
    return Json::parse(s);
  } catch (const nlohmann::json::exception&) {
    return Json();
  }
}

}  // namespace

ParsedReply parse_tool_calls(std::string_view text, ToolFormat format) {
  ParsedReply r;
  if (format == ToolFormat::kHermes) {
    std::string content;
    size_t at = 0;
    for (;;) {
      const size_t b = text.find("<tool_call>", at);
      if (b == std::string_view::npos) break;
      const size_t e = text.find("</tool_call>", b);
      if (e == std::string_view::npos) break;
      ToolCall c;
      if (!call_of(parse_or_null(text.substr(b + 11, e - b - 11)), c)) break;
      content += text.substr(at, b - at);
      r.calls.push_back(std::move(c));
      at = e + 12;
    }
    content += text.substr(at);
    r.content = std::string(trim(content));
    return r;
  }
  const std::string_view t = trim(text);
  bool ok = false;
  if (format == ToolFormat::kMistral && t.starts_with("[TOOL_CALLS]")) {
    ok = calls_of(parse_or_null(t.substr(12)), r.calls);
  } else if (format == ToolFormat::kLlama3 && t.starts_with("{")) {
    ToolCall c;
    if (call_of(parse_or_null(t), c)) {
      r.calls.push_back(std::move(c));
      ok = true;
    }
  } else if (format == ToolFormat::kGeneric && t.starts_with("{")) {
    const Json j = parse_or_null(t);
    ok = j.is_object() && j.contains("tool_calls") && calls_of(j["tool_calls"], r.calls);
  }
  if (!ok) {
    r.calls.clear();
    r.content = std::string(text);
  }
  return r;
}

}  // namespace tessera::server
