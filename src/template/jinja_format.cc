// Text formats for template values: JSON as Python's json.dumps writes it,
// and Python's printf-style `%` formatting.
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "template/jinja.h"
#include "template/jinja_builtins.h"

namespace tessera::server::jinja {

// ---- JSON -------------------------------------------------------------------

namespace {

void append_unicode_escape(std::string& out, uint32_t unit) { out += fmt::format("\\u{:04x}", unit); }

// Decodes one UTF-8 character at s[i] (advancing i); U+FFFD for a stray byte.
uint32_t decode_utf8(std::string_view s, size_t& i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  size_t n = 1;
  uint32_t cp = b0;
  if (b0 >= 0xC2 && b0 <= 0xDF) n = 2, cp = b0 & 0x1F;
  else if (b0 >= 0xE0 && b0 <= 0xEF) n = 3, cp = b0 & 0x0F;
  else if (b0 >= 0xF0 && b0 <= 0xF4) n = 4, cp = b0 & 0x07;
  else if (b0 >= 0x80) n = 0;
  if (n == 0 || i + n > s.size()) {
    ++i;
    return n == 1 ? cp : 0xFFFD;
  }
  for (size_t k = 1; k < n; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) {
      ++i;
      return 0xFFFD;
    }
    cp = (cp << 6) | (b & 0x3F);
  }
  i += n;
  return cp;
}

void append_json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        default:
          if (c < 0x20) {
            append_unicode_escape(out, c);
          } else {
            out += static_cast<char>(c);
          }
      }
      ++i;
      continue;
    }
    if (!ensure_ascii) {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    const uint32_t cp = decode_utf8(s, i);
    if (cp >= 0x10000) {
      const uint32_t v = cp - 0x10000;
      append_unicode_escape(out, 0xD800 + (v >> 10));
      append_unicode_escape(out, 0xDC00 + (v & 0x3FF));
    } else {
      append_unicode_escape(out, cp);
    }
  }
  out += '"';
}

std::string json_key(const Value& k, Budget& budget) {
  switch (k.kind()) {
    case Value::Kind::kString: return k.str();
    case Value::Kind::kNone: return "null";
    case Value::Kind::kBool: return k.as_bool() ? "true" : "false";
    case Value::Kind::kInt:
    case Value::Kind::kFloat: return to_str(k, budget);
    default:
      fail(ErrorCode::kInvalidArgument, "keys must be str, int, float, bool or None, not {}", k.type_name());
  }
}

void newline_indent(std::string& out, const JsonOptions& o, int level) {
  if (!o.has_indent) return;
  out += '\n';
  for (int i = 0; i < level; ++i) out += o.indent;
}

void write_json(std::string& out, const Value& v, const JsonOptions& o, Budget& budget, int depth) {
  TESSERA_CHECK(depth <= kMaxValueDepth, kInvalidArgument, "value nested deeper than {} levels", kMaxValueDepth);
  budget.charge(1);
  switch (v.kind()) {
    case Value::Kind::kNone: out += "null"; break;
    case Value::Kind::kBool: out += v.as_bool() ? "true" : "false"; break;
    case Value::Kind::kInt: out += std::to_string(v.as_int()); break;
    case Value::Kind::kFloat: {
      const double d = v.as_double();
      if (std::isnan(d)) out += "NaN";
      else if (std::isinf(d)) out += d > 0 ? "Infinity" : "-Infinity";
      else out += format_float(d);
      break;
    }
    case Value::Kind::kString: append_json_string(out, v.str(), o.ensure_ascii); break;
    case Value::Kind::kArray: {
      const auto& items = v.arr().items;
      if (items.empty()) {
        out += "[]";
        break;
      }
      out += '[';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += o.item_separator;
        newline_indent(out, o, depth + 1);
        write_json(out, items[i], o, budget, depth + 1);
      }
      newline_indent(out, o, depth);
      out += ']';
      break;
    }
    case Value::Kind::kObject: {
      TESSERA_CHECK(!v.is_namespace(), kInvalidArgument, "Object of type Namespace is not JSON serializable");
      std::vector<std::pair<std::string, const Value*>> entries;
      for (const auto& [k, val] : v.obj().entries) entries.emplace_back(json_key(k, budget), &val);
      if (o.sort_keys) {
        std::stable_sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      }
      if (entries.empty()) {
        out += "{}";
        break;
      }
      out += '{';
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i) out += o.item_separator;
        newline_indent(out, o, depth + 1);
        append_json_string(out, entries[i].first, o.ensure_ascii);
        out += o.key_separator;
        write_json(out, *entries[i].second, o, budget, depth + 1);
      }
      newline_indent(out, o, depth);
      out += '}';
      break;
    }
    case Value::Kind::kUndefined:
    case Value::Kind::kFunction:
      fail(ErrorCode::kInvalidArgument, "Object of type {} is not JSON serializable", v.type_name());
  }
  budget.check_size(out.size());
}

