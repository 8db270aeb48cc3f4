// Methods of str, list and dict, the global functions, and the Python string
// helpers that filters share with them.
#include <algorithm>
#include <cstring>
#include <ctime>

#include "core/error.h"
#include "template/jinja_builtins.h"
#include "template/jinja_eval.h"

namespace tessera::server::jinja {

// ---- argument binding -------------------------------------------------------

Args::Args(const CallArgs& args, std::string_view function, std::initializer_list<std::string_view> params)
    : function_(function), params_(params), bound_(params.size(), nullptr) {
  TESSERA_CHECK(args.positional.size() <= params_.size(), kInvalidArgument,
                "{}() takes at most {} argument(s) ({} given)", function_, params_.size(), args.positional.size());
  for (size_t i = 0; i < args.positional.size(); ++i) bound_[i] = &args.positional[i];
  for (const auto& [name, value] : args.named) {
    size_t i = 0;
    while (i < params_.size() && params_[i] != name) ++i;
    TESSERA_CHECK(i < params_.size(), kInvalidArgument, "{}() got an unexpected keyword argument '{}'", function_,
                  name);
    TESSERA_CHECK(!bound_[i], kInvalidArgument, "{}() got multiple values for argument '{}'", function_, name);
    bound_[i] = &value;
  }
}

Value Args::value(size_t i, Value fallback) const { return bound_[i] ? *bound_[i] : std::move(fallback); }

bool Args::flag(size_t i, bool fallback) const { return bound_[i] ? bound_[i]->truthy() : fallback; }

int64_t Args::integer(size_t i, int64_t fallback) const {
  if (!bound_[i] || bound_[i]->is_none()) return fallback;
  TESSERA_CHECK(bound_[i]->is_integral(), kInvalidArgument, "{}(): argument '{}' must be an integer, not '{}'",
                function_, params_[i], bound_[i]->type_name());
  return bound_[i]->as_int();
}

std::string Args::string(size_t i, std::string fallback) const {
  if (!bound_[i] || bound_[i]->is_none()) return fallback;
  TESSERA_CHECK(bound_[i]->is_string(), kInvalidArgument, "{}(): argument '{}' must be a string, not '{}'", function_,
                params_[i], bound_[i]->type_name());
  return bound_[i]->str();
}

// ---- string helpers ---------------------------------------------------------

bool is_py_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r') || (c >= '\x1c' && c <= '\x1f'); }

namespace {

// Byte length of the whitespace character (str.isspace) starting at s[i],
// or 0. Covers ASCII and the Unicode spaces Python recognises.
size_t space_at(std::string_view s, size_t i) {
  if (is_py_space(s[i])) return 1;
  const auto b = [&](size_t k) { return i + k < s.size() ? static_cast<unsigned char>(s[i + k]) : 0u; };
  if (b(0) == 0xC2 && (b(1) == 0x85 || b(1) == 0xA0)) return 2;
  if (b(0) == 0xE1 && b(1) == 0x9A && b(2) == 0x80) return 3;  // U+1680
  if (b(0) == 0xE2 && b(1) == 0x80 && ((b(2) >= 0x80 && b(2) <= 0x8A) || b(2) == 0xA8 || b(2) == 0xA9 || b(2) == 0xAF)) {
    return 3;  // U+2000..200A, 2028, 2029, 202F
  }
  if (b(0) == 0xE2 && b(1) == 0x81 && b(2) == 0x9F) return 3;  // U+205F
  if (b(0) == 0xE3 && b(1) == 0x80 && b(2) == 0x80) return 3;  // U+3000
  return 0;
}

// Byte length of the whitespace character that ends at s[end), or 0.
size_t space_before(std::string_view s, size_t end) {
  for (size_t n = 1; n <= 3 && n <= end; ++n) {
    if (space_at(s, end - n) == n) return n;
  }
  return 0;
}

std::vector<std::string_view> characters(std::string_view s) {
  const std::vector<size_t> offsets = utf8_offsets(s);
  std::vector<std::string_view> chars;
  for (size_t i = 0; i + 1 < offsets.size(); ++i) chars.push_back(s.substr(offsets[i], offsets[i + 1] - offsets[i]));
  return chars;
}

}  // namespace

std::string py_strip(std::string_view s, const Value* chars, bool left, bool right) {
  size_t begin = 0;
  size_t end = s.size();
  if (!chars || chars->is_none() || chars->is_undefined()) {
    for (size_t n; left && begin < end && (n = space_at(s, begin)) > 0;) begin += n;
    for (size_t n; right && end > begin && (n = space_before(s.substr(0, end), end)) > 0;) end -= n;
    return std::string(s.substr(begin, end - begin));
  }
  TESSERA_CHECK(chars->is_string(), kInvalidArgument, "strip arg must be None or str");
  const std::vector<std::string_view> set = characters(chars->str());
  auto matches_at = [&](size_t pos) -> size_t {
    for (auto c : set) {
      if (s.substr(pos, c.size()) == c && pos + c.size() <= end) return c.size();
    }
    return 0;
  };
  auto matches_before = [&](size_t pos) -> size_t {
    for (auto c : set) {
      if (c.size() <= pos - begin && s.substr(pos - c.size(), c.size()) == c) return c.size();
    }
    return 0;
  };
  for (size_t n; left && begin < end && (n = matches_at(begin)) > 0;) begin += n;
  for (size_t n; right && end > begin && (n = matches_before(end)) > 0;) end -= n;
  return std::string(s.substr(begin, end - begin));
}

std::string py_upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  }
  return out;
}

