// The value type of the Jinja subset (chat templates): Python's data model cut
// down to what templates use. Strings are immutable and shared; lists, tuples,
// dicts and namespaces are shared by reference, as in Python.
//
// Values come partly from users (chat messages), so nothing here may recurse
// without a bound: every walk (str(), ==, tojson) stops at kMaxValueDepth with
// an Error, and containers free their children iteratively, so a list nested
// a million deep is destroyed without a deep call stack. Only namespaces,
// appended-to lists and loop objects are ever mutated, so only they can close
// a reference cycle; the Renderer empties them when a render ends.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace tessera::server::jinja {

class Renderer;
class Value;
struct ArrayData;
struct ObjectData;
struct FunctionData;

// Deepest nesting of lists/dicts that str(), ==, tojson and friends walk.
constexpr int kMaxValueDepth = 256;

// The work a render may still do. Every loop iteration, expression node and
// element a filter visits costs a step; every string a render builds is
// bounded by max_string_bytes. Walks over values charge it too, so a value
// that shares sub-lists (a DAG printed as an exponentially large tree) is
// stopped as well. Exhaustion throws Error(kInvalidArgument).
struct Budget {
  int64_t steps_left = 0;
  int64_t max_steps = 0;
  size_t max_string_bytes = 0;

  void charge(int64_t n) {
    steps_left -= n;
    if (steps_left < 0) exhausted();
  }
  // Throws when a string of `n` bytes would exceed max_string_bytes.
  void check_size(size_t n) const {
    if (n > max_string_bytes) too_long(n);
  }

 private:
  [[noreturn]] void exhausted() const;
  [[noreturn]] void too_long(size_t n) const;
};

// Arguments of a call, after evaluation.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> named;
};

using NativeFunction = std::function<Value(Renderer&, CallArgs&)>;

class Value {
 public:
  enum class Kind : uint8_t { kUndefined, kNone, kBool, kInt, kFloat, kString, kArray, kObject, kFunction };

  Value() = default;  // undefined, no hint
  static Value undefined(std::string hint);
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value number(double d);
  static Value string(std::string s);
  static Value string(std::shared_ptr<const std::string> s);
  static Value array(std::vector<Value> items = {}, bool is_tuple = false);
  static Value object();
  static Value namespace_object();
  // `bound_self` is the receiver of a bound method (kept visible so that the
  // reachability walk can see through it).
  static Value function(std::string name, NativeFunction fn, Value bound_self = Value());

  Kind kind() const { return static_cast<Kind>(v_.index()); }
  bool is_undefined() const { return kind() == Kind::kUndefined; }
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_bool() const { return kind() == Kind::kBool; }
  bool is_int() const { return kind() == Kind::kInt; }
  bool is_float() const { return kind() == Kind::kFloat; }
  // Python's numbers.Number: bool counts, as in Jinja's `number` test.
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  // int or bool: usable as an integer index.
  bool is_integral() const { return is_int() || is_bool(); }
  bool is_string() const { return kind() == Kind::kString; }
  bool is_array() const { return kind() == Kind::kArray; }
  bool is_object() const { return kind() == Kind::kObject; }
  bool is_function() const { return kind() == Kind::kFunction; }
  bool is_tuple() const;
  bool is_namespace() const;
  bool is_dict() const { return is_object() && !is_namespace(); }

  bool as_bool() const { return std::get<bool>(v_); }
  // int or bool
  int64_t as_int() const;
  // int, bool or float
  double as_double() const;
  const std::string& str() const { return *std::get<StrPtr>(v_); }
  const std::shared_ptr<const std::string>& str_ptr() const { return std::get<StrPtr>(v_); }
  ArrayData& arr() const { return *std::get<ArrPtr>(v_); }
  ObjectData& obj() const { return *std::get<ObjPtr>(v_); }
  FunctionData& fn() const { return *std::get<FnPtr>(v_); }
  // Identity of a shared container (nullptr for scalars): Python's `is`.
  const void* identity() const;
  // Why this value is undefined ("'foo' is undefined"), for the error raised
  // when it is used as an object.
  std::string undefined_message() const;

  bool truthy() const;
  // Python's type name for error messages: 'str', 'int', 'list', 'dict', ...
  std::string type_name() const;

 private:
  struct Undef {
    std::shared_ptr<const std::string> hint;
  };
  struct NoneT {};
  using StrPtr = std::shared_ptr<const std::string>;
  using ArrPtr = std::shared_ptr<ArrayData>;
  using ObjPtr = std::shared_ptr<ObjectData>;
  using FnPtr = std::shared_ptr<FunctionData>;
  friend void release_children(std::vector<Value>& pending);

  std::variant<Undef, NoneT, bool, int64_t, double, StrPtr, ArrPtr, ObjPtr, FnPtr> v_;
};

struct ArrayData {
  std::vector<Value> items;
  bool is_tuple = false;
  ~ArrayData();
};

// A dict (insertion-ordered, keys are scalars) or a namespace() object.
struct ObjectData {
  std::vector<std::pair<Value, Value>> entries;
  bool is_namespace = false;

  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  void set(Value key, Value value);
  ~ObjectData();
};

struct FunctionData {
  std::string name;
  NativeFunction fn;
  Value bound_self;
  ~FunctionData();
};

// Frees `pending` and everything only it owns without recursion.
void release_children(std::vector<Value>& pending);
// Empties a list, dict or namespace (freeing what only it owns without
// recursion). Breaks any reference cycle through `container`.
void clear_container(const Value& container);

// Python's str() and repr(). Throw Error past kMaxValueDepth or the budget.
std::string to_str(const Value& v, Budget& budget);
std::string to_repr(const Value& v, Budget& budget);
void append_str(std::string& out, const Value& v, Budget& budget);
// Python's repr() of a float ("1.0", "0.1", "1e+16", "inf").
std::string format_float(double d);
// Python's repr() of a string ('a', "it's").
std::string repr_string(std::string_view s);

// Python's == (1 == 1.0 == True, lists and dicts by content; Undefined equals
// only Undefined).
bool values_equal(const Value& a, const Value& b, Budget& budget);
// Python's < for numbers, strings and lists; Error for other types.
bool values_less(const Value& a, const Value& b, Budget& budget);
// Keys must be hashable: scalars only.
bool is_hashable(const Value& v);

// UTF-8 helpers: strings are indexed, sliced and measured in code points, as
// Python does. A byte that is not valid UTF-8 counts as one character.
size_t utf8_length(std::string_view s);
// Byte offsets of each character start, plus s.size() at the end.
std::vector<size_t> utf8_offsets(std::string_view s);

}  // namespace tessera::server::jinja
