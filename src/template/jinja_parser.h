// Parser of the Jinja subset: tokens to a statement tree, with Jinja's
// operator precedence. Templates come from model files, so the parser bounds
// its own recursion and every expression's height (kMaxParseDepth,
// kMaxExprHeight) and reports a syntax error instead of overflowing the
// stack.
#pragma once

#include <string_view>

#include "template/jinja_ast.h"

namespace tessera::server::jinja {

// Nested blocks plus nested sub-expressions (parentheses, `not`, unary minus).
constexpr int kMaxParseDepth = 100;
// Height of one expression tree (a long a + b + c ... chain counts each +).
constexpr int kMaxExprHeight = 256;

// Parses a whole template. Throws TemplateError(kSyntax) with line:column.
Body parse_template(std::string_view source);

}  // namespace tessera::server::jinja