std::string py_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

namespace {
bool is_ascii_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
char to_upper(char c) { return c >= 'a' && c <= 'z' ? static_cast<char>(c - 'a' + 'A') : c; }
char to_lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }
}  // namespace

std::string py_title(std::string_view s) {
  std::string out(s);
  bool prev_cased = false;
  for (char& c : out) {
    if (is_ascii_alpha(c)) {
      c = prev_cased ? to_lower(c) : to_upper(c);
      prev_cased = true;
    } else {
      prev_cased = false;
    }
  }
  return out;
}

std::string py_capitalize(std::string_view s) {
  std::string out = py_lower(s);
  if (!out.empty()) out[0] = to_upper(out[0]);
  return out;
}

std::string py_replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count,
                       Budget& budget) {
  std::string out;
  auto append = [&](std::string_view piece) {
    out.append(piece);
    budget.check_size(out.size());
  };
  if (old.empty()) {
    // Python inserts `repl` before every character and at the end.
    const std::vector<size_t> offsets = utf8_offsets(s);
    for (size_t i = 0; i + 1 < offsets.size(); ++i) {
      if (count < 0 || static_cast<int64_t>(i) < count) append(repl);
      append(s.substr(offsets[i], offsets[i + 1] - offsets[i]));
    }
    if (count < 0 || static_cast<int64_t>(offsets.size()) - 1 < count) append(repl);
  } else {
    size_t pos = 0;
    for (int64_t n = 0; count < 0 || n < count; ++n) {
      const size_t hit = s.find(old, pos);
      if (hit == std::string_view::npos) break;
      append(s.substr(pos, hit - pos));
      append(repl);
      pos = hit + old.size();
    }
    append(s.substr(pos));
  }
  budget.charge(static_cast<int64_t>(out.size() / 256));
  return out;
}

std::vector<std::string> py_splitlines(std::string_view s) {
  std::vector<std::string> lines;
  size_t start = 0;
  size_t i = 0;
  while (i < s.size()) {
    size_t brk = 0;
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '\r') {
      brk = i + 1 < s.size() && s[i + 1] == '\n' ? 2 : 1;
    } else if (c == '\n' || c == '\v' || c == '\f' || (c >= 0x1c && c <= 0x1e)) {
      brk = 1;
    } else if (c == 0xC2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) == 0x85) {
      brk = 2;
    } else if (c == 0xE2 && s.substr(i, 3) == "\xE2\x80\xA8") {
      brk = 3;
    } else if (c == 0xE2 && s.substr(i, 3) == "\xE2\x80\xA9") {
      brk = 3;
    }
    if (brk == 0) {
      ++i;
      continue;
    }
    lines.emplace_back(s.substr(start, i - start));
    i += brk;
    start = i;
  }
  if (start < s.size()) lines.emplace_back(s.substr(start));
  return lines;
}

