// Built-in filters, tests, methods (of str, list and dict) and global
// functions of the Jinja subset, and the helpers they share.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "template/jinja_ast.h"
#include "template/jinja_value.h"

namespace tessera::server::jinja {

// nullptr when there is no such filter / test.
FilterFn find_filter(std::string_view name);
TestFn find_test(std::string_view name);

// The bound method `name` of `self` (str, list or dict), or nullopt-like
// undefined when `self` has none.
Value find_method(const Value& self, std::string_view name);

// range, namespace, dict, raise_exception, strftime_now.
std::vector<std::pair<std::string, Value>> global_functions();

// Binds call arguments to a Python-style signature: positional first, then
// by name. Throws Error for extra positional or unknown keyword arguments.
class Args {
 public:
  Args(const CallArgs& args, std::string_view function, std::initializer_list<std::string_view> params);
  // The argument for parameter `i`, or nullptr when it was not passed.
  const Value* get(size_t i) const { return bound_[i]; }
  Value value(size_t i, Value fallback) const;
  bool flag(size_t i, bool fallback) const;
  int64_t integer(size_t i, int64_t fallback) const;
  std::string string(size_t i, std::string fallback) const;

 private:
  std::string function_;
  std::vector<std::string_view> params_;
  std::vector<const Value*> bound_;
};

// JSON as Python's json.dumps writes it (HF's tojson: ensure_ascii=False by
// default). `indent` < 0 means none; `indent_text` overrides spaces.
struct JsonOptions {
  bool ensure_ascii = false;
  bool has_indent = false;
  std::string indent;
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
};
std::string to_json(const Value& v, const JsonOptions& options, Budget& budget);

// Python's printf-style `format % args` (%s %r %d %i %f %e %g %x %o %c %%).
std::string percent_format(const std::string& format, const Value& args, Budget& budget);

// Python string helpers shared by filters and methods.
bool is_py_space(char c);
std::string py_strip(std::string_view s, const Value* chars, bool left, bool right);
std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);
std::string py_title(std::string_view s);       // str.title()
std::string py_capitalize(std::string_view s);  // str.capitalize()
std::string py_replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count,
                       Budget& budget);
std::vector<std::string> py_splitlines(std::string_view s);
// Python's iter(): items of a list/tuple, keys of a dict, characters of a
// string, nothing for undefined. Throws Error for other types.
std::vector<Value> iterate(const Value& v);
// dict.items(): a list of (key, value) tuples.
Value dict_items(const Value& dict);
// Python's len() (code points for strings).
int64_t py_len(const Value& v);

}  // namespace tessera::server::jinja
