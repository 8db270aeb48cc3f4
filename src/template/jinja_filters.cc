// Jinja's built-in filters and tests (the subset chat templates use), with
// Jinja's defaults: sort/unique/min/max ignore case unless told otherwise,
// tojson is Hugging Face's json.dumps(ensure_ascii=False).
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <unordered_map>
#include <utility>

#include "core/error.h"
#include "template/jinja_builtins.h"
#include "template/jinja_eval.h"

namespace tessera::server::jinja {

namespace {

// ---- shared helpers ---------------------------------------------------------

std::string text_of(Renderer& r, const Value& v) { return v.is_string() ? v.str() : r.str(v); }

// Jinja's make_attrgetter: "a.b.0" looks up a, then b, then index 0.
Value lookup_path(Renderer& r, const Value& item, const std::string& path) {
  Value cur = item;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    cur = digits && part.size() < 18 ? r.get_item(cur, Value::integer(std::stoll(part)))
                                     : r.get_item(cur, Value::string(part));
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

// The value a sort/unique/min/max compares: the attribute if asked, lowered
// when case does not matter.
Value sort_key(Renderer& r, const Value& item, const Value* attribute, bool case_sensitive) {
  Value key = attribute && !attribute->is_none() ? lookup_path(r, item, r.str(*attribute)) : item;
  if (!case_sensitive && key.is_string()) return Value::string(py_lower(key.str()));
  return key;
}

std::vector<Value> sorted(Renderer& r, std::vector<Value> items, const Value* attribute, bool case_sensitive,
                          bool reverse) {
  std::vector<std::pair<Value, Value>> keyed;
  keyed.reserve(items.size());
  for (auto& item : items) keyed.emplace_back(sort_key(r, item, attribute, case_sensitive), std::move(item));
  r.charge(static_cast<int64_t>(keyed.size()) * 2);
  // Python's sort is stable, and reverse=True keeps equal items in order.
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    return reverse ? r.less(b.first, a.first) : r.less(a.first, b.first);
  });
  std::vector<Value> out;
  out.reserve(keyed.size());
  for (auto& [k, v] : keyed) out.push_back(std::move(v));
  return out;
}

Value make_list(Renderer& r, std::vector<Value> items) {
  r.charge(static_cast<int64_t>(items.size()));
  return Value::array(std::move(items));
}

// ---- filters ----------------------------------------------------------------

Value f_abs(Renderer&, const Value& v, CallArgs& a) {
  Args(a, "abs", {});
  TESSERA_CHECK(v.is_number(), kInvalidArgument, "bad operand type for abs(): '{}'", v.type_name());
  if (v.is_float()) return Value::number(std::fabs(v.as_double()));
  TESSERA_CHECK(v.as_int() != INT64_MIN, kInvalidArgument, "integer overflow");
  return Value::integer(std::llabs(v.as_int()));
}

// Attribute only, never an item: a dict's keys are not its attributes.
Value f_attr(Renderer& r, const Value& v, CallArgs& a) {
  Args args(a, "attr", {"name"});
  const std::string name = args.string(0, "");
  if (v.is_dict()) {
    Value method = find_method(v, name);
    return method.is_undefined() ? Value::undefined(fmt::format("'dict object' has no attribute '{}'", name)) : method;
  }
  return r.get_attr(v, name);
}

Value f_batch(Renderer& r, const Value& v, CallArgs& a) {
  Args args(a, "batch", {"linecount", "fill_with"});
  const int64_t n = args.integer(0, 0);
  TESSERA_CHECK(n > 0, kInvalidArgument, "batch() needs a positive line count");
  std::vector<Value> rows;
  std::vector<Value> row;
  for (auto& item : iterate(v)) {
    row.push_back(std::move(item));
    if (static_cast<int64_t>(row.size()) == n) rows.push_back(Value::array(std::exchange(row, {})));
  }
  if (!row.empty()) {
    if (const Value* fill = args.get(1); fill && !fill->is_none()) {
      while (static_cast<int64_t>(row.size()) < n) row.push_back(*fill);
    }
    rows.push_back(Value::array(std::move(row)));
  }
  return make_list(r, std::move(rows));
}

Value f_capitalize(Renderer& r, const Value& v, CallArgs& a) {
  Args(a, "capitalize", {});
  return r.make_string(py_capitalize(text_of(r, v)));
}

Value f_center(Renderer& r, const Value& v, CallArgs& a) {
  Args args(a, "center", {"width"});
  const std::string s = text_of(r, v);
  const int64_t width = std::min<int64_t>(args.integer(0, 80), static_cast<int64_t>(r.budget().max_string_bytes));
  const auto len = static_cast<int64_t>(utf8_length(s));
  if (width <= len) return Value::string(s);
  // CPython's centring: the extra space goes left when the margin is odd and the width is odd.
  const int64_t margin = width - len;
  const int64_t left = margin / 2 + (margin & width & 1);
  return r.make_string(std::string(static_cast<size_t>(left), ' ') + s +
                       std::string(static_cast<size_t>(margin - left), ' '));
}

Value f_length(Renderer&, const Value& v, CallArgs& a) {
  Args(a, "length", {});
  return Value::integer(py_len(v));
}

Value f_default(Renderer&, const Value& v, CallArgs& a) {
  Args args(a, "default", {"default_value", "boolean"});
  if (v.is_undefined() || (args.flag(1, false) && !v.truthy())) return args.value(0, Value::string(""));
  return v;
}

Value f_dictsort(Renderer& r, const Value& v, CallArgs& a) {
  Args args(a, "dictsort", {"case_sensitive", "by", "reverse"});
  TESSERA_CHECK(v.is_dict(), kInvalidArgument, "dictsort() needs a dict, not '{}'", v.type_name());
  const std::string by = args.string(1, "key");
  TESSERA_CHECK(by == "key" || by == "value", kInvalidArgument, "dictsort(): 'by' must be 'key' or 'value'");
  std::vector<Value> pairs = dict_items(v).arr().items;
  const Value index = Value::string(by == "key" ? "0" : "1");
  return make_list(r, sorted(r, std::move(pairs), &index, args.flag(0, false), args.flag(2, false)));
}

Value f_escape(Renderer& r, const Value& v, CallArgs& a) {
  Args(a, "escape", {});
  std::string out;
  for (char c : text_of(r, v)) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return r.make_string(std::move(out));
}

Value f_first(Renderer&, const Value& v, CallArgs& a) {
  Args(a, "first", {});
  if (v.is_array()) {
    return v.arr().items.empty() ? Value::undefined("No first item, sequence was empty.") : v.arr().items.front();
  }
  std::vector<Value> items = iterate(v);
  return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
}

Value f_last(Renderer&, const Value& v, CallArgs& a) {
  Args(a, "last", {});
  if (v.is_array()) {
    return v.arr().items.empty() ? Value::undefined("No last item, sequence was empty.") : v.arr().items.back();
  }
  std::vector<Value> items = iterate(v);
  return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
}

// Python's float(str): surrounding whitespace, underscores between digits,
// inf/nan; no hex.
bool parse_float(std::string s, double& out) {
  s = py_strip(s, nullptr, true, true);
  std::string clean;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_' && i > 0 && i + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[i - 1])) &&
        std::isdigit(static_cast<unsigned char>(s[i + 1]))) {
      continue;
    }
    clean += s[i];
  }
  const std::string lower = py_lower(clean);
  if (clean.empty() || lower.find('x') != std::string::npos || lower.find('(') != std::string::npos) return false;
  char* end = nullptr;
  out = std::strtod(clean.c_str(), &end);
  return end == clean.c_str() + clean.size();
}

