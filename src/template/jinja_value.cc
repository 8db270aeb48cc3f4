#include "template/jinja_value.h"

#include <charconv>
#include <cmath>

#include "core/error.h"

namespace tessera::server::jinja {

void Budget::exhausted() const {
  fail(ErrorCode::kInvalidArgument, "template rendering exceeded its limit of {} steps", max_steps);
}

void Budget::too_long(size_t n) const {
  fail(ErrorCode::kInvalidArgument, "template rendering built a string of {} bytes, over the limit of {}", n,
       max_string_bytes);
}

// ---- construction -----------------------------------------------------------

Value Value::undefined(std::string hint) {
  Value v;
  v.v_ = Undef{std::make_shared<const std::string>(std::move(hint))};
  return v;
}

Value Value::none() {
  Value v;
  v.v_ = NoneT{};
  return v;
}

Value Value::boolean(bool b) {
  Value v;
  v.v_ = b;
  return v;
}

Value Value::integer(int64_t i) {
  Value v;
  v.v_ = i;
  return v;
}

Value Value::number(double d) {
  Value v;
  v.v_ = d;
  return v;
}

Value Value::string(std::string s) {
  Value v;
  v.v_ = std::make_shared<const std::string>(std::move(s));
  return v;
}

Value Value::string(std::shared_ptr<const std::string> s) {
  Value v;
  v.v_ = std::move(s);
  return v;
}

Value Value::array(std::vector<Value> items, bool is_tuple) {
  auto data = std::make_shared<ArrayData>();
  data->items = std::move(items);
  data->is_tuple = is_tuple;
  Value v;
  v.v_ = std::move(data);
  return v;
}

Value Value::object() {
  Value v;
  v.v_ = std::make_shared<ObjectData>();
  return v;
}

Value Value::namespace_object() {
  auto data = std::make_shared<ObjectData>();
  data->is_namespace = true;
  Value v;
  v.v_ = std::move(data);
  return v;
}

Value Value::function(std::string name, NativeFunction fn, Value bound_self) {
  auto data = std::make_shared<FunctionData>();
  data->name = std::move(name);
  data->fn = std::move(fn);
  data->bound_self = std::move(bound_self);
  Value v;
  v.v_ = std::move(data);
  return v;
}

// ---- accessors --------------------------------------------------------------

bool Value::is_tuple() const { return is_array() && arr().is_tuple; }
bool Value::is_namespace() const { return is_object() && obj().is_namespace; }

int64_t Value::as_int() const {
  if (is_bool()) return as_bool() ? 1 : 0;
  return std::get<int64_t>(v_);
}

double Value::as_double() const {
  if (is_float()) return std::get<double>(v_);
  return static_cast<double>(as_int());
}

const void* Value::identity() const {
  switch (kind()) {
    case Kind::kArray: return std::get<ArrPtr>(v_).get();
    case Kind::kObject: return std::get<ObjPtr>(v_).get();
    case Kind::kFunction: return std::get<FnPtr>(v_).get();
    case Kind::kString: return std::get<StrPtr>(v_).get();
    default: return nullptr;
  }
}

std::string Value::undefined_message() const {
  const auto& hint = std::get<Undef>(v_).hint;
  return hint ? *hint : std::string("value is undefined");
}

bool Value::truthy() const {
  switch (kind()) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return as_bool();
    case Kind::kInt: return as_int() != 0;
    case Kind::kFloat: return as_double() != 0.0;
    case Kind::kString: return !str().empty();
    case Kind::kArray: return !arr().items.empty();
    case Kind::kObject: return is_namespace() || !obj().entries.empty();
    case Kind::kFunction: return true;
  }
  return false;
}

std::string Value::type_name() const {
  switch (kind()) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kArray: return is_tuple() ? "tuple" : "list";
    case Kind::kObject: return is_namespace() ? "Namespace" : "dict";
    case Kind::kFunction: return "function";
  }
  return "object";
}

// ---- containers -------------------------------------------------------------

const Value* ObjectData::find(const Value& key) const {
  if (key.is_string()) return find(std::string_view(key.str()));
  Budget scalar_budget{1 << 20, 1 << 20, 0};  // keys are scalars: == is O(1)
  for (const auto& [k, v] : entries) {
    if (!k.is_string() && values_equal(k, key, scalar_budget)) return &v;
  }
  return nullptr;
}

const Value* ObjectData::find(std::string_view key) const {
  for (const auto& [k, v] : entries) {
    if (k.is_string() && k.str() == key) return &v;
  }
  return nullptr;
}

void ObjectData::set(Value key, Value value) {
  if (const Value* existing = find(key)) {
    *const_cast<Value*>(existing) = std::move(value);
    return;
  }
  entries.emplace_back(std::move(key), std::move(value));
}

