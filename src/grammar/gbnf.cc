#include "grammar/gbnf.h"

#include <map>

#include "core/error.h"
#include "tokenizer/unicode.h"

namespace tessera::grammar {

namespace {

class GbnfParser {
 public:
  explicit GbnfParser(std::string_view t) : s_(t) {}

  std::shared_ptr<const Constraint> run() {
    if (!tok::is_valid_utf8(s_)) fail(ErrorCode::kInvalidArgument, "grammar: not valid UTF-8");
    skip_space(true);
    while (pos_ < s_.size()) {
      const std::string name = ident();
      if (name.empty()) error("expected a rule name");
      skip_space(false);
      if (s_.substr(pos_, 3) != "::=") error("expected '::=' after '{}'", name);
      pos_ += 3;
      skip_space(true);
      const int32_t nt = rule_id(name);
      if (defined_.count(name)) error("rule '{}' defined twice", name);
      defined_[name] = line_;
      alternatives(nt, /*nested=*/false);
      skip_space(true);
    }
    for (const auto& [name, line] : used_) {
      if (!defined_.count(name)) fail(ErrorCode::kInvalidArgument, "grammar: line {}: undefined rule '{}'", line, name);
    }
    if (!defined_.count("root")) fail(ErrorCode::kInvalidArgument, "grammar: no 'root' rule");
    return make_constraint("gbnf", b_.finish(ids_.at("root")));
  }

 private:
  template <class... Args>
  [[noreturn]] void error(fmt::format_string<Args...> f, Args&&... args) const {
    fail(ErrorCode::kInvalidArgument, "grammar: line {}: {}", line_, fmt::format(f, std::forward<Args>(args)...));
  }
  bool at_end() const { return pos_ >= s_.size(); }
  char peek() const { return at_end() ? '\0' : s_[pos_]; }

  // Spaces and comments; newlines only where a rule may continue (inside
  // groups, after '::=' or '|').
  void skip_space(bool newlines) {
    while (!at_end()) {
      const char c = s_[pos_];
      if (c == '#') {
        while (!at_end() && s_[pos_] != '\n') ++pos_;
      } else if (c == ' ' || c == '\t' || c == '\r') {
        ++pos_;
      } else if (c == '\n' && newlines) {
        ++pos_;
        ++line_;
      } else {
        break;
      }
    }
  }

  std::string ident() {
    const size_t b = pos_;
    while (!at_end() && (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '-' || s_[pos_] == '_')) ++pos_;
    return std::string(s_.substr(b, pos_ - b));
  }

  int32_t rule_id(const std::string& name) {
    if (auto it = ids_.find(name); it != ids_.end()) return it->second;
    const int32_t n = b_.nonterminal(name);
    ids_.emplace(name, n);
    return n;
  }

  uint32_t utf8() { return tok::next_code_point(s_, pos_); }  // run() checked the whole text

  uint32_t hex(int n) {
    uint32_t v = 0;
    for (int i = 0; i < n; ++i) {
      if (at_end() || !std::isxdigit(static_cast<unsigned char>(s_[pos_]))) error("bad hex escape");
      const char d = s_[pos_++];
      v = v * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(d)) ? d - '0' : (std::tolower(d) - 'a' + 10));
    }
    return v;
  }

  // One character of a literal or class, escapes decoded.
  uint32_t character() {
    if (at_end()) error("unexpected end of grammar");
    if (s_[pos_] != '\\') return utf8();
    ++pos_;
    if (at_end()) error("unexpected end after '\\'");
    const char e = s_[pos_++];
    switch (e) {
      case 'x': return hex(2);
      case 'u': return hex(4);
      case 'U': return hex(8);
      case 't': return '\t';
      case 'r': return '\r';
      case 'n': return '\n';
      case '\\': case '"': case '[': case ']': case '-': case '^': return static_cast<uint32_t>(e);
      default: error("unknown escape '\\{}'", e);
    }
  }

  RegexPtr char_class() {  // after '['
    bool negate = false;
    if (peek() == '^') {
      ++pos_;
      negate = true;
    }
    CodepointSet set;
    while (peek() != ']') {
      if (at_end()) error("unterminated character class");
      const uint32_t a = character();
      uint32_t b = a;
      if (peek() == '-' && pos_ + 1 < s_.size() && s_[pos_ + 1] != ']') {
        ++pos_;
        b = character();
        if (b < a) error("character range out of order");
      }
      set.add(a, b);
    }
    ++pos_;
    return re::set(negate ? set.complement() : set);
  }

  // A character-level regex as single-character lexemes in sequence.
  std::vector<int32_t> chars(const RegexPtr& r) {
    if (r->kind == Regex::Kind::kSet) return b_.text(r);
    std::vector<int32_t> out;
    for (const auto& k : r->kids) {
      const auto one = b_.text(k);
      out.insert(out.end(), one.begin(), one.end());
    }
    return out;
  }

