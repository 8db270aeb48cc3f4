#include "grammar/regex.h"

#include <fmt/format.h>

#include "core/error.h"
#include "tokenizer/unicode.h"

namespace tessera::grammar {

namespace re {

RegexPtr empty() { return std::make_shared<Regex>(); }

RegexPtr set(CodepointSet s) {
  auto r = std::make_shared<Regex>();
  r->kind = Regex::Kind::kSet;
  r->set = std::move(s);
  return r;
}

RegexPtr literal(std::string_view utf8) {
  // The callers hand valid UTF-8 (JSON text, parsed grammars).
  std::vector<RegexPtr> parts;
  for (size_t i = 0; i < utf8.size();) parts.push_back(set(CodepointSet::of(tok::next_code_point(utf8, i))));
  return seq(std::move(parts));
}

RegexPtr seq(std::vector<RegexPtr> parts) {
  std::vector<RegexPtr> flat;
  for (auto& p : parts) {
    if (p->kind == Regex::Kind::kEmpty) continue;
    if (p->kind == Regex::Kind::kSeq) {
      flat.insert(flat.end(), p->kids.begin(), p->kids.end());
    } else {
      flat.push_back(std::move(p));
    }
  }
  if (flat.empty()) return empty();
  if (flat.size() == 1) return flat[0];
  auto r = std::make_shared<Regex>();
  r->kind = Regex::Kind::kSeq;
  r->kids = std::move(flat);
  return r;
}

RegexPtr alt(std::vector<RegexPtr> options) {
  std::vector<RegexPtr> flat;
  for (auto& o : options) {
    if (o->kind == Regex::Kind::kAlt) {
      flat.insert(flat.end(), o->kids.begin(), o->kids.end());
    } else {
      flat.push_back(std::move(o));
    }
  }
  if (flat.size() == 1) return flat[0];
  auto r = std::make_shared<Regex>();
  r->kind = Regex::Kind::kAlt;
  r->kids = std::move(flat);
  return r;
}

RegexPtr repeat(RegexPtr x, int32_t min, int32_t max) {
  if (min == 1 && max == 1) return x;
  if (max == 0) return empty();
  auto r = std::make_shared<Regex>();
  r->kind = Regex::Kind::kRepeat;
  r->kids = {std::move(x)};
  r->min = min;
  r->max = max;
  return r;
}

}  // namespace re

bool nullable(const Regex& r) {
  switch (r.kind) {
    case Regex::Kind::kEmpty: return true;
    case Regex::Kind::kSet: return false;
    case Regex::Kind::kSeq:
      for (const auto& k : r.kids) if (!nullable(*k)) return false;
      return true;
    case Regex::Kind::kAlt:
      for (const auto& k : r.kids) if (nullable(*k)) return true;
      return false;
    case Regex::Kind::kRepeat: return r.min == 0 || nullable(*r.kids[0]);
  }
  return false;
}

bool matches_nothing(const Regex& r) {
  switch (r.kind) {
    case Regex::Kind::kEmpty: return false;
    case Regex::Kind::kSet: return r.set.empty();
    case Regex::Kind::kSeq:
      for (const auto& k : r.kids) if (matches_nothing(*k)) return true;
      return false;
    case Regex::Kind::kAlt:
      for (const auto& k : r.kids) if (!matches_nothing(*k)) return false;
      return true;
    case Regex::Kind::kRepeat: return r.min > 0 && matches_nothing(*r.kids[0]);
  }
  return true;
}

bool has_nonempty(const Regex& r) {
  switch (r.kind) {
    case Regex::Kind::kEmpty: return false;
    case Regex::Kind::kSet: return !r.set.empty();
    case Regex::Kind::kSeq: {
      bool some = false;
      for (const auto& k : r.kids) {
        if (matches_nothing(*k)) return false;
        some = some || has_nonempty(*k);
      }
      return some;
    }
    case Regex::Kind::kAlt:
      for (const auto& k : r.kids) if (has_nonempty(*k)) return true;
      return false;
    case Regex::Kind::kRepeat: return r.max != 0 && has_nonempty(*r.kids[0]);
  }
  return false;
}

RegexPtr cap_repeats(const RegexPtr& r, int32_t max) {
  switch (r->kind) {
    case Regex::Kind::kEmpty:
    case Regex::Kind::kSet: return r;
    case Regex::Kind::kSeq:
    case Regex::Kind::kAlt: {
      std::vector<RegexPtr> kids;
      for (const auto& k : r->kids) kids.push_back(cap_repeats(k, max));
      return r->kind == Regex::Kind::kSeq ? re::seq(std::move(kids)) : re::alt(std::move(kids));
    }
    case Regex::Kind::kRepeat:
      return re::repeat(cap_repeats(r->kids[0], max), r->min, r->max < 0 ? std::max(r->min, max) : r->max);
  }
  return r;
}

std::string regex_key(const Regex& r) {
  switch (r.kind) {
    case Regex::Kind::kEmpty: return "()";
    case Regex::Kind::kSet: {
      std::string k = "[";
      k += r.set.key();
      k += ']';
      return k;
    }
    case Regex::Kind::kSeq:
    case Regex::Kind::kAlt: {
      std::string k = r.kind == Regex::Kind::kSeq ? "(" : "(|";
      for (const auto& c : r.kids) k += regex_key(*c) + (r.kind == Regex::Kind::kAlt ? "|" : "");
      return k + ")";
    }
    case Regex::Kind::kRepeat: return regex_key(*r.kids[0]) + fmt::format("{{{},{}}}", r.min, r.max);
  }
  return "";
}

namespace {

CodepointSet digits() { return CodepointSet::range('0', '9'); }
CodepointSet word() {
  CodepointSet s = CodepointSet::range('a', 'z');
  s.add('A', 'Z');
  s.add('0', '9');
  s.add('_', '_');
  return s;
}
CodepointSet space() {  // ECMAScript WhiteSpace and LineTerminator
  CodepointSet s = CodepointSet::range('\t', '\r');
  for (const uint32_t c : {0x20u, 0xA0u, 0x1680u, 0x2028u, 0x2029u, 0x202Fu, 0x205Fu, 0x3000u, 0xFEFFu}) s.add(c, c);
  s.add(0x2000, 0x200A);
  return s;
}
CodepointSet dot() {  // everything but line terminators
  CodepointSet s;
  s.add('\n', '\n');
  s.add('\r', '\r');
  s.add(0x2028, 0x2029);
  return s.complement();
}

class Parser {
 public:
  Parser(std::string_view text, const RegexOptions& o) : opts_(o) {
    TESSERA_CHECK(tok::is_valid_utf8(text), kInvalidArgument, "regex: the pattern is not valid UTF-8");
    for (size_t i = 0; i < text.size();) cps_.push_back(tok::next_code_point(text, i));
  }