Value dict_items(const Value& dict) {
  std::vector<Value> pairs;
  pairs.reserve(dict.obj().entries.size());
  for (const auto& [k, v] : dict.obj().entries) pairs.push_back(Value::array({k, v}, true));
  return Value::array(std::move(pairs));
}

// ---- str methods ------------------------------------------------------------

namespace {

using Method = Value (*)(Renderer&, const Value& self, CallArgs&);

std::vector<Value> split_string(std::string_view s, const Value& sep, int64_t maxsplit, bool from_right) {
  std::vector<std::string> parts;
  if (sep.is_none() || sep.is_undefined()) {
    // runs of whitespace, no empty strings
    std::vector<std::pair<size_t, size_t>> words;
    size_t i = 0;
    while (i < s.size()) {
      size_t n = space_at(s, i);
      if (n) {
        i += n;
        continue;
      }
      const size_t start = i;
      while (i < s.size() && space_at(s, i) == 0) ++i;
      words.emplace_back(start, i);
    }
    if (maxsplit >= 0 && static_cast<int64_t>(words.size()) > maxsplit + 1) {
      // the unsplit remainder keeps its inner and far-end whitespace, as CPython does
      if (!from_right) {
        const auto m = static_cast<size_t>(maxsplit);
        for (size_t k = 0; k < m; ++k) parts.emplace_back(s.substr(words[k].first, words[k].second - words[k].first));
        parts.emplace_back(s.substr(words[m].first));
      } else {
        const size_t keep = words.size() - static_cast<size_t>(maxsplit);
        parts.emplace_back(s.substr(0, words[keep - 1].second));
        for (size_t k = keep; k < words.size(); ++k) {
          parts.emplace_back(s.substr(words[k].first, words[k].second - words[k].first));
        }
      }
    } else {
      for (const auto& [a, b] : words) parts.emplace_back(s.substr(a, b - a));
    }
  } else {
    TESSERA_CHECK(sep.is_string(), kInvalidArgument, "must be str or None, not {}", sep.type_name());
    const std::string& d = sep.str();
    TESSERA_CHECK(!d.empty(), kInvalidArgument, "empty separator");
    std::vector<size_t> hits;
    for (size_t pos = s.find(d); pos != std::string_view::npos; pos = s.find(d, pos + d.size())) hits.push_back(pos);
    if (maxsplit >= 0 && static_cast<int64_t>(hits.size()) > maxsplit) {
      if (from_right) {
        // rightmost occurrences, found without overlap from the right
        hits.clear();
        size_t end = s.size();
        while (static_cast<int64_t>(hits.size()) < maxsplit && end >= d.size()) {
          const size_t pos = s.rfind(d, end - d.size());
          if (pos == std::string_view::npos) break;
          hits.insert(hits.begin(), pos);
          end = pos;
        }
      } else {
        hits.resize(static_cast<size_t>(maxsplit));
      }
    }
    size_t start = 0;
    for (size_t h : hits) {
      parts.emplace_back(s.substr(start, h - start));
      start = h + d.size();
    }
    parts.emplace_back(s.substr(start));
  }
  std::vector<Value> out;
  out.reserve(parts.size());
  for (auto& p : parts) out.push_back(Value::string(std::move(p)));
  return out;
}

bool affix_matches(const Value& affix, std::string_view s, bool at_start) {
  auto test = [&](const Value& a) {
    TESSERA_CHECK(a.is_string(), kInvalidArgument, "{} first arg must be str or a tuple of str, not {}",
                  at_start ? "startswith" : "endswith", a.type_name());
    const std::string& x = a.str();
    if (x.size() > s.size()) return false;
    return at_start ? s.substr(0, x.size()) == x : s.substr(s.size() - x.size()) == x;
  };
  if (affix.is_array()) {
    for (const auto& a : affix.arr().items) {
      if (test(a)) return true;
    }
    return false;
  }
  return test(affix);
}

int64_t char_index(std::string_view s, size_t byte_offset) {
  return static_cast<int64_t>(utf8_length(s.substr(0, byte_offset)));
}

// Python's str.format with {} / {0} / {name} fields and !s / !r (no format
// specs), and {{ }} escapes.
std::string str_format(Renderer& r, const std::string& fmt_text, const CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt_text.size(); ++i) {
    const char c = fmt_text[i];
    if (c == '}') {
      TESSERA_CHECK(i + 1 < fmt_text.size() && fmt_text[i + 1] == '}', kInvalidArgument,
                    "single '}}' encountered in format string");
      out += '}';
      ++i;
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < fmt_text.size() && fmt_text[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    const size_t close = fmt_text.find('}', i);
    TESSERA_CHECK(close != std::string::npos, kInvalidArgument, "single '{{' encountered in format string");
    std::string field = fmt_text.substr(i + 1, close - i - 1);
    i = close;
    bool as_repr = false;
    if (const size_t bang = field.find('!'); bang != std::string::npos) {
      TESSERA_CHECK(field.substr(bang) == "!r" || field.substr(bang) == "!s", kInvalidArgument,
                    "unsupported conversion in format string");
      as_repr = field.substr(bang) == "!r";
      field.resize(bang);
    }
    TESSERA_CHECK(field.find(':') == std::string::npos, kInvalidArgument,
                  "format specs in str.format are not supported");
    const Value* v = nullptr;
    if (field.empty() || std::all_of(field.begin(), field.end(), [](char d) { return d >= '0' && d <= '9'; })) {
      const size_t index = field.empty() ? auto_index++ : std::stoul(field);
      TESSERA_CHECK(index < args.positional.size(), kInvalidArgument, "format index {} out of range", index);
      v = &args.positional[index];
    } else {
      for (const auto& [name, value] : args.named) {
        if (name == field) v = &value;
      }
      TESSERA_CHECK(v, kInvalidArgument, "format field '{}' was not given", field);
    }
    out += as_repr ? to_repr(*v, r.budget()) : r.str(*v);
    r.budget().check_size(out.size());
  }
  return out;
}

Value join_strings(Renderer& r, const std::string& sep, const std::vector<Value>& items, bool strict) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += sep;
    if (strict) {
      TESSERA_CHECK(items[i].is_string(), kInvalidArgument, "sequence item {}: expected str instance, {} found", i,
                    items[i].type_name());
    }
    append_str(out, items[i], r.budget());
    r.budget().check_size(out.size());
  }
  return r.make_string(std::move(out));
}

