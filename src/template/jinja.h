// A Jinja2 subset for chat templates (the Jinja source that Hugging Face
// models ship in tokenizer_config.json / GGUF tokenizer.chat_template),
// rendered with Hugging Face's settings: trim_blocks, lstrip_blocks, the
// loopcontrols extension, and Jinja's default Undefined.
//
// Layers: jinja_lexer (text -> tokens) -> jinja_parser (tokens -> jinja_ast)
// -> jinja_eval (Renderer) with jinja_value (the data model), jinja_ops
// (Python operators), jinja_filters, jinja_functions (methods, globals) and
// jinja_format (tojson, %-formatting).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "template/jinja_ast.h"
#include "template/jinja_eval.h"
#include "template/jinja_value.h"

namespace tessera::server::jinja {

class Template {
 public:
  // Throws TemplateError(kSyntax) with line:column.
  static Template parse(std::string_view source);

  // Throws TemplateError (kRender, or kRaised for raise_exception()), or
  // Error on a default-constructed Template. Safe to call from several
  // threads at once: a render only reads the tree.
  std::string render(std::vector<std::pair<std::string, Value>> vars, const RenderLimits& limits = {}) const;

 private:
  std::shared_ptr<const Body> body_;  // shared: copies of a Template are cheap
};

// JSON to template values, objects in the json's key order (sorted for
// nlohmann::json, as received for ordered_json). Throws
// Error(kInvalidArgument) past kMaxValueDepth.
Value from_json(const nlohmann::json& j);
Value from_json(const nlohmann::ordered_json& j);

}  // namespace tessera::server::jinja