  RegexPtr parse() {
    std::vector<RegexPtr> branches;
    for (;;) {
      bool head = false, tail = false;
      if (peek('^')) { ++pos_; head = true; }
      RegexPtr body = concat(/*top=*/true);
      if (peek('$')) { ++pos_; tail = true; }
      if (opts_.search) {
        const RegexPtr any = re::repeat(re::set(dot().intersect(opts_.alphabet)), 0, opts_.search_pad_max);
        body = re::seq({head ? re::empty() : any, body, tail ? re::empty() : any});
      }
      branches.push_back(body);
      if (!peek('|')) break;
      ++pos_;
    }
    if (pos_ < cps_.size()) error(cps_[pos_] == ')' ? "unbalanced ')'" : "unexpected character");
    return re::alt(std::move(branches));
  }

 private:
  [[noreturn]] void error(const char* what) const {
    fail(ErrorCode::kInvalidArgument, "regex: {} at character {}", what, pos_);
  }
  bool peek(uint32_t c) const { return pos_ < cps_.size() && cps_[pos_] == c; }
  bool at_end() const { return pos_ >= cps_.size(); }

  RegexPtr alternation() {
    std::vector<RegexPtr> opts{concat(false)};
    while (peek('|')) {
      ++pos_;
      opts.push_back(concat(false));
    }
    return re::alt(std::move(opts));
  }

  RegexPtr concat(bool top) {
    std::vector<RegexPtr> parts;
    while (!at_end() && !peek('|') && !peek(')')) {
      if (top && peek('$') && (pos_ + 1 == cps_.size() || cps_[pos_ + 1] == '|')) break;
      parts.push_back(quantified());
    }
    return re::seq(std::move(parts));
  }

  // {n}, {n,}, {n,m}; false (and pos_ unchanged) when the brace is a literal.
  bool braces(int32_t& lo, int32_t& hi) {
    size_t p = pos_ + 1;
    auto number = [&](int32_t& v) {
      const size_t s = p;
      int64_t x = 0;
      while (p < cps_.size() && cps_[p] >= '0' && cps_[p] <= '9') {
        x = x * 10 + (cps_[p++] - '0');
        if (x > 100000) error("repetition count too large");
      }
      v = static_cast<int32_t>(x);
      return p > s;
    };
    if (!number(lo)) return false;
    hi = lo;
    if (p < cps_.size() && cps_[p] == ',') {
      ++p;
      if (!number(hi)) hi = -1;
    }
    if (p >= cps_.size() || cps_[p] != '}') return false;
    if (hi >= 0 && hi < lo) error("repetition {n,m} with m < n");
    pos_ = p + 1;
    return true;
  }

  RegexPtr quantified() {
    RegexPtr a = atom();
    for (;;) {
      int32_t lo = 0, hi = -1;
      if (peek('*')) { ++pos_; lo = 0; hi = -1; }
      else if (peek('+')) { ++pos_; lo = 1; hi = -1; }
      else if (peek('?')) { ++pos_; lo = 0; hi = 1; }
      else if (peek('{') && braces(lo, hi)) {}
      else return a;
      if (peek('?')) ++pos_;  // lazy: same language
      a = re::repeat(a, lo, hi);
    }
  }