Value f_float(Renderer&, const Value& v, CallArgs& a) {
  Args args(a, "float", {"default"});
  if (v.is_number()) return Value::number(v.as_double());
  double d = 0;
  if (v.is_string() && parse_float(v.str(), d)) return Value::number(d);
  return args.value(0, Value::number(0.0));
}

Value f_int(Renderer&, const Value& v, CallArgs& a) {
  Args args(a, "int", {"default", "base"});
  const int64_t base = args.integer(1, 10);
  TESSERA_CHECK(base >= 2 && base <= 36, kInvalidArgument, "int() base must be >= 2 and <= 36");
  if (v.is_integral()) return Value::integer(v.as_int());
  if (v.is_float() && std::isfinite(v.as_double()) && std::fabs(v.as_double()) < 9.2e18) {
    return Value::integer(static_cast<int64_t>(v.as_double()));
  }
  if (v.is_string()) {
    std::string s = py_strip(v.str(), nullptr, true, true);
    std::string digits;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '_' && i > 0 && i + 1 < s.size() && s[i - 1] != '_' && s[i + 1] != '_') continue;
      digits += s[i];
    }
    if (!digits.empty() && digits[0] != '_') {
      errno = 0;
      char* end = nullptr;
      const long long n = std::strtoll(digits.c_str(), &end, static_cast<int>(base));
      if (errno == 0 && end == digits.c_str() + digits.size() && !std::isspace(static_cast<unsigned char>(digits[0]))) {
        return Value::integer(n);
      }
    }
    double d = 0;
    if (parse_float(v.str(), d) && std::isfinite(d) && std::fabs(d) < 9.2e18) {
      return Value::integer(static_cast<int64_t>(d));
    }
  }
  return args.value(0, Value::integer(0));
}