Value s_strip(Renderer& r, const Value& self, CallArgs& a, bool left, bool right, const char* name) {
  Args args(a, name, {"chars"});
  return r.make_string(py_strip(self.str(), args.get(0), left, right));
}

const std::pair<std::string_view, Method> kStrMethods[] = {
    {"strip", [](Renderer& r, const Value& s, CallArgs& a) { return s_strip(r, s, a, true, true, "strip"); }},
    {"lstrip", [](Renderer& r, const Value& s, CallArgs& a) { return s_strip(r, s, a, true, false, "lstrip"); }},
    {"rstrip", [](Renderer& r, const Value& s, CallArgs& a) { return s_strip(r, s, a, false, true, "rstrip"); }},
    {"startswith",
     [](Renderer&, const Value& s, CallArgs& a) {
       Args args(a, "startswith", {"prefix"});
       TESSERA_CHECK(args.get(0), kInvalidArgument, "startswith() takes one argument");
       return Value::boolean(affix_matches(*args.get(0), s.str(), true));
     }},
    {"endswith",
     [](Renderer&, const Value& s, CallArgs& a) {
       Args args(a, "endswith", {"suffix"});
       TESSERA_CHECK(args.get(0), kInvalidArgument, "endswith() takes one argument");
       return Value::boolean(affix_matches(*args.get(0), s.str(), false));
     }},
    {"split",
     [](Renderer& r, const Value& s, CallArgs& a) {
       Args args(a, "split", {"sep", "maxsplit"});
       std::vector<Value> parts = split_string(s.str(), args.value(0, Value::none()), args.integer(1, -1), false);
       r.charge(static_cast<int64_t>(parts.size()));
       return Value::array(std::move(parts));
     }},
    {"rsplit",
     [](Renderer& r, const Value& s, CallArgs& a) {
       Args args(a, "rsplit", {"sep", "maxsplit"});
       std::vector<Value> parts = split_string(s.str(), args.value(0, Value::none()), args.integer(1, -1), true);
       r.charge(static_cast<int64_t>(parts.size()));
       return Value::array(std::move(parts));
     }},
    {"splitlines",
     [](Renderer& r, const Value& s, CallArgs& a) {
       Args args(a, "splitlines", {});
       std::vector<Value> lines;
       for (auto& line : py_splitlines(s.str())) lines.push_back(Value::string(std::move(line)));
       r.charge(static_cast<int64_t>(lines.size()));
       return Value::array(std::move(lines));
     }},
    {"upper", [](Renderer& r, const Value& s, CallArgs& a) { Args(a, "upper", {}); return r.make_string(py_upper(s.str())); }},
    {"lower", [](Renderer& r, const Value& s, CallArgs& a) { Args(a, "lower", {}); return r.make_string(py_lower(s.str())); }},
    {"title", [](Renderer& r, const Value& s, CallArgs& a) { Args(a, "title", {}); return r.make_string(py_title(s.str())); }},
    {"capitalize",
     [](Renderer& r, const Value& s, CallArgs& a) {
       Args(a, "capitalize", {});
       return r.make_string(py_capitalize(s.str()));
     }},
    {"replace",
     [](Renderer& r, const Value& s, CallArgs& a) {
       Args args(a, "replace", {"old", "new", "count"});
       TESSERA_CHECK(args.get(0) && args.get(1), kInvalidArgument, "replace() takes at least 2 arguments");
       return Value::string(
           py_replace(s.str(), args.string(0, ""), args.string(1, ""), args.integer(2, -1), r.budget()));
     }},
    {"format", [](Renderer& r, const Value& s, CallArgs& a) { return r.make_string(str_format(r, s.str(), a)); }},
    {"find",
     [](Renderer&, const Value& s, CallArgs& a) {
       Args args(a, "find", {"sub"});
       const size_t pos = s.str().find(args.string(0, ""));
       return Value::integer(pos == std::string::npos ? -1 : char_index(s.str(), pos));
     }},
    {"rfind",
     [](Renderer&, const Value& s, CallArgs& a) {
       Args args(a, "rfind", {"sub"});
       const size_t pos = s.str().rfind(args.string(0, ""));
       return Value::integer(pos == std::string::npos ? -1 : char_index(s.str(), pos));
     }},
    {"count",
     [](Renderer&, const Value& s, CallArgs& a) {
       Args args(a, "count", {"sub"});
       const std::string sub = args.string(0, "");
       if (sub.empty()) return Value::integer(static_cast<int64_t>(utf8_length(s.str())) + 1);
       int64_t n = 0;
       for (size_t pos = s.str().find(sub); pos != std::string::npos; pos = s.str().find(sub, pos + sub.size())) ++n;
       return Value::integer(n);
     }},
    {"join",
     [](Renderer& r, const Value& s, CallArgs& a) {
       Args args(a, "join", {"iterable"});
       const std::vector<Value> items = iterate(args.value(0, Value()));
       r.charge(static_cast<int64_t>(items.size()));
       return join_strings(r, s.str(), items, true);
     }},
    {"isdigit",
     [](Renderer&, const Value& s, CallArgs&) {
       const std::string& x = s.str();
       return Value::boolean(!x.empty() && std::all_of(x.begin(), x.end(), [](char c) { return c >= '0' && c <= '9'; }));
     }},
    {"isalpha",
     [](Renderer&, const Value& s, CallArgs&) {
       const std::string& x = s.str();
       return Value::boolean(!x.empty() && std::all_of(x.begin(), x.end(), is_ascii_alpha));
     }},
    {"isspace",
     [](Renderer&, const Value& s, CallArgs&) {
       const std::string& x = s.str();
       return Value::boolean(!x.empty() && py_strip(x, nullptr, true, true).empty());
     }},
    {"islower",
     [](Renderer&, const Value& s, CallArgs&) {
       const std::string& x = s.str();
       return Value::boolean(std::any_of(x.begin(), x.end(), is_ascii_alpha) && py_lower(x) == x);
     }},
    {"isupper",
     [](Renderer&, const Value& s, CallArgs&) {
       const std::string& x = s.str();
       return Value::boolean(std::any_of(x.begin(), x.end(), is_ascii_alpha) && py_upper(x) == x);
     }},
};