  RegexPtr atom() {
    const uint32_t c = cps_[pos_++];
    switch (c) {
      case '(': {
        if (peek('?')) {
          ++pos_;
          if (peek(':')) {
            ++pos_;
          } else if (peek('<') && pos_ + 1 < cps_.size() && cps_[pos_ + 1] != '=' && cps_[pos_ + 1] != '!') {
            while (!at_end() && !peek('>')) ++pos_;  // named group: the name does not matter
            if (at_end()) error("unterminated group name");
            ++pos_;
          } else {
            error("lookaround is not supported (not regular)");
          }
        }
        RegexPtr inner = alternation();
        if (!peek(')')) error("missing ')'");
        ++pos_;
        return inner;
      }
      case '[': return re::set(cls().intersect(opts_.alphabet));
      case '.': return re::set(dot().intersect(opts_.alphabet));
      case '\\': return re::set(escape(/*in_class=*/false).intersect(opts_.alphabet));
      case '^': case '$': --pos_; error("an anchor inside the pattern is not supported");
      case '*': case '+': case '?': --pos_; error("nothing to repeat");
      case ')': --pos_; error("unbalanced ')'");
      default: return re::set(CodepointSet::of(c).intersect(opts_.alphabet));
    }
  }

  uint32_t hex(int n) {
    uint32_t v = 0;
    for (int i = 0; i < n; ++i) {
      if (at_end()) error("truncated escape");
      const uint32_t d = cps_[pos_++];
      if (d >= '0' && d <= '9') v = v * 16 + (d - '0');
      else if (d >= 'a' && d <= 'f') v = v * 16 + (d - 'a' + 10);
      else if (d >= 'A' && d <= 'F') v = v * 16 + (d - 'A' + 10);
      else error("bad hex digit in escape");
    }
    return v;
  }

  CodepointSet escape(bool in_class) {
    if (at_end()) error("pattern ends with '\\'");
    const uint32_t c = cps_[pos_++];
    switch (c) {
      case 'd': return digits();
      case 'D': return digits().complement();
      case 'w': return word();
      case 'W': return word().complement();
      case 's': return space();
      case 'S': return space().complement();
      case 't': return CodepointSet::of('\t');
      case 'n': return CodepointSet::of('\n');
      case 'r': return CodepointSet::of('\r');
      case 'f': return CodepointSet::of('\f');
      case 'v': return CodepointSet::of('\v');
      case '0': return CodepointSet::of(0);
      case 'x': return CodepointSet::of(hex(2));
      case 'u': {
        if (peek('{')) {
          ++pos_;
          uint32_t v = 0;
          int n = 0;
          while (!at_end() && !peek('}')) { v = v * 16 + hex(1); ++n; }
          if (at_end() || n == 0 || v > kMaxCodepoint) error("bad \\u{...} escape");
          ++pos_;
          return CodepointSet::of(v);
        }
        uint32_t v = hex(4);
        // A surrogate pair written as two escapes.
        if (v >= 0xD800 && v <= 0xDBFF && pos_ + 1 < cps_.size() && cps_[pos_] == '\\' && cps_[pos_ + 1] == 'u') {
          pos_ += 2;
          const uint32_t lo = hex(4);
          if (lo < 0xDC00 || lo > 0xDFFF) error("unpaired surrogate escape");
          v = 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
        }
        return CodepointSet::of(v);
      }
      case 'b':
        if (in_class) return CodepointSet::of('\b');
        --pos_;
        error("word boundaries are not supported");
      case 'B': --pos_; error("word boundaries are not supported");
      default:
        if (c >= '1' && c <= '9') { --pos_; error("backreferences are not supported (not regular)"); }
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) { --pos_; error("unknown escape"); }
        return CodepointSet::of(c);
    }
  }

  CodepointSet cls() {
    bool negate = false;
    if (peek('^')) { ++pos_; negate = true; }
    CodepointSet s;
    bool first = true;
    while (!at_end() && (first || !peek(']'))) {
      first = false;
      auto one = [&](CodepointSet& set, bool& single, uint32_t& v) {
        const uint32_t c = cps_[pos_++];
        if (c == '\\') set = escape(/*in_class=*/true);
        else set = CodepointSet::of(c);
        single = set.ranges().size() == 1 && set.ranges()[0].first == set.ranges()[0].second;
        v = single ? set.ranges()[0].first : 0;
      };
      CodepointSet a;
      bool a1 = false;
      uint32_t av = 0;
      one(a, a1, av);
      if (peek('-') && pos_ + 1 < cps_.size() && cps_[pos_ + 1] != ']') {
        ++pos_;
        CodepointSet b;
        bool b1 = false;
        uint32_t bv = 0;
        one(b, b1, bv);
        if (!a1 || !b1) error("a class range needs single characters at both ends");
        if (bv < av) error("class range out of order");
        s.add(av, bv);
      } else {
        s.add(a);
      }
    }
    if (!peek(']')) error("missing ']'");
    ++pos_;
    return negate ? s.complement() : s;
  }

  const RegexOptions& opts_;
  std::vector<uint32_t> cps_;
  size_t pos_ = 0;
};

}  // namespace

RegexPtr parse_regex(std::string_view pattern, const RegexOptions& opts) {
  Parser p(pattern, opts);
  return p.parse();
}

}  // namespace tessera::grammar