Value f_format(Renderer& r, const Value& v, CallArgs& a) {
  TESSERA_CHECK(a.positional.empty() || a.named.empty(), kInvalidArgument,
                "format() takes positional or keyword arguments, not both");
  Value args;
  if (!a.named.empty()) {
    args = Value::object();
    for (auto& [k, val] : a.named) args.obj().set(Value::string(k), val);
  } else {
    args = Value::array(a.positional, true);
  }
  return r.make_string(percent_format(text_of(r, v), args, r.budget()));
}

Value f_indent(Renderer& r, const Value& v, CallArgs& a) {
  Args args(a, "indent", {"width", "first", "blank"});
  std::string indentation;
  const Value width = args.value(0, Value::integer(4));
  if (width.is_string()) {
    indentation = width.str();
  } else {
    const int64_t n = args.integer(0, 4);
    TESSERA_CHECK(n <= 1024, kInvalidArgument, "indent() width too large");
    indentation.assign(static_cast<size_t>(std::max<int64_t>(n, 0)), ' ');
  }
  const bool first = args.flag(1, false);
  const bool blank = args.flag(2, false);
  // Jinja appends a newline first so that splitlines() keeps a trailing blank line.
  const std::vector<std::string> lines = py_splitlines(text_of(r, v) + "\n");
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) {
      out += '\n';
      if (blank || !lines[i].empty()) out += indentation;
    }
    out += lines[i];
    r.budget().check_size(out.size());
  }
  if (first) out = indentation + out;
  return r.make_string(std::move(out));
}

Value f_items(Renderer& r, const Value& v, CallArgs& a) {
  Args(a, "items", {});
  if (v.is_undefined()) return Value::array();
  TESSERA_CHECK(v.is_dict(), kInvalidArgument, "Can only get item pairs from a mapping.");
  r.charge(static_cast<int64_t>(v.obj().entries.size()));
  return dict_items(v);
}

Value f_join(Renderer& r, const Value& v, CallArgs& a) {
  Args args(a, "join", {"d", "attribute"});
  const std::string sep = args.string(0, "");
  const Value* attribute = args.get(1);
  std::vector<Value> items = iterate(v);
  r.charge(static_cast<int64_t>(items.size()));
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += sep;
    append_str(out, attribute && !attribute->is_none() ? lookup_path(r, items[i], r.str(*attribute)) : items[i],
               r.budget());
    r.budget().check_size(out.size());
  }
  return r.make_string(std::move(out));
}