void release_children(std::vector<Value>& pending) {
  // A container whose last reference is `v` gives its children to `pending`
  // before `v` dies, so its destructor finds nothing to recurse into.
  while (!pending.empty()) {
    Value v = std::move(pending.back());
    pending.pop_back();
    if (auto* a = std::get_if<Value::ArrPtr>(&v.v_); a && *a && a->use_count() == 1) {
      for (auto& item : (*a)->items) pending.push_back(std::move(item));
      (*a)->items.clear();
    } else if (auto* o = std::get_if<Value::ObjPtr>(&v.v_); o && *o && o->use_count() == 1) {
      for (auto& [k, val] : (*o)->entries) {
        pending.push_back(std::move(k));
        pending.push_back(std::move(val));
      }
      (*o)->entries.clear();
    } else if (auto* f = std::get_if<Value::FnPtr>(&v.v_); f && *f && f->use_count() == 1) {
      pending.push_back(std::move((*f)->bound_self));
    }
  }
}

void clear_container(const Value& container) {
  std::vector<Value> pending;
  if (container.is_array()) {
    pending.swap(container.arr().items);
  } else if (container.is_object()) {
    for (auto& [k, v] : container.obj().entries) {
      pending.push_back(std::move(k));
      pending.push_back(std::move(v));
    }
    container.obj().entries.clear();
  }
  release_children(pending);
}

ArrayData::~ArrayData() {
  if (!items.empty()) release_children(items);
}

ObjectData::~ObjectData() {
  if (entries.empty()) return;
  std::vector<Value> pending;
  pending.reserve(entries.size() * 2);
  for (auto& [k, v] : entries) {
    pending.push_back(std::move(k));
    pending.push_back(std::move(v));
  }
  entries.clear();
  release_children(pending);
}

FunctionData::~FunctionData() {
  if (bound_self.is_undefined()) return;
  std::vector<Value> pending;
  pending.push_back(std::move(bound_self));
  release_children(pending);
}

// ---- str() / repr() ---------------------------------------------------------

namespace {

void check_depth(int depth) {
  TESSERA_CHECK(depth <= kMaxValueDepth, kInvalidArgument, "value nested deeper than {} levels", kMaxValueDepth);
}

void append_repr(std::string& out, const Value& v, Budget& budget, int depth);

void append_str_impl(std::string& out, const Value& v, Budget& budget, int depth) {
  check_depth(depth);
  budget.charge(1);
  switch (v.kind()) {
    case Value::Kind::kUndefined: break;
    case Value::Kind::kNone: out += "None"; break;
    case Value::Kind::kBool: out += v.as_bool() ? "True" : "False"; break;
    case Value::Kind::kInt: out += std::to_string(v.as_int()); break;
    case Value::Kind::kFloat: out += format_float(v.as_double()); break;
    case Value::Kind::kString: out += v.str(); break;
    case Value::Kind::kArray: {
      const auto& a = v.arr();
      out += a.is_tuple ? '(' : '[';
      for (size_t i = 0; i < a.items.size(); ++i) {
        if (i) out += ", ";
        append_repr(out, a.items[i], budget, depth + 1);
        budget.check_size(out.size());
      }
      if (a.is_tuple && a.items.size() == 1) out += ',';
      out += a.is_tuple ? ')' : ']';
      break;
    }
    case Value::Kind::kObject: {
      const auto& o = v.obj();
      if (o.is_namespace) out += "<Namespace ";
      out += '{';
      for (size_t i = 0; i < o.entries.size(); ++i) {
        if (i) out += ", ";
        append_repr(out, o.entries[i].first, budget, depth + 1);
        out += ": ";
        append_repr(out, o.entries[i].second, budget, depth + 1);
        budget.check_size(out.size());
      }
      out += '}';
      if (o.is_namespace) out += '>';
      break;
    }
    case Value::Kind::kFunction: out += "<function " + v.fn().name + ">"; break;
  }
  budget.check_size(out.size());
}

void append_repr(std::string& out, const Value& v, Budget& budget, int depth) {
  if (v.is_string()) {
    out += repr_string(v.str());
    budget.check_size(out.size());
  } else if (v.is_undefined()) {
    out += "Undefined";
  } else {
    append_str_impl(out, v, budget, depth);
  }
}

}  // namespace

std::string repr_string(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c == quote) {
          out += '\\';
          out += static_cast<char>(c);
        } else if (c < 0x20 || c == 0x7f) {
          out += fmt::format("\\x{:02x}", c);
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += quote;
  return out;
}

void append_str(std::string& out, const Value& v, Budget& budget) { append_str_impl(out, v, budget, 0); }

std::string to_str(const Value& v, Budget& budget) {
  if (v.is_string()) return v.str();
  std::string out;
  append_str_impl(out, v, budget, 0);
  return out;
}

std::string to_repr(const Value& v, Budget& budget) {
  std::string out;
  append_repr(out, v, budget, 0);
  return out;
}

