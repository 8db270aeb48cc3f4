// JSON Schema (draft 2020-12, and the draft-07 spellings `definitions` and
// `items` arrays are refused) compiled to a grammar whose every sentence is
// a JSON text that validates against the schema.
//
// Covered: type (and type lists), properties / required /
// additionalProperties, enum / const, anyOf, oneOf (alternatives provably
// disjoint), allOf (merged), $ref / $defs (local, recursive), items /
// prefixItems / minItems / maxItems, minLength / maxLength / pattern /
// format (date, time, date-time, uuid, email, ipv4, hostname, uri),
// integer bounds (exclusive too), number bounds at integers, and the
// annotations. Anything else is refused with Error(kInvalidArgument) naming
// the keyword and where it is: never silently ignored.
//
// Choices a validator does not see (docs/STRUCTURED_OUTPUT.md):
// - properties come in the schema's order;
// - extra keys (where additionalProperties allows them) come after the
//   listed properties; with `strict` (OpenAI's json_schema.strict), an
//   object that lists properties and says nothing of others has none;
// - strings with a pattern, format or length bound use no escapes.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "grammar/constraint.h"

namespace tessera::grammar {

enum class JsonWhitespace {
  kCompact,   // {"a":1,"b":[1,2]}
  kSpaced,    // {"a": 1, "b": [1, 2]}  (Python's json.dumps)
  kFlexible,  // any JSON whitespace, up to 4 characters, before every token
};

struct JsonSchemaOptions {
  JsonWhitespace whitespace = JsonWhitespace::kSpaced;
  int32_t max_repeat = 4096;  // largest minItems/maxItems/maxLength accepted
  bool strict = false;        // absent additionalProperties beside properties means false
  // Strings the schema leaves unbounded (and the text around an unanchored
  // pattern's match, and each unbounded repetition inside a pattern) hold
  // at most this many characters; -1: no cap. Outputs
  // stay valid (a subset of the language); a sampler that rarely picks a
  // closing quote, as a random-weight model at temperature 1, still ends.
  int32_t max_string_length = -1;
};

std::shared_ptr<const Constraint> compile_json_schema(const nlohmann::ordered_json& schema,
                                                      const JsonSchemaOptions& opts = {});
std::shared_ptr<const Constraint> compile_json_schema_text(std::string_view schema_text,
                                                           const JsonSchemaOptions& opts = {});
// Texts made of JSON values between fixed strings, as models write tool
// calls: open ITEM (separator ITEM)* close, ITEM = item_prefix VALUE
// item_suffix, at most max_items items (-1: any), each VALUE valid
// against `item_schema`. Qwen's `<tool_call>\n{...}\n</tool_call>` is
// {"", "<tool_call>\n", "\n</tool_call>", "\n", ""}.
struct JsonSequence {
  std::string open, item_prefix, item_suffix, separator, close;
  int32_t max_items = 1;
};
std::shared_ptr<const Constraint> compile_json_sequence(const nlohmann::ordered_json& item_schema,
                                                        const JsonSequence& seq, const JsonSchemaOptions& opts = {});

// Any JSON object ({"type": "json_object"}).
std::shared_ptr<const Constraint> compile_json_object(const JsonSchemaOptions& opts = {});

// The characters a JSON string holds unescaped, and one character of a JSON
// string (plain or an escape): the plain-text kids of the lexer
// (Lexer::add_plain_kid).
CodepointSet json_plain_chars();
RegexPtr json_string_char();

// The regex of integers in [lo, hi] written without leading zeros (bounds
// may be absent). Exposed for tests.
RegexPtr integer_range_regex(std::optional<int64_t> lo, std::optional<int64_t> hi);

}  // namespace tessera::grammar