Value f_list(Renderer& r, const Value& v, CallArgs& a) {
  Args(a, "list", {});
  return make_list(r, iterate(v));
}

Value f_lower(Renderer& r, const Value& v, CallArgs& a) {
  Args(a, "lower", {});
  return r.make_string(py_lower(text_of(r, v)));
}

Value f_upper(Renderer& r, const Value& v, CallArgs& a) {
  Args(a, "upper", {});
  return r.make_string(py_upper(text_of(r, v)));
}

// Jinja's title: each word after -, whitespace or an opening bracket starts
// upper case, the rest is lowered.
Value f_title(Renderer& r, const Value& v, CallArgs& a) {
  Args(a, "title", {});
  std::string s = text_of(r, v);
  bool word_start = true;
  for (char& c : s) {
    if (is_py_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<') {
      word_start = true;
      continue;
    }
    if (word_start) {
      c = py_upper(std::string(1, c))[0];
    } else {
      c = py_lower(std::string(1, c))[0];
    }
    word_start = false;
  }
  return r.make_string(std::move(s));
}

Value f_trim(Renderer& r, const Value& v, CallArgs& a) {
  Args args(a, "trim", {"chars"});
  return r.make_string(py_strip(text_of(r, v), args.get(0), true, true));
}

Value f_replace(Renderer& r, const Value& v, CallArgs& a) {
  Args args(a, "replace", {"old", "new", "count"});
  return r.make_string(
      py_replace(text_of(r, v), args.string(0, ""), args.string(1, ""), args.integer(2, -1), r.budget()));
}

Value f_reverse(Renderer& r, const Value& v, CallArgs& a) {
  Args(a, "reverse", {});
  std::vector<Value> items = iterate(v);
  std::reverse(items.begin(), items.end());
  if (v.is_string()) {
    std::string out;
    for (const auto& c : items) out += c.str();
    return Value::string(std::move(out));
  }
  return make_list(r, std::move(items));
}

Value f_round(Renderer&, const Value& v, CallArgs& a) {
  Args args(a, "round", {"precision", "method"});
  const int64_t precision = args.integer(0, 0);
  const std::string method = args.string(1, "common");
  TESSERA_CHECK(method == "common" || method == "ceil" || method == "floor", kInvalidArgument,
                "round(): method must be common, ceil or floor");
  TESSERA_CHECK(v.is_number(), kInvalidArgument, "type {} doesn't define __round__ method", v.type_name());
  TESSERA_CHECK(precision >= -300 && precision <= 300, kInvalidArgument, "round(): precision out of range");
  if (method == "common" && v.is_integral()) return Value::integer(v.as_int());
  const double x = v.as_double();
  const double scale = std::pow(10.0, static_cast<double>(precision));
  if (method == "ceil") return Value::number(std::ceil(x * scale) / scale);
  if (method == "floor") return Value::number(std::floor(x * scale) / scale);
  if (!std::isfinite(x)) return Value::number(x);
  if (precision >= 0) {
    // Python rounds the exact binary value half-to-even, as printf does.
    char buf[1024];  // fits 309 integer digits, sign, point and 300 decimals
    std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(precision), x);
    return Value::number(std::strtod(buf, nullptr));
  }
  return Value::number(std::nearbyint(x * scale) / scale);
}

Value f_safe(Renderer&, const Value& v, CallArgs& a) {
  Args(a, "safe", {});
  return v;
}

Value f_sort(Renderer& r, const Value& v, CallArgs& a) {
  Args args(a, "sort", {"reverse", "case_sensitive", "attribute"});
  return make_list(r, sorted(r, iterate(v), args.get(2), args.flag(1, false), args.flag(0, false)));
}

Value f_string(Renderer& r, const Value& v, CallArgs& a) {
  Args(a, "string", {});
  return v.is_string() ? v : r.make_string(r.str(v));
}