template <class Json>
Value from_json_impl(const Json& j, int depth) {
  TESSERA_CHECK(depth <= kMaxValueDepth, kInvalidArgument, "JSON nested deeper than {} levels", kMaxValueDepth);
  switch (j.type()) {
    case nlohmann::detail::value_t::null: return Value::none();
    case nlohmann::detail::value_t::boolean: return Value::boolean(j.template get<bool>());
    case nlohmann::detail::value_t::number_integer: return Value::integer(j.template get<int64_t>());
    case nlohmann::detail::value_t::number_unsigned: {
      const auto u = j.template get<uint64_t>();
      if (u <= static_cast<uint64_t>(INT64_MAX)) return Value::integer(static_cast<int64_t>(u));
      return Value::number(static_cast<double>(u));
    }
    case nlohmann::detail::value_t::number_float: return Value::number(j.template get<double>());
    case nlohmann::detail::value_t::string: return Value::string(j.template get<std::string>());
    case nlohmann::detail::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& item : j) items.push_back(from_json_impl(item, depth + 1));
      return Value::array(std::move(items));
    }
    case nlohmann::detail::value_t::object: {
      Value obj = Value::object();
      obj.obj().entries.reserve(j.size());
      for (const auto& [k, item] : j.items()) obj.obj().entries.emplace_back(Value::string(k), from_json_impl(item, depth + 1));
      return obj;
    }
    default: fail(ErrorCode::kInvalidArgument, "unsupported JSON value type '{}'", j.type_name());
  }
}

}  // namespace

std::string to_json(const Value& v, const JsonOptions& options, Budget& budget) {
  std::string out;
  write_json(out, v, options, budget, 0);
  return out;
}

Value from_json(const nlohmann::json& j) { return from_json_impl(j, 0); }
Value from_json(const nlohmann::ordered_json& j) { return from_json_impl(j, 0); }

// ---- printf-style % ----------------------------------------------------------

