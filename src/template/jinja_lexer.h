// Lexer of the Jinja subset. Splits a template into text and tag tokens with
// Hugging Face's environment settings applied (trim_blocks, lstrip_blocks,
// `-`/`+` whitespace control, no trailing newline kept, newlines normalised
// to \n), and tags into expression tokens.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace tessera::server::jinja {

// 1-based line and column (in bytes) in the normalised source.
struct SourcePos {
  int line = 0;
  int col = 0;
};

// A syntax error, a rendering error, or the template's own raise_exception().
// what() is "syntax error at L:C: message", "error at L:C: message", or for
// raise_exception the template's message alone.
class TemplateError : public Error {
 public:
  enum class Kind { kSyntax, kRender, kRaised };
  TemplateError(Kind kind, SourcePos pos, const std::string& message);
  Kind kind() const { return kind_; }
  SourcePos pos() const { return pos_; }
  const std::string& message() const { return message_; }

 private:
  Kind kind_;
  SourcePos pos_;
  std::string message_;
};

[[noreturn]] void syntax_error(SourcePos pos, const std::string& message);

enum class TokenKind : uint8_t {
  kText,        // template data between tags
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kString,      // text holds the decoded value
  kInt,
  kFloat,
  kOp,          // text holds the operator: + - * / // % ** ~ == != < <= > >= = . : | , ( ) [ ] { }
  kEof,
};

struct Token {
  TokenKind kind = TokenKind::kEof;
  std::string text;
  int64_t int_value = 0;
  double float_value = 0.0;
  SourcePos pos;
};

// Throws TemplateError(kSyntax) on a malformed template. The last token is
// always kEof.
std::vector<Token> lex(std::string_view source);

}  // namespace tessera::server::jinja
