// Python's operators on template values: arithmetic, `in`, slicing, iter()
// and len().
#include <cmath>
#include <limits>

#include "core/error.h"
#include "template/jinja_builtins.h"
#include "template/jinja_eval.h"

namespace tessera::server::jinja {

namespace {

const char* op_symbol(BinOp op) {
  switch (op) {
    case BinOp::kAdd: return "+";
    case BinOp::kSub: return "-";
    case BinOp::kMul: return "*";
    case BinOp::kDiv: return "/";
    case BinOp::kFloorDiv: return "//";
    case BinOp::kMod: return "%";
    case BinOp::kPow: return "**";
  }
  return "?";
}

[[noreturn]] void overflow() { fail(ErrorCode::kInvalidArgument, "integer overflow"); }

int64_t int_pow(int64_t base, int64_t exp) {
  int64_t result = 1;
  while (exp > 0) {
    if (exp & 1) {
      if (__builtin_mul_overflow(result, base, &result)) overflow();
    }
    exp >>= 1;
    if (exp > 0 && __builtin_mul_overflow(base, base, &base)) overflow();
  }
  return result;
}

Value int_arith(BinOp op, int64_t a, int64_t b) {
  int64_t r = 0;
  switch (op) {
    case BinOp::kAdd:
      if (__builtin_add_overflow(a, b, &r)) overflow();
      return Value::integer(r);
    case BinOp::kSub:
      if (__builtin_sub_overflow(a, b, &r)) overflow();
      return Value::integer(r);
    case BinOp::kMul:
      if (__builtin_mul_overflow(a, b, &r)) overflow();
      return Value::integer(r);
    case BinOp::kDiv:
      TESSERA_CHECK(b != 0, kInvalidArgument, "division by zero");
      return Value::number(static_cast<double>(a) / static_cast<double>(b));
    case BinOp::kFloorDiv: {
      TESSERA_CHECK(b != 0, kInvalidArgument, "integer division or modulo by zero");
      if (a == std::numeric_limits<int64_t>::min() && b == -1) overflow();
      int64_t q = a / b;
      if (a % b != 0 && ((a < 0) != (b < 0))) --q;
      return Value::integer(q);
    }
    case BinOp::kMod: {
      TESSERA_CHECK(b != 0, kInvalidArgument, "integer division or modulo by zero");
      if (b == -1) return Value::integer(0);
      r = a % b;
      if (r != 0 && ((r < 0) != (b < 0))) r += b;
      return Value::integer(r);
    }
    case BinOp::kPow:
      if (b < 0) {
        TESSERA_CHECK(a != 0, kInvalidArgument, "0.0 cannot be raised to a negative power");
        return Value::number(std::pow(static_cast<double>(a), static_cast<double>(b)));
      }
      return Value::integer(int_pow(a, b));
  }
  return Value();
}

Value float_arith(BinOp op, double a, double b) {
  switch (op) {
    case BinOp::kAdd: return Value::number(a + b);
    case BinOp::kSub: return Value::number(a - b);
    case BinOp::kMul: return Value::number(a * b);
    case BinOp::kDiv:
      TESSERA_CHECK(b != 0.0, kInvalidArgument, "float division by zero");
      return Value::number(a / b);
    case BinOp::kFloorDiv:
      TESSERA_CHECK(b != 0.0, kInvalidArgument, "float floor division by zero");
      return Value::number(std::floor(a / b));
    case BinOp::kMod: {
      TESSERA_CHECK(b != 0.0, kInvalidArgument, "float modulo by zero");
      double r = std::fmod(a, b);
      if (r != 0.0 && ((r < 0) != (b < 0))) r += b;
      return Value::number(r);
    }
    case BinOp::kPow:
      TESSERA_CHECK(!(a == 0.0 && b < 0), kInvalidArgument, "0.0 cannot be raised to a negative power");
      TESSERA_CHECK(!(a < 0 && b != std::floor(b)), kInvalidArgument,
                    "a negative number cannot be raised to a fractional power");
      return Value::number(std::pow(a, b));
  }
  return Value();
}

Value repeat(const Value& seq, int64_t n, Budget& budget) {
  if (n < 0) n = 0;
  if (seq.is_string()) {
    const std::string& s = seq.str();
    if (!s.empty() && static_cast<uint64_t>(n) > budget.max_string_bytes / s.size()) {
      budget.check_size(budget.max_string_bytes + 1);
    }
    std::string out;
    out.reserve(s.size() * static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) out += s;
    budget.charge(static_cast<int64_t>(out.size() / 256));
    return Value::string(std::move(out));
  }
  const auto& items = seq.arr().items;
  if (!items.empty()) {
    const auto total = static_cast<int64_t>(items.size());
    budget.charge(n > budget.steps_left / total ? budget.steps_left + 1 : n * total);
  }
  std::vector<Value> out;
  out.reserve(items.size() * static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), items.begin(), items.end());
  return Value::array(std::move(out), seq.is_tuple());
}

}  // namespace