namespace {

struct Spec {
  std::string flags;
  int width = -1;
  int precision = -1;
  char type = 's';
};

std::string pad(std::string text, const Spec& spec) {
  const auto len = static_cast<int>(utf8_length(text));
  if (spec.width <= len) return text;
  const size_t fill = static_cast<size_t>(spec.width - len);
  if (spec.flags.find('-') != std::string::npos) return text + std::string(fill, ' ');
  return std::string(fill, ' ') + text;
}

std::string format_one(const Value& v, const Spec& spec, Budget& budget) {
  std::string printf_spec = fmt::format("%{}", spec.flags);
  if (spec.width >= 0) printf_spec += std::to_string(spec.width);
  if (spec.precision >= 0) printf_spec += fmt::format(".{}", spec.precision);
  char buf[1024];  // fits 309 integer digits, sign, point and 400 decimals
  switch (spec.type) {
    case 's':
    case 'r':
    case 'a': {
      std::string text = spec.type == 's' ? to_str(v, budget) : to_repr(v, budget);
      if (spec.precision >= 0) {
        const std::vector<size_t> offsets = utf8_offsets(text);
        if (static_cast<size_t>(spec.precision) + 1 < offsets.size()) text.resize(offsets[spec.precision]);
      }
      return pad(std::move(text), spec);
    }
    case 'd':
    case 'i':
    case 'u':
    case 'x':
    case 'X':
    case 'o': {
      TESSERA_CHECK(v.is_number(), kInvalidArgument, "%{} format: a real number is required, not {}", spec.type,
                    v.type_name());
      TESSERA_CHECK(!(v.is_float() && (spec.type == 'x' || spec.type == 'X' || spec.type == 'o')), kInvalidArgument,
                    "%{} format: an integer is required, not float", spec.type);
      const double d = v.as_double();
      TESSERA_CHECK(!v.is_float() || std::isfinite(d), kInvalidArgument, "cannot convert float to integer");
      const long long n = v.is_float() ? static_cast<long long>(std::trunc(d)) : v.as_int();
      const char type = spec.type == 'i' || spec.type == 'u' ? 'd' : spec.type;
      printf_spec += "ll";
      printf_spec += type;
      std::snprintf(buf, sizeof buf, printf_spec.c_str(), n);
      return buf;
    }
    case 'f':
    case 'F':
    case 'e':
    case 'E':
    case 'g':
    case 'G':
      TESSERA_CHECK(v.is_number(), kInvalidArgument, "must be real number, not {}", v.type_name());
      printf_spec += spec.type;
      std::snprintf(buf, sizeof buf, printf_spec.c_str(), v.as_double());
      return buf;
    case 'c':
      if (v.is_string()) {
        TESSERA_CHECK(utf8_length(v.str()) == 1, kInvalidArgument, "%c requires an int or a unicode character");
        return pad(v.str(), spec);
      }
      TESSERA_CHECK(v.is_integral() && v.as_int() >= 0 && v.as_int() < 0x80, kInvalidArgument,
                    "%c requires an int or a unicode character");
      return pad(std::string(1, static_cast<char>(v.as_int())), spec);
    default: fail(ErrorCode::kInvalidArgument, "unsupported format character '{}'", spec.type);
  }
}

}  // namespace

std::string percent_format(const std::string& format, const Value& args, Budget& budget) {
  const bool is_tuple = args.is_tuple();
  const bool is_mapping = args.is_dict();
  std::vector<Value> positional;
  if (is_tuple) positional = args.arr().items;
  else if (!is_mapping) positional.push_back(args);
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      out += format[i];
      continue;
    }
    TESSERA_CHECK(i + 1 < format.size(), kInvalidArgument, "incomplete format");
    ++i;
    if (format[i] == '%') {
      out += '%';
      continue;
    }
    const Value* v = nullptr;
    if (format[i] == '(') {
      const size_t close = format.find(')', i);
      TESSERA_CHECK(close != std::string::npos, kInvalidArgument, "incomplete format key");
      TESSERA_CHECK(is_mapping, kInvalidArgument, "format requires a mapping");
      v = args.obj().find(std::string_view(format).substr(i + 1, close - i - 1));
      TESSERA_CHECK(v, kInvalidArgument, "format key '{}' not found", format.substr(i + 1, close - i - 1));
      i = close + 1;
    }
    Spec spec;
    while (i < format.size() && std::string_view("-+ #0").find(format[i]) != std::string_view::npos) {
      spec.flags += format[i++];
    }
    auto number = [&]() {
      int n = 0;
      while (i < format.size() && format[i] >= '0' && format[i] <= '9' && n < 10000) n = n * 10 + (format[i++] - '0');
      return n;
    };
    if (i < format.size() && format[i] >= '0' && format[i] <= '9') spec.width = number();
    if (i < format.size() && format[i] == '.') {
      ++i;
      spec.precision = number();
    }
    TESSERA_CHECK(spec.width <= 400 && spec.precision <= 400, kInvalidArgument, "format width or precision too large");
    TESSERA_CHECK(i < format.size(), kInvalidArgument, "incomplete format");
    spec.type = format[i];
    if (!v) {
      TESSERA_CHECK(next < positional.size(), kInvalidArgument, "not enough arguments for format string");
      v = &positional[next++];
    }
    out += format_one(*v, spec, budget);
    budget.check_size(out.size());
  }
  TESSERA_CHECK(is_mapping || next == positional.size(), kInvalidArgument,
                "not all arguments converted during string formatting");
  budget.charge(static_cast<int64_t>(out.size() / 256));
  return out;
}

}  // namespace tessera::server::jinja