  // A sequence item: returns its symbols.
  std::vector<int32_t> item() {
    std::vector<int32_t> base;
    const char c = peek();
    if (c == '"') {
      ++pos_;
      std::vector<RegexPtr> cs;
      while (peek() != '"') {
        if (at_end() || peek() == '\n') error("unterminated literal");
        cs.push_back(re::set(CodepointSet::of(character())));
      }
      ++pos_;
      for (const auto& x : cs) {
        const auto one = b_.text(x);
        base.insert(base.end(), one.begin(), one.end());
      }
    } else if (c == '[') {
      ++pos_;
      base = chars(char_class());
    } else if (c == '.') {
      ++pos_;
      base = b_.text(re::set(CodepointSet::all()));
    } else if (c == '(') {
      ++pos_;
      skip_space(true);
      const int32_t g = b_.nonterminal("group");
      alternatives(g, /*nested=*/true);
      if (peek() != ')') error("missing ')'");
      ++pos_;
      base = {g};
    } else if (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_') {
      const std::string name = ident();
      if (!used_.count(name)) used_[name] = line_;
      base = {rule_id(name)};
    } else {
      error("unexpected '{}'", c);
    }
    // Postfix repetition.
    for (;;) {
      skip_space(false);
      int64_t lo, hi;
      if (peek() == '*') { ++pos_; lo = 0; hi = -1; }
      else if (peek() == '+') { ++pos_; lo = 1; hi = -1; }
      else if (peek() == '?') { ++pos_; lo = 0; hi = 1; }
      else if (peek() == '{') {
        ++pos_;
        skip_space(false);
        lo = number();
        hi = lo;
        skip_space(false);
        if (peek() == ',') {
          ++pos_;
          skip_space(false);
          hi = std::isdigit(static_cast<unsigned char>(peek())) ? number() : -1;
          skip_space(false);
        }
        if (peek() != '}') error("missing '}}'");
        ++pos_;
        if (hi >= 0 && hi < lo) error("repetition {{m,n}} with n < m");
      } else {
        return base;
      }
      base = {repeat(base, lo, hi)};
    }
  }

  int64_t number() {
    if (!std::isdigit(static_cast<unsigned char>(peek()))) error("expected a number");
    int64_t v = 0;
    while (std::isdigit(static_cast<unsigned char>(peek()))) {
      v = v * 10 + (s_[pos_++] - '0');
      if (v > 100000) error("repetition count too large");
    }
    return v;
  }

  // X{lo,hi} over symbols: lo copies, then hi-lo nested optionals (or a
  // left-recursive loop when unbounded).
  int32_t repeat(const std::vector<int32_t>& x, int64_t lo, int64_t hi) {
    const int32_t one = b_.seq("rep_item", x);
    std::vector<int32_t> rhs(static_cast<size_t>(lo), one);
    if (hi < 0) {
      const int32_t loop = b_.nonterminal("rep_star");
      b_.rule(loop, {});
      b_.rule(loop, {loop, one});
      rhs.push_back(loop);
    } else if (hi > lo) {
      int32_t tail = b_.nonterminal("rep_opt");
      b_.rule(tail, {});
      b_.rule(tail, {one});
      for (int64_t i = lo + 1; i < hi; ++i) {
        const int32_t t = b_.nonterminal("rep_opt");
        b_.rule(t, {});
        b_.rule(t, {one, tail});
        tail = t;
      }
      rhs.push_back(tail);
    }
    return b_.seq("rep", rhs);
  }

  void alternatives(int32_t lhs, bool nested) {
    for (;;) {
      std::vector<int32_t> seq;
      for (;;) {
        skip_space(nested);
        const char c = peek();
        if (at_end() || c == '|' || c == ')' || c == '\n') break;
        // A new rule starts on this line: the current one ended.
        if (!nested && std::isalpha(static_cast<unsigned char>(c))) {
          size_t p = pos_;
          while (p < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[p])) || s_[p] == '-' || s_[p] == '_')) ++p;
          while (p < s_.size() && (s_[p] == ' ' || s_[p] == '\t')) ++p;
          if (s_.substr(p, 3) == "::=") break;
        }
        const auto it = item();
        seq.insert(seq.end(), it.begin(), it.end());
      }
      b_.rule(lhs, seq);
      if (peek() != '|') break;
      ++pos_;
      skip_space(true);
    }
  }

  std::string_view s_;
  size_t pos_ = 0;
  int line_ = 1;
  GrammarBuilder b_;
  std::map<std::string, int32_t> ids_;
  std::map<std::string, int> defined_, used_;
};

}  // namespace

std::shared_ptr<const Constraint> compile_gbnf(std::string_view text) {
  GbnfParser p(text);
  return p.run();
}

}  // namespace tessera::grammar