Value f_sum(Renderer& r, const Value& v, CallArgs& a) {
  Args args(a, "sum", {"attribute", "start"});
  Value total = args.value(1, Value::integer(0));
  const Value* attribute = args.get(0);
  for (const auto& item : iterate(v)) {
    r.charge(1);
    total = binary_op(BinOp::kAdd, total,
                      attribute && !attribute->is_none() ? lookup_path(r, item, r.str(*attribute)) : item, r.budget());
  }
  return total;
}

// HF's override: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
Value f_tojson(Renderer& r, const Value& v, CallArgs& a) {
  Args args(a, "tojson", {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonOptions o;
  o.ensure_ascii = args.flag(0, false);
  if (const Value* indent = args.get(1); indent && !indent->is_none()) {
    o.has_indent = true;
    if (indent->is_string()) {
      o.indent = indent->str();
    } else {
      const int64_t n = args.integer(1, 0);
      TESSERA_CHECK(n <= 1024, kInvalidArgument, "tojson() indent too large");
      o.indent.assign(static_cast<size_t>(std::max<int64_t>(n, 0)), ' ');
    }
    o.item_separator = ",";
  }
  if (const Value* sep = args.get(2); sep && !sep->is_none()) {
    TESSERA_CHECK(sep->is_array() && sep->arr().items.size() == 2 && sep->arr().items[0].is_string() &&
                      sep->arr().items[1].is_string(),
                  kInvalidArgument, "tojson(): separators must be a pair of strings");
    o.item_separator = sep->arr().items[0].str();
    o.key_separator = sep->arr().items[1].str();
  }
  o.sort_keys = args.flag(3, false);
  return r.make_string(to_json(v, o, r.budget()));
}

Value f_unique(Renderer& r, const Value& v, CallArgs& a) {
  Args args(a, "unique", {"case_sensitive", "attribute"});
  const bool case_sensitive = args.flag(0, false);
  std::vector<Value> out;
  std::vector<Value> seen;
  for (const auto& item : iterate(v)) {
    const Value key = sort_key(r, item, args.get(1), case_sensitive);
    bool dup = false;
    for (const auto& s : seen) {
      if (r.equal(s, key)) {
        dup = true;
        break;
      }
    }
    if (!dup) {
      seen.push_back(key);
      out.push_back(item);
    }
  }
  return make_list(r, std::move(out));
}

Value min_max(Renderer& r, const Value& v, CallArgs& a, bool want_max, const char* name) {
  Args args(a, name, {"case_sensitive", "attribute"});
  const std::vector<Value> items = iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  const bool case_sensitive = args.flag(0, false);
  size_t best = 0;
  Value best_key = sort_key(r, items[0], args.get(1), case_sensitive);
  for (size_t i = 1; i < items.size(); ++i) {
    Value key = sort_key(r, items[i], args.get(1), case_sensitive);
    if (want_max ? r.less(best_key, key) : r.less(key, best_key)) {
      best = i;
      best_key = std::move(key);
    }
  }
  return items[best];
}

Value f_max(Renderer& r, const Value& v, CallArgs& a) { return min_max(r, v, a, true, "max"); }
Value f_min(Renderer& r, const Value& v, CallArgs& a) { return min_max(r, v, a, false, "min"); }

Value f_map(Renderer& r, const Value& v, CallArgs& a) {
  const std::vector<Value> items = iterate(v);
  std::vector<Value> out;
  out.reserve(items.size());
  const bool by_attribute = a.positional.empty() && !a.named.empty() && a.named[0].first == "attribute";
  if (by_attribute) {
    Args args(a, "map", {"attribute", "default"});
    const std::string path = r.str(args.value(0, Value()));
    for (const auto& item : items) {
      Value x = lookup_path(r, item, path);
      if (x.is_undefined() && args.get(1)) x = *args.get(1);
      out.push_back(std::move(x));
    }
    return make_list(r, std::move(out));
  }
  TESSERA_CHECK(!a.positional.empty() && a.positional[0].is_string(), kInvalidArgument,
                "map() needs a filter name or attribute=");
  const std::string name = a.positional[0].str();
  const FilterFn filter = find_filter(name);
  TESSERA_CHECK(filter, kInvalidArgument, "no filter named '{}'", name);
  for (const auto& item : items) {
    CallArgs call;
    call.positional.assign(a.positional.begin() + 1, a.positional.end());
    call.named = a.named;
    out.push_back(filter(r, item, call));
  }
  return make_list(r, std::move(out));
}

// select / reject / selectattr / rejectattr.
Value select_items(Renderer& r, const Value& v, CallArgs& a, bool by_attribute, bool keep_matching) {
  TESSERA_CHECK(a.named.empty(), kInvalidArgument, "select filters take positional arguments only");
  size_t next = 0;
  std::string attribute;
  if (by_attribute) {
    TESSERA_CHECK(!a.positional.empty(), kInvalidArgument, "selectattr/rejectattr need an attribute name");
    attribute = r.str(a.positional[next++]);
  }
  TestFn test = nullptr;
  CallArgs test_args;
  if (next < a.positional.size()) {
    const std::string name = r.str(a.positional[next++]);
    test = find_test(name);
    TESSERA_CHECK(test, kInvalidArgument, "no test named '{}'", name);
    test_args.positional.assign(a.positional.begin() + static_cast<std::ptrdiff_t>(next), a.positional.end());
  }
  std::vector<Value> out;
  for (const auto& item : iterate(v)) {
    r.charge(1);
    const Value subject = by_attribute ? lookup_path(r, item, attribute) : item;
    CallArgs call = test_args;
    const bool ok = test ? test(r, subject, call) : subject.truthy();
    if (ok == keep_matching) out.push_back(item);
  }
  return make_list(r, std::move(out));
}

Value f_select(Renderer& r, const Value& v, CallArgs& a) { return select_items(r, v, a, false, true); }
Value f_reject(Renderer& r, const Value& v, CallArgs& a) { return select_items(r, v, a, false, false); }
Value f_selectattr(Renderer& r, const Value& v, CallArgs& a) { return select_items(r, v, a, true, true); }
Value f_rejectattr(Renderer& r, const Value& v, CallArgs& a) { return select_items(r, v, a, true, false); }

Value f_wordcount(Renderer& r, const Value& v, CallArgs& a) {
  Args(a, "wordcount", {});
  const std::string s = text_of(r, v);
  int64_t n = 0;
  bool in_word = false;
  for (char c : s) {
    const bool word = std::isalnum(static_cast<unsigned char>(c)) || c == '_' || static_cast<unsigned char>(c) >= 0x80;
    if (word && !in_word) ++n;
    in_word = word;
  }
  return Value::integer(n);
}

const std::unordered_map<std::string_view, FilterFn>& filters() {
  static const std::unordered_map<std::string_view, FilterFn> table = {
      {"abs", f_abs},
      {"attr", f_attr},
      {"batch", f_batch},
      {"capitalize", f_capitalize},
      {"center", f_center},
      {"count", f_length},
      {"d", f_default},
      {"default", f_default},
      {"dictsort", f_dictsort},
      {"e", f_escape},
      {"escape", f_escape},
      {"first", f_first},
      {"float", f_float},
      {"format", f_format},
      {"indent", f_indent},
      {"int", f_int},
      {"items", f_items},
      {"join", f_join},
      {"last", f_last},
      {"length", f_length},
      {"list", f_list},
      {"lower", f_lower},
      {"map", f_map},
      {"max", f_max},
      {"min", f_min},
      {"reject", f_reject},
      {"rejectattr", f_rejectattr},
      {"replace", f_replace},
      {"reverse", f_reverse},
      {"round", f_round},
      {"safe", f_safe},
      {"select", f_select},
      {"selectattr", f_selectattr},
      {"sort", f_sort},
      {"string", f_string},
      {"sum", f_sum},
      {"title", f_title},
      {"tojson", f_tojson},
      {"trim", f_trim},
      {"unique", f_unique},
      {"upper", f_upper},
      {"wordcount", f_wordcount},
  };
  return table;
}

// ---- tests ------------------------------------------------------------------

const Value& test_arg(const CallArgs& a, const char* name) {
  TESSERA_CHECK(a.positional.size() == 1 && a.named.empty(), kInvalidArgument, "test '{}' takes one argument", name);
  return a.positional[0];
}

void no_args(const CallArgs& a, const char* name) {
  TESSERA_CHECK(a.positional.empty() && a.named.empty(), kInvalidArgument, "test '{}' takes no arguments", name);
}

bool t_divisibleby(Renderer&, const Value& v, CallArgs& a) {
  const Value& n = test_arg(a, "divisibleby");
  TESSERA_CHECK(v.is_number() && n.is_number(), kInvalidArgument, "divisibleby needs numbers");
  if (v.is_integral() && n.is_integral()) {
    TESSERA_CHECK(n.as_int() != 0, kInvalidArgument, "integer division or modulo by zero");
    return n.as_int() == -1 || v.as_int() % n.as_int() == 0;
  }
  TESSERA_CHECK(n.as_double() != 0.0, kInvalidArgument, "float modulo by zero");
  return std::fmod(v.as_double(), n.as_double()) == 0.0;
}

bool odd_even(const Value& v, bool odd) {
  TESSERA_CHECK(v.is_integral(), kInvalidArgument, "odd/even need an integer, not '{}'", v.type_name());
  return (v.as_int() % 2 != 0) == odd;
}

bool is_lower_text(const Value& v, bool upper) {
  if (!v.is_string()) return false;
  const std::string& s = v.str();
  return upper ? py_upper(s) == s : py_lower(s) == s;
}

const std::unordered_map<std::string_view, TestFn>& tests() {
  static const std::unordered_map<std::string_view, TestFn> table = {
      {"defined", [](Renderer&, const Value& v, CallArgs& a) { no_args(a, "defined"); return !v.is_undefined(); }},
      {"undefined", [](Renderer&, const Value& v, CallArgs& a) { no_args(a, "undefined"); return v.is_undefined(); }},
      {"none", [](Renderer&, const Value& v, CallArgs& a) { no_args(a, "none"); return v.is_none(); }},
      {"boolean", [](Renderer&, const Value& v, CallArgs& a) { no_args(a, "boolean"); return v.is_bool(); }},
      {"true", [](Renderer&, const Value& v, CallArgs& a) { no_args(a, "true"); return v.is_bool() && v.as_bool(); }},
      {"false", [](Renderer&, const Value& v, CallArgs& a) { no_args(a, "false"); return v.is_bool() && !v.as_bool(); }},
      {"integer", [](Renderer&, const Value& v, CallArgs& a) { no_args(a, "integer"); return v.is_int(); }},
      {"float", [](Renderer&, const Value& v, CallArgs& a) { no_args(a, "float"); return v.is_float(); }},
      {"number", [](Renderer&, const Value& v, CallArgs& a) { no_args(a, "number"); return v.is_number(); }},
      {"string", [](Renderer&, const Value& v, CallArgs& a) { no_args(a, "string"); return v.is_string(); }},
      {"mapping", [](Renderer&, const Value& v, CallArgs& a) { no_args(a, "mapping"); return v.is_dict(); }},
      {"iterable",
       [](Renderer&, const Value& v, CallArgs& a) {
         no_args(a, "iterable");
         return v.is_undefined() || v.is_string() || v.is_array() || v.is_dict();
       }},
      {"sequence",
       [](Renderer&, const Value& v, CallArgs& a) {
         no_args(a, "sequence");
         return v.is_undefined() || v.is_string() || v.is_array() || v.is_dict();
       }},
      {"callable", [](Renderer&, const Value& v, CallArgs& a) { no_args(a, "callable"); return v.is_function(); }},
      {"odd", [](Renderer&, const Value& v, CallArgs& a) { no_args(a, "odd"); return odd_even(v, true); }},
      {"even", [](Renderer&, const Value& v, CallArgs& a) { no_args(a, "even"); return odd_even(v, false); }},
      {"divisibleby", t_divisibleby},
      {"lower", [](Renderer&, const Value& v, CallArgs& a) { no_args(a, "lower"); return is_lower_text(v, false); }},
      {"upper", [](Renderer&, const Value& v, CallArgs& a) { no_args(a, "upper"); return is_lower_text(v, true); }},
      {"eq", [](Renderer& r, const Value& v, CallArgs& a) { return r.equal(v, test_arg(a, "eq")); }},
      {"equalto", [](Renderer& r, const Value& v, CallArgs& a) { return r.equal(v, test_arg(a, "equalto")); }},
      {"==", [](Renderer& r, const Value& v, CallArgs& a) { return r.equal(v, test_arg(a, "==")); }},
      {"ne", [](Renderer& r, const Value& v, CallArgs& a) { return !r.equal(v, test_arg(a, "ne")); }},
      {"!=", [](Renderer& r, const Value& v, CallArgs& a) { return !r.equal(v, test_arg(a, "!=")); }},
      {"lt", [](Renderer& r, const Value& v, CallArgs& a) { return r.less(v, test_arg(a, "lt")); }},
      {"lessthan", [](Renderer& r, const Value& v, CallArgs& a) { return r.less(v, test_arg(a, "lessthan")); }},
      {"<", [](Renderer& r, const Value& v, CallArgs& a) { return r.less(v, test_arg(a, "<")); }},
      {"le", [](Renderer& r, const Value& v, CallArgs& a) { return !r.less(test_arg(a, "le"), v); }},
      {"<=", [](Renderer& r, const Value& v, CallArgs& a) { return !r.less(test_arg(a, "<="), v); }},
      {"gt", [](Renderer& r, const Value& v, CallArgs& a) { return r.less(test_arg(a, "gt"), v); }},
      {"greaterthan", [](Renderer& r, const Value& v, CallArgs& a) { return r.less(test_arg(a, "greaterthan"), v); }},
      {">", [](Renderer& r, const Value& v, CallArgs& a) { return r.less(test_arg(a, ">"), v); }},
      {"ge", [](Renderer& r, const Value& v, CallArgs& a) { return !r.less(v, test_arg(a, "ge")); }},
      {">=", [](Renderer& r, const Value& v, CallArgs& a) { return !r.less(v, test_arg(a, ">=")); }},
      {"in", [](Renderer& r, const Value& v, CallArgs& a) { return contains(test_arg(a, "in"), v, r.budget()); }},
      {"sameas",
       [](Renderer& r, const Value& v, CallArgs& a) {
         // containers by identity; scalars (None, True, ints, strings) by value,
         // as CPython's singletons and interned literals mostly behave
         const Value& other = test_arg(a, "sameas");
         const auto by_ref = [](const Value& x) { return x.is_array() || x.is_object() || x.is_function(); };
         if (by_ref(v) || by_ref(other)) return v.identity() == other.identity();
         return v.kind() == other.kind() && r.equal(v, other);
       }},
      {"filter",
       [](Renderer&, const Value& v, CallArgs& a) {
         no_args(a, "filter");
         return v.is_string() && find_filter(v.str()) != nullptr;
       }},
      {"test",
       [](Renderer&, const Value& v, CallArgs& a) {
         no_args(a, "test");
         return v.is_string() && find_test(v.str()) != nullptr;
       }},
      {"escaped", [](Renderer&, const Value&, CallArgs& a) { no_args(a, "escaped"); return false; }},
  };
  return table;
}

}  // namespace

FilterFn find_filter(std::string_view name) {
  const auto& t = filters();
  const auto it = t.find(name);
  return it == t.end() ? nullptr : it->second;
}

TestFn find_test(std::string_view name) {
  const auto& t = tests();
  const auto it = t.find(name);
  return it == t.end() ? nullptr : it->second;
}

}  // namespace tessera::server::jinja