std::string format_float(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  // Shortest round-trip digits, then Python's repr layout: positional for
  // decimal exponents in [-4, 16), scientific otherwise.
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string_view s(buf, static_cast<size_t>(res.ptr - buf));
  std::string out;
  if (s.front() == '-') {
    out += '-';
    s.remove_prefix(1);
  }
  const size_t e = s.find('e');
  std::string digits;
  for (char c : s.substr(0, e)) {
    if (c != '.') digits += c;
  }
  int exp = 0;
  std::string_view exp_text = s.substr(e + 1);
  if (!exp_text.empty() && exp_text.front() == '+') exp_text.remove_prefix(1);
  std::from_chars(exp_text.data(), exp_text.data() + exp_text.size(), exp);
  if (exp >= -4 && exp < 16) {
    if (exp >= 0) {
      const size_t int_len = static_cast<size_t>(exp) + 1;
      if (digits.size() <= int_len) {
        out += digits;
        out.append(int_len - digits.size(), '0');
        out += ".0";
      } else {
        out.append(digits, 0, int_len);
        out += '.';
        out.append(digits, int_len);
      }
    } else {
      out += "0.";
      out.append(static_cast<size_t>(-exp - 1), '0');
      out += digits;
    }
  } else {
    out += digits[0];
    if (digits.size() > 1) {
      out += '.';
      out.append(digits, 1);
    }
    out += fmt::format("e{}{:02d}", exp < 0 ? '-' : '+', std::abs(exp));
  }
  return out;
}

// ---- comparison -------------------------------------------------------------

namespace {

bool equal_impl(const Value& a, const Value& b, Budget& budget, int depth) {
  check_depth(depth);
  budget.charge(1);
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) return a.as_int() == b.as_int();
    return a.as_double() == b.as_double();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return true;
    case Value::Kind::kString: return a.str() == b.str();
    case Value::Kind::kArray: {
      if (a.identity() == b.identity()) return true;
      const auto& x = a.arr();
      const auto& y = b.arr();
      if (x.is_tuple != y.is_tuple || x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i) {
        if (!equal_impl(x.items[i], y.items[i], budget, depth + 1)) return false;
      }
      return true;
    }
    case Value::Kind::kObject: {
      if (a.identity() == b.identity()) return true;
      const auto& x = a.obj();
      const auto& y = b.obj();
      if (x.is_namespace || y.is_namespace || x.entries.size() != y.entries.size()) return false;
      for (const auto& [k, v] : x.entries) {
        budget.charge(static_cast<int64_t>(y.entries.size()));
        const Value* other = y.find(k);
        if (!other || !equal_impl(v, *other, budget, depth + 1)) return false;
      }
      return true;
    }
    default: return a.identity() == b.identity();
  }
}

[[noreturn]] void not_orderable(const Value& a, const Value& b) {
  if (a.is_undefined()) fail(ErrorCode::kInvalidArgument, "{}", a.undefined_message());
  if (b.is_undefined()) fail(ErrorCode::kInvalidArgument, "{}", b.undefined_message());
  fail(ErrorCode::kInvalidArgument, "'<' not supported between instances of '{}' and '{}'", a.type_name(),
       b.type_name());
}

bool less_impl(const Value& a, const Value& b, Budget& budget, int depth) {
  check_depth(depth);
  budget.charge(1);
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) return a.as_int() < b.as_int();
    return a.as_double() < b.as_double();
  }
  if (a.is_string() && b.is_string()) return a.str() < b.str();  // UTF-8 order is code point order
  if (a.is_array() && b.is_array() && a.is_tuple() == b.is_tuple()) {
    const auto& x = a.arr().items;
    const auto& y = b.arr().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!equal_impl(x[i], y[i], budget, depth + 1)) return less_impl(x[i], y[i], budget, depth + 1);
    }
    return x.size() < y.size();
  }
  not_orderable(a, b);
}

}  // namespace

bool values_equal(const Value& a, const Value& b, Budget& budget) { return equal_impl(a, b, budget, 0); }

bool values_less(const Value& a, const Value& b, Budget& budget) { return less_impl(a, b, budget, 0); }

bool is_hashable(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kNone:
    case Value::Kind::kBool:
    case Value::Kind::kInt:
    case Value::Kind::kFloat:
    case Value::Kind::kString: return true;
    default: return false;
  }
}

// ---- UTF-8 ------------------------------------------------------------------

namespace {

// Length of the well-formed UTF-8 sequence at s[i], or 1 for a stray byte.
size_t char_len(std::string_view s, size_t i) {
  const auto lead = static_cast<unsigned char>(s[i]);
  size_t n = 1;
  if (lead >= 0xC2 && lead <= 0xDF) n = 2;
  else if (lead >= 0xE0 && lead <= 0xEF) n = 3;
  else if (lead >= 0xF0 && lead <= 0xF4) n = 4;
  if (n == 1 || i + n > s.size()) return 1;
  for (size_t k = 1; k < n; ++k) {
    if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 1;
  }
  return n;
}

}  // namespace

size_t utf8_length(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size(); i += char_len(s, i)) ++n;
  return n;
}

std::vector<size_t> utf8_offsets(std::string_view s) {
  std::vector<size_t> offsets;
  offsets.reserve(s.size() + 1);
  for (size_t i = 0; i < s.size(); i += char_len(s, i)) offsets.push_back(i);
  offsets.push_back(s.size());
  return offsets;
}

}  // namespace tessera::server::jinja