Value binary_op(BinOp op, const Value& a, const Value& b, Budget& budget) {
  if (a.is_undefined()) fail(ErrorCode::kInvalidArgument, "{}", a.undefined_message());
  if (b.is_undefined()) fail(ErrorCode::kInvalidArgument, "{}", b.undefined_message());
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) return int_arith(op, a.as_int(), b.as_int());
    return float_arith(op, a.as_double(), b.as_double());
  }
  if (op == BinOp::kAdd) {
    if (a.is_string() && b.is_string()) {
      budget.check_size(a.str().size() + b.str().size());
      budget.charge(static_cast<int64_t>((a.str().size() + b.str().size()) / 256));
      return Value::string(a.str() + b.str());
    }
    if (a.is_array() && b.is_array() && a.is_tuple() == b.is_tuple()) {
      std::vector<Value> items = a.arr().items;
      const auto& more = b.arr().items;
      budget.charge(static_cast<int64_t>(items.size() + more.size()));
      items.insert(items.end(), more.begin(), more.end());
      return Value::array(std::move(items), a.is_tuple());
    }
  }
  if (op == BinOp::kMul) {
    if ((a.is_string() || a.is_array()) && b.is_integral()) return repeat(a, b.as_int(), budget);
    if ((b.is_string() || b.is_array()) && a.is_integral()) return repeat(b, a.as_int(), budget);
  }
  if (op == BinOp::kMod && a.is_string()) return Value::string(percent_format(a.str(), b, budget));
  fail(ErrorCode::kInvalidArgument, "unsupported operand type(s) for {}: '{}' and '{}'", op_symbol(op), a.type_name(),
       b.type_name());
}

bool contains(const Value& haystack, const Value& needle, Budget& budget) {
  switch (haystack.kind()) {
    case Value::Kind::kUndefined: return false;
    case Value::Kind::kString:
      TESSERA_CHECK(needle.is_string(), kInvalidArgument, "'in <string>' requires string as left operand, not {}",
                    needle.type_name());
      budget.charge(static_cast<int64_t>(haystack.str().size() / 256));
      return haystack.str().find(needle.str()) != std::string::npos;
    case Value::Kind::kArray:
      for (const auto& item : haystack.arr().items) {
        if (values_equal(item, needle, budget)) return true;
      }
      return false;
    case Value::Kind::kObject:
      if (!haystack.is_namespace()) {
        TESSERA_CHECK(is_hashable(needle), kInvalidArgument, "unhashable type: '{}'", needle.type_name());
        budget.charge(static_cast<int64_t>(haystack.obj().entries.size()));
        return haystack.obj().find(needle) != nullptr;
      }
      break;
    default: break;
  }
  fail(ErrorCode::kInvalidArgument, "argument of type '{}' is not iterable", haystack.type_name());
}

