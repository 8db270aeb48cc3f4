// Tool calls (OpenAI's `tools`, `tool_choice`, `parallel_tool_calls`): the
// format each model family writes its calls in, the grammar that makes a
// model call a tool when it must, and the parser that turns its text into
// OpenAI `tool_calls`. docs/STRUCTURED_OUTPUT.md, "Tools".
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/constraint.h"

namespace tessera::server {

// How a family writes calls, told apart by its chat template:
//   kHermes   (Qwen 2.5 / 3, Hermes): <tool_call>\n{"name": N, "arguments": A}\n</tool_call>, one per call
//   kLlama3   (Llama 3.1+): the reply is {"name": N, "parameters": A}, one call
//   kMistral  [TOOL_CALLS][{"name": N, "arguments": A}, ...]
//   kGeneric  anything else: {"tool_calls": [{"name": N, "arguments": A}, ...]}
enum class ToolFormat { kHermes, kLlama3, kMistral, kGeneric };
ToolFormat detect_tool_format(std::string_view template_source);
const char* tool_format_name(ToolFormat f);

struct ToolSpec {
  std::string name;
  nlohmann::ordered_json parameters;  // a JSON Schema ({"type": "object"} when absent)
  bool strict = false;
};

struct ToolConfig {
  std::vector<ToolSpec> tools;
  std::string choice = "auto";  // "auto", "required", "none", or "named"
  std::string named;            // the function tool_choice names
  bool parallel = true;
  ToolFormat format = ToolFormat::kGeneric;
};

// The calls the model must write (tool_choice "required" or a named
// function): the family's format around values valid against each tool's
// parameters. Throws Error(kInvalidArgument) naming what a schema lacks.
std::shared_ptr<const grammar::Constraint> tool_call_constraint(const ToolConfig& cfg);

struct ToolCall {
  std::string name;
  std::string arguments;  // JSON text, as OpenAI sends it
};
struct ParsedReply {
  std::string content;          // the text outside the calls (trimmed)
  std::vector<ToolCall> calls;  // empty: a plain reply
};
// The calls in `text` as `format` writes them; text that is not a call
// stays content. A malformed call is content too (nothing is dropped).
ParsedReply parse_tool_calls(std::string_view text, ToolFormat format);

}  // namespace tessera::server
