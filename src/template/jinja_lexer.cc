#include "template/jinja_lexer.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cmath>
#include <limits>

#include "tokenizer/unicode.h"

namespace tessera::server::jinja {

namespace {

std::string format_template_error(TemplateError::Kind kind, SourcePos pos, const std::string& message) {
  switch (kind) {
    case TemplateError::Kind::kSyntax: return fmt::format("syntax error at {}:{}: {}", pos.line, pos.col, message);
    case TemplateError::Kind::kRender: return fmt::format("error at {}:{}: {}", pos.line, pos.col, message);
    case TemplateError::Kind::kRaised: return message;
  }
  return message;
}

}  // namespace

TemplateError::TemplateError(Kind kind, SourcePos pos, const std::string& message)
    : Error(ErrorCode::kInvalidArgument, format_template_error(kind, pos, message)),
      kind_(kind),
      pos_(pos),
      message_(message) {}

void syntax_error(SourcePos pos, const std::string& message) {
  throw TemplateError(TemplateError::Kind::kSyntax, pos, message);
}

namespace {

// Python's \s for ASCII (the lexer's regular expressions use \s).
bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

// A lone surrogate (\ud800) has no UTF-8: it becomes U+FFFD.
void append_code_point(std::string& out, uint32_t cp) {
  tok::append_utf8(out, cp >= 0xD800 && cp <= 0xDFFF ? tok::kReplacementChar : cp);
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class Lexer {
 public:
  explicit Lexer(std::string_view source) {
    // Jinja normalises \r\n and \r to \n and drops one trailing newline
    // (keep_trailing_newline=False).
    src_.reserve(source.size());
    for (size_t i = 0; i < source.size(); ++i) {
      if (source[i] == '\r') {
        src_ += '\n';
        if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
      } else {
        src_ += source[i];
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  std::vector<Token> run() {
    size_t pos = 0;
    while (pos < src_.size()) {
      const size_t tag = find_tag(pos);
      if (tag == std::string::npos) {
        add_text(pos, src_.substr(pos));
        break;
      }
      const char type = src_[tag + 1];
      const char sign = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      const size_t after_sign = tag + 2 + (sign == '-' || sign == '+' ? 1 : 0);
      std::string text = src_.substr(pos, tag - pos);
      size_t raw_content = 0;
      const bool raw = type == '%' && match_raw_begin(after_sign, raw_content);
      strip_before(text, pos, sign, type != '{');
      add_text(pos, std::move(text));
      if (raw) {
        pos = lex_raw(raw_content);
      } else if (type == '#') {
        pos = skip_comment(tag, after_sign);
      } else {
        pos = lex_tag(tag, after_sign, type == '{');
      }
    }
    Token eof;
    eof.kind = TokenKind::kEof;
    eof.pos = position(src_.size());
    tokens_.push_back(std::move(eof));
    return std::move(tokens_);
  }

 private:
  SourcePos position(size_t offset) const {
    const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    const size_t line = static_cast<size_t>(it - line_starts_.begin());
    return {static_cast<int>(line), static_cast<int>(offset - line_starts_[line - 1] + 1)};
  }

  size_t find_tag(size_t pos) const {
    for (size_t i = src_.find('{', pos); i != std::string::npos && i + 1 < src_.size(); i = src_.find('{', i + 1)) {
      const char c = src_[i + 1];
      if (c == '{' || c == '%' || c == '#') return i;
    }
    return std::string::npos;
  }

  // `-` strips all whitespace before a tag; otherwise lstrip_blocks strips
  // the spaces and tabs between a line start and a block or comment tag.
  void strip_before(std::string& text, size_t text_start, char sign, bool lstrip_applies) const {
    if (sign == '-') {
      size_t end = text.size();
      while (end > 0 && is_space(text[end - 1])) --end;
      text.resize(end);
      return;
    }
    if (sign == '+' || !lstrip_applies) return;
    const size_t nl = text.rfind('\n');
    const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
    const bool line_starting = text_start == 0 || src_[text_start - 1] == '\n';
    if (l_pos == 0 && !line_starting) return;
    if (l_pos == text.size()) return;
    for (size_t i = l_pos; i < text.size(); ++i) {
      if (!is_space(text[i])) return;
    }
    text.resize(l_pos);
  }

  void add_text(size_t start, std::string text) {
    if (text.empty()) return;
    Token t;
    t.kind = TokenKind::kText;
    t.text = std::move(text);
    t.pos = position(start);
    tokens_.push_back(std::move(t));
  }

  // After a block or comment end: `-` strips all following whitespace, `+`
  // keeps it, otherwise trim_blocks drops one newline.
  size_t skip_after_end(size_t pos, char marker, bool trim_blocks) const {
    if (marker == '-') {
      while (pos < src_.size() && is_space(src_[pos])) ++pos;
    } else if (marker != '+' && trim_blocks && pos < src_.size() && src_[pos] == '\n') {
      ++pos;
    }
    return pos;
  }

  bool match_word(size_t& pos, std::string_view word) const {
    if (src_.compare(pos, word.size(), word) != 0) return false;
    pos += word.size();
    return true;
  }

  size_t skip_spaces(size_t pos) const {
    while (pos < src_.size() && is_space(src_[pos])) ++pos;
    return pos;
  }

  // `{% raw %}` (the opening tag has no trim_blocks, as in Jinja). Sets
  // `content` to where the raw text starts.
  bool match_raw_begin(size_t pos, size_t& content) const {
    pos = skip_spaces(pos);
    if (!match_word(pos, "raw")) return false;
    pos = skip_spaces(pos);
    if (match_word(pos, "-%}")) {
      content = skip_spaces(pos);
      return true;
    }
    if (match_word(pos, "%}")) {
      content = pos;
      return true;
    }
    return false;
  }

  size_t lex_raw(size_t content) {
    for (size_t tag = src_.find("{%", content); tag != std::string::npos; tag = src_.find("{%", tag + 1)) {
      const char sign = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      size_t p = skip_spaces(tag + 2 + (sign == '-' || sign == '+' ? 1 : 0));
      if (!match_word(p, "endraw")) continue;
      p = skip_spaces(p);
      char marker = '\0';
      if (match_word(p, "+%}")) {
        marker = '+';
      } else if (match_word(p, "-%}")) {
        marker = '-';
      } else if (!match_word(p, "%}")) {
        continue;
      }
      std::string text = src_.substr(content, tag - content);
      strip_before(text, content, sign, true);
      add_text(content, std::move(text));
      return skip_after_end(p, marker, true);
    }
    syntax_error(position(content), "missing end of raw directive");
  }

  size_t skip_comment(size_t tag, size_t body) const {
    const size_t end = src_.find("#}", body);
    if (end == std::string::npos) syntax_error(position(tag), "missing end of comment tag");
    const char marker = end > body && (src_[end - 1] == '-' || src_[end - 1] == '+') ? src_[end - 1] : '\0';
    return skip_after_end(end + 2, marker, true);
  }

  // Lexes `{{ ... }}` or `{% ... %}` starting at `tag`; returns the offset
  // after the closing delimiter (and the whitespace it strips).
  size_t lex_tag(size_t tag, size_t pos, bool is_var) {
    Token begin;
    begin.kind = is_var ? TokenKind::kVarBegin : TokenKind::kBlockBegin;
    begin.pos = position(tag);
    tokens_.push_back(std::move(begin));
    std::vector<char> brackets;
    while (true) {
      pos = skip_spaces(pos);
      if (pos >= src_.size()) syntax_error(position(tag), is_var ? "unexpected end of template, expected '}}'"
                                                                  : "unexpected end of template, expected '%}'");
      if (brackets.empty()) {
        const size_t end = match_tag_end(pos, is_var);
        if (end != std::string::npos) {
          Token t;
          t.kind = is_var ? TokenKind::kVarEnd : TokenKind::kBlockEnd;
          t.pos = position(pos);
          tokens_.push_back(std::move(t));
          return end;
        }
      }
      pos = lex_expression_token(pos, brackets);
    }
  }

  size_t match_tag_end(size_t pos, bool is_var) const {
    size_t p = pos;
    if (is_var) {
      if (match_word(p, "-}}")) return skip_after_end(p, '-', false);
      if (match_word(p, "}}")) return p;
      return std::string::npos;
    }
    if (match_word(p, "+%}")) return p;
    if (match_word(p, "-%}")) return skip_after_end(p, '-', true);
    if (match_word(p, "%}")) return skip_after_end(p, '\0', true);
    return std::string::npos;
  }

  size_t lex_expression_token(size_t pos, std::vector<char>& brackets) {
    Token t;
    t.pos = position(pos);
    const char c = src_[pos];
    if (is_digit(c)) {
      pos = lex_number(pos, t);
    } else if (is_name_start(c)) {
      const size_t start = pos;
      while (pos < src_.size() && is_name_char(src_[pos])) ++pos;
      t.kind = TokenKind::kName;
      t.text = src_.substr(start, pos - start);
    } else if (c == '\'' || c == '"') {
      pos = lex_string(pos, t);
    } else {
      pos = lex_operator(pos, t, brackets);
    }
    tokens_.push_back(std::move(t));
    return pos;
  }

  size_t lex_digits(size_t pos, std::string& out) const {
    // digits with single underscores between them, as Python allows
    while (pos < src_.size()) {
      if (is_digit(src_[pos])) {
        out += src_[pos++];
      } else if (src_[pos] == '_' && pos + 1 < src_.size() && is_digit(src_[pos + 1]) && !out.empty()) {
        ++pos;
      } else {
        break;
      }
    }
    return pos;
  }

  size_t lex_number(size_t pos, Token& t) const {
    // A fraction needs a digit after the dot (`1.` is not a float); a number
    // right after a dot (`x.0.1`) is an index, not a float.
    const bool after_dot = pos > 0 && src_[pos - 1] == '.';
    std::string digits;
    pos = lex_digits(pos, digits);
    bool is_float = false;
    if (!after_dot && pos + 1 < src_.size() && src_[pos] == '.' && is_digit(src_[pos + 1])) {
      digits += '.';
      pos = lex_digits(pos + 1, digits);
      is_float = true;
    }
    if (!after_dot && pos < src_.size() && (src_[pos] == 'e' || src_[pos] == 'E')) {
      size_t p = pos + 1;
      std::string exp = "e";
      if (p < src_.size() && (src_[p] == '+' || src_[p] == '-')) exp += src_[p++];
      if (p < src_.size() && is_digit(src_[p])) {
        pos = lex_digits(p, exp);
        digits += exp;
        is_float = true;
      }
    }
    if (is_float) {
      t.kind = TokenKind::kFloat;
      t.float_value = std::strtod(digits.c_str(), nullptr);
    } else {
      t.kind = TokenKind::kInt;
      errno = 0;
      const unsigned long long v = std::strtoull(digits.c_str(), nullptr, 10);
      if (errno == ERANGE || v > static_cast<unsigned long long>(std::numeric_limits<int64_t>::max())) {
        syntax_error(t.pos, "integer literal too large");
      }
      t.int_value = static_cast<int64_t>(v);
    }
    t.text = digits;
    return pos;
  }

  // Decodes Python's string escapes (Jinja applies unicode-escape). Unknown
  // escapes stay as written.
  size_t lex_string(size_t pos, Token& t) const {
    const char quote = src_[pos++];
    t.kind = TokenKind::kString;
    std::string& out = t.text;
    while (true) {
      if (pos >= src_.size()) syntax_error(t.pos, "unterminated string");
      const char c = src_[pos];
      if (c == quote) return pos + 1;
      if (c != '\\') {
        out += c;
        ++pos;
        continue;
      }
      if (pos + 1 >= src_.size()) syntax_error(t.pos, "unterminated string");
      const char e = src_[pos + 1];
      pos += 2;
      switch (e) {
        case '\n': break;  // line continuation
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'v': out += '\v'; break;
        case 'x':
        case 'u':
        case 'U': {
          const int n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          uint32_t cp = 0;
          for (int k = 0; k < n; ++k) {
            const int h = pos < src_.size() ? hex_value(src_[pos]) : -1;
            if (h < 0) syntax_error(t.pos, fmt::format("truncated \\{} escape in string", e));
            cp = cp * 16 + static_cast<uint32_t>(h);
            ++pos;
          }
          if (cp > 0x10FFFF) syntax_error(t.pos, "illegal Unicode character in string escape");
          append_code_point(out, cp);
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            uint32_t cp = static_cast<uint32_t>(e - '0');
            for (int k = 0; k < 2 && pos < src_.size() && src_[pos] >= '0' && src_[pos] <= '7'; ++k) {
              cp = cp * 8 + static_cast<uint32_t>(src_[pos++] - '0');
            }
            append_code_point(out, cp);
          } else {
            out += '\\';
            out += e;
          }
      }
    }
  }

  size_t lex_operator(size_t pos, Token& t, std::vector<char>& brackets) const {
    static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", "<=", ">="};
    t.kind = TokenKind::kOp;
    for (auto op : kTwo) {
      if (src_.compare(pos, 2, op) == 0) {
        t.text = std::string(op);
        return pos + 2;
      }
    }
    const char c = src_[pos];
    static constexpr std::string_view kOne = "+-/*%~[](){}><=.:|,;";
    if (kOne.find(c) == std::string_view::npos) {
      const auto u = static_cast<unsigned char>(c);
      syntax_error(t.pos, u >= 0x20 && u < 0x7f ? fmt::format("unexpected char '{}'", c)
                                                 : fmt::format("unexpected byte 0x{:02x}", u));
    }
    if (c == '(' || c == '[' || c == '{') {
      brackets.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    } else if (c == ')' || c == ']' || c == '}') {
      if (brackets.empty()) syntax_error(t.pos, fmt::format("unexpected '{}'", c));
      if (brackets.back() != c) syntax_error(t.pos, fmt::format("unexpected '{}', expected '{}'", c, brackets.back()));
      brackets.pop_back();
    }
    t.text = std::string(1, c);
    return pos + 1;
  }

  std::string src_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> lex(std::string_view source) { return Lexer(source).run(); }

}  // namespace tessera::server::jinja