// ---- list and dict methods --------------------------------------------------

const std::pair<std::string_view, Method> kListMethods[] = {
    {"append",
     [](Renderer& r, const Value& self, CallArgs& a) {
       Args args(a, "append", {"object"});
       TESSERA_CHECK(args.get(0), kInvalidArgument, "append() takes exactly one argument");
       TESSERA_CHECK(!self.is_tuple(), kInvalidArgument, "'tuple' object has no attribute 'append'");
       r.track_mutable(self);
       r.charge(1);
       self.arr().items.push_back(*args.get(0));
       return Value::none();
     }},
    {"index",
     [](Renderer& r, const Value& self, CallArgs& a) {
       Args args(a, "index", {"value"});
       const auto& items = self.arr().items;
       for (size_t i = 0; i < items.size(); ++i) {
         if (r.equal(items[i], args.value(0, Value()))) return Value::integer(static_cast<int64_t>(i));
       }
       fail(ErrorCode::kInvalidArgument, "value is not in list");
     }},
    {"count",
     [](Renderer& r, const Value& self, CallArgs& a) {
       Args args(a, "count", {"value"});
       int64_t n = 0;
       for (const auto& item : self.arr().items) n += r.equal(item, args.value(0, Value())) ? 1 : 0;
       return Value::integer(n);
     }},
};