Value slice_value(const Value& obj, const Value& start_v, const Value& stop_v, const Value& step_v, Budget& budget) {
  if (!obj.is_array() && !obj.is_string()) {
    return Value::undefined(fmt::format("'{}' object is not subscriptable", obj.type_name()));
  }
  auto index = [](const Value& v, int64_t fallback) {
    if (v.is_none() || v.is_undefined()) return fallback;
    TESSERA_CHECK(v.is_integral(), kInvalidArgument, "slice indices must be integers or None");
    return v.as_int();
  };
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  const int64_t step = index(step_v, 1);
  TESSERA_CHECK(step != 0, kInvalidArgument, "slice step cannot be zero");
  std::vector<size_t> offsets;
  int64_t len = 0;
  if (obj.is_string()) {
    offsets = utf8_offsets(obj.str());
    len = static_cast<int64_t>(offsets.size()) - 1;
  } else {
    len = static_cast<int64_t>(obj.arr().items.size());
  }
  // CPython's PySlice_AdjustIndices.
  auto adjust = [&](int64_t i) {
    if (i < 0) {
      i = i < kMin + len ? -1 : i + len;
      if (i < 0) i = step < 0 ? -1 : 0;
    } else if (i >= len) {
      i = step < 0 ? len - 1 : len;
    }
    return i;
  };
  const int64_t start = adjust(index(start_v, step < 0 ? kMax : 0));
  const int64_t stop = adjust(index(stop_v, step < 0 ? kMin : kMax));
  std::vector<int64_t> picked;
  if (step > 0) {
    for (int64_t i = start; i < stop; i = stop - i <= step ? stop : i + step) picked.push_back(i);
  } else {
    const int64_t back = step == kMin ? kMax : -step;
    for (int64_t i = start; i > stop; i = i - stop <= back ? stop : i + step) picked.push_back(i);
  }
  budget.charge(static_cast<int64_t>(picked.size()));
  if (obj.is_string()) {
    const std::string& s = obj.str();
    std::string out;
    if (step == 1) {
      if (!picked.empty()) out = s.substr(offsets[picked.front()], offsets[picked.back() + 1] - offsets[picked.front()]);
    } else {
      for (int64_t i : picked) out.append(s, offsets[i], offsets[i + 1] - offsets[i]);
    }
    return Value::string(std::move(out));
  }
  std::vector<Value> items;
  items.reserve(picked.size());
  for (int64_t i : picked) items.push_back(obj.arr().items[static_cast<size_t>(i)]);
  return Value::array(std::move(items), obj.is_tuple());
}

std::vector<Value> iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return {};
    case Value::Kind::kArray: return v.arr().items;
    case Value::Kind::kObject:
      if (!v.is_namespace()) {
        std::vector<Value> keys;
        keys.reserve(v.obj().entries.size());
        for (const auto& [k, val] : v.obj().entries) keys.push_back(k);
        return keys;
      }
      break;
    case Value::Kind::kString: {
      const std::string& s = v.str();
      const std::vector<size_t> offsets = utf8_offsets(s);
      std::vector<Value> chars;
      chars.reserve(offsets.size() - 1);
      for (size_t i = 0; i + 1 < offsets.size(); ++i) {
        chars.push_back(Value::string(s.substr(offsets[i], offsets[i + 1] - offsets[i])));
      }
      return chars;
    }
    default: break;
  }
  fail(ErrorCode::kInvalidArgument, "'{}' object is not iterable", v.type_name());
}

int64_t py_len(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return 0;
    case Value::Kind::kString: return static_cast<int64_t>(utf8_length(v.str()));
    case Value::Kind::kArray: return static_cast<int64_t>(v.arr().items.size());
    case Value::Kind::kObject:
      if (!v.is_namespace()) return static_cast<int64_t>(v.obj().entries.size());
      break;
    default: break;
  }
  fail(ErrorCode::kInvalidArgument, "object of type '{}' has no len()", v.type_name());
}

}  // namespace tessera::server::jinja