const std::pair<std::string_view, Method> kDictMethods[] = {
    {"items",
     [](Renderer& r, const Value& self, CallArgs& a) {
       Args(a, "items", {});
       r.charge(static_cast<int64_t>(self.obj().entries.size()));
       return dict_items(self);
     }},
    {"keys",
     [](Renderer& r, const Value& self, CallArgs& a) {
       Args(a, "keys", {});
       r.charge(static_cast<int64_t>(self.obj().entries.size()));
       return Value::array(iterate(self));
     }},
    {"values",
     [](Renderer& r, const Value& self, CallArgs& a) {
       Args(a, "values", {});
       std::vector<Value> values;
       for (const auto& [k, v] : self.obj().entries) values.push_back(v);
       r.charge(static_cast<int64_t>(values.size()));
       return Value::array(std::move(values));
     }},
    {"get",
     [](Renderer&, const Value& self, CallArgs& a) {
       Args args(a, "get", {"key", "default"});
       const Value key = args.value(0, Value());
       const Value* v = is_hashable(key) ? self.obj().find(key) : nullptr;
       return v ? *v : args.value(1, Value::none());
     }},
};

template <size_t N>
Value bind(const std::pair<std::string_view, Method> (&table)[N], const Value& self, std::string_view name) {
  for (const auto& [method_name, fn] : table) {
    if (method_name == name) {
      Method m = fn;
      return Value::function(
          std::string(name), [m, self](Renderer& r, CallArgs& args) { return m(r, self, args); }, self);
    }
  }
  return Value();
}

}  // namespace

Value find_method(const Value& self, std::string_view name) {
  if (self.is_string()) return bind(kStrMethods, self, name);
  if (self.is_array()) return bind(kListMethods, self, name);
  if (self.is_dict()) return bind(kDictMethods, self, name);
  return Value();
}

// ---- globals ----------------------------------------------------------------

namespace {

// Jinja's sandbox refuses ranges longer than this (MAX_RANGE), as HF renders.
constexpr int64_t kMaxRange = 100000;

Value g_range(Renderer& r, CallArgs& a) {
  TESSERA_CHECK(a.named.empty(), kInvalidArgument, "range() takes no keyword arguments");
  TESSERA_CHECK(!a.positional.empty() && a.positional.size() <= 3, kInvalidArgument,
                "range() takes 1 to 3 arguments ({} given)", a.positional.size());
  for (const auto& v : a.positional) {
    TESSERA_CHECK(v.is_integral(), kInvalidArgument, "'{}' object cannot be interpreted as an integer",
                  v.type_name());
  }
  int64_t start = 0;
  int64_t stop = 0;
  int64_t step = 1;
  if (a.positional.size() == 1) {
    stop = a.positional[0].as_int();
  } else {
    start = a.positional[0].as_int();
    stop = a.positional[1].as_int();
    if (a.positional.size() == 3) step = a.positional[2].as_int();
  }
  TESSERA_CHECK(step != 0, kInvalidArgument, "range() arg 3 must not be zero");
  // Length without overflow: the count of start + k*step strictly before stop.
  const __int128 span = step > 0 ? static_cast<__int128>(stop) - start : static_cast<__int128>(start) - stop;
  const __int128 abs_step = step > 0 ? static_cast<__int128>(step) : -static_cast<__int128>(step);
  const __int128 n = span <= 0 ? 0 : (span + abs_step - 1) / abs_step;
  TESSERA_CHECK(n <= kMaxRange, kInvalidArgument, "range too big: {} items (the limit is {})",
                static_cast<long long>(n > INT64_MAX ? INT64_MAX : n), kMaxRange);
  r.charge(static_cast<int64_t>(n));
  std::vector<Value> items;
  items.reserve(static_cast<size_t>(n));
  for (int64_t k = 0; k < static_cast<int64_t>(n); ++k) items.push_back(Value::integer(start + k * step));
  return Value::array(std::move(items));
}

// dict(mapping, **kwargs) into `target`.
Value fill_mapping(Renderer& r, Value target, CallArgs& a, const char* name) {
  TESSERA_CHECK(a.positional.size() <= 1, kInvalidArgument, "{}() takes at most one positional argument", name);
  if (!a.positional.empty()) {
    const Value& src = a.positional[0];
    TESSERA_CHECK(src.is_dict(), kInvalidArgument, "{}() argument must be a dict, not '{}'", name, src.type_name());
    for (const auto& [k, v] : src.obj().entries) target.obj().set(k, v);
  }
  for (auto& [k, v] : a.named) target.obj().set(Value::string(k), std::move(v));
  r.charge(static_cast<int64_t>(target.obj().entries.size()));
  return target;
}

Value g_strftime_now(Renderer& r, CallArgs& a) {
  Args args(a, "strftime_now", {"format"});
  const std::string format = args.string(0, "");
  TESSERA_CHECK(format.size() <= 256, kInvalidArgument, "strftime_now() format longer than 256 bytes");
  const int64_t fixed = r.limits().fixed_time;
  const std::time_t now = fixed >= 0 ? static_cast<std::time_t>(fixed) : std::time(nullptr);
  std::tm local{};
  if (fixed >= 0) gmtime_r(&now, &local);
  else localtime_r(&now, &local);
  if (format.empty()) return Value::string("");
  char buf[4096];
  const size_t n = std::strftime(buf, sizeof buf, format.c_str(), &local);
  TESSERA_CHECK(n > 0, kInvalidArgument, "strftime_now() could not format '{}'", format);
  return r.make_string(std::string(buf, n));
}

}  // namespace

std::vector<std::pair<std::string, Value>> global_functions() {
  std::vector<std::pair<std::string, Value>> g;
  g.emplace_back("range", Value::function("range", g_range));
  g.emplace_back("namespace", Value::function("namespace", [](Renderer& r, CallArgs& a) {
                   Value ns = Value::namespace_object();
                   r.track_mutable(ns);
                   return fill_mapping(r, std::move(ns), a, "namespace");
                 }));
  g.emplace_back("dict", Value::function("dict", [](Renderer& r, CallArgs& a) {
                   return fill_mapping(r, Value::object(), a, "dict");
                 }));
  g.emplace_back("raise_exception", Value::function("raise_exception", [](Renderer& r, CallArgs& a) -> Value {
                   Args args(a, "raise_exception", {"message"});
                   const Value msg = args.value(0, Value::string("raise_exception() called"));
                   throw TemplateError(TemplateError::Kind::kRaised, {}, r.str(msg));
                 }));
  g.emplace_back("strftime_now", Value::function("strftime_now", g_strftime_now));
  return g;
}

}  // namespace tessera::server::jinja
