#include "template/jinja_eval.h"

#include "core/error.h"
#include "template/jinja_builtins.h"

namespace tessera::server::jinja {

// ---- frames -----------------------------------------------------------------

const Value* Frame::find(std::string_view name) const {
  for (const Frame* f = this; f; f = f->parent.get()) {
    for (const auto& [k, v] : f->vars) {
      if (k == name) return &v;
    }
  }
  return nullptr;
}

void Frame::set(std::string_view name, Value value) {
  for (auto& [k, v] : vars) {
    if (k == name) {
      v = std::move(value);
      return;
    }
  }
  vars.emplace_back(std::string(name), std::move(value));
}

namespace {

FramePtr child_of(const FramePtr& parent) {
  auto f = std::make_shared<Frame>();
  f->parent = parent;
  return f;
}

// Jinja's object_type_repr, for "'dict object' has no attribute 'x'".
std::string object_type(const Value& v) {
  if (v.is_none()) return "None";
  return v.type_name() + " object";
}

Value missing_attribute(const Value& obj, std::string_view name) {
  return Value::undefined(fmt::format("'{}' has no attribute '{}'", object_type(obj), name));
}

[[noreturn]] void throw_undefined(const Value& v) { fail(ErrorCode::kInvalidArgument, "{}", v.undefined_message()); }

}  // namespace

struct Renderer::DepthGuard {
  explicit DepthGuard(Renderer& r) : r_(r) {
    if (r_.depth_ >= r_.limits_.max_depth) {
      fail(ErrorCode::kInvalidArgument, "template evaluation nested deeper than {} levels", r_.limits_.max_depth);
    }
    ++r_.depth_;
  }
  ~DepthGuard() { --r_.depth_; }
  Renderer& r_;
};

Renderer::Renderer(const RenderLimits& limits) : limits_(limits) {
  budget_.steps_left = limits.max_steps;
  budget_.max_steps = limits.max_steps;
  budget_.max_string_bytes = limits.max_output_bytes;
}

std::string Renderer::render(const Body& body, std::vector<std::pair<std::string, Value>> vars) {
  // However the render ends, empty what the template mutated: a cycle it
  // built (ns.self = ns) would otherwise outlive the render.
  struct ReleaseMutable {
    Renderer& r;
    ~ReleaseMutable() {
      for (const auto& v : r.mutable_) clear_container(v);
      r.mutable_.clear();
      r.mutable_ids_.clear();
    }
  } release{*this};
  auto globals = std::make_shared<Frame>();
  globals->vars = global_functions();
  FramePtr root = child_of(globals);
  root->vars = std::move(vars);
  std::string out;
  out_ = &out;
  exec_body(body, root);
  out_ = nullptr;
  return out;
}

Value Renderer::make_string(std::string s) {
  budget_.check_size(s.size());
  charge(static_cast<int64_t>(s.size() / 256));
  return Value::string(std::move(s));
}

void Renderer::emit(std::string_view s) {
  if (out_->size() + s.size() > limits_.max_output_bytes) {
    fail(ErrorCode::kInvalidArgument, "template output exceeds the limit of {} bytes", limits_.max_output_bytes);
  }
  out_->append(s);
  charge(static_cast<int64_t>(s.size() / 256));
}

// ---- statements -------------------------------------------------------------

Renderer::Flow Renderer::exec_body(const Body& body, const FramePtr& frame) {
  DepthGuard guard(*this);
  for (const auto& s : body) {
    Flow flow;
    try {
      flow = exec(*s, frame);
    } catch (const TemplateError&) {
      throw;
    } catch (const Error& e) {
      throw TemplateError(TemplateError::Kind::kRender, s->pos, e.what());
    }
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

Renderer::Flow Renderer::exec(const Stmt& s, const FramePtr& frame) {
  charge(1);
  switch (s.kind) {
    case StmtKind::kText: emit(s.text); break;
    case StmtKind::kOutput: {
      const Value v = eval(*s.expr, frame);
      if (v.is_string()) {
        emit(v.str());
      } else {
        emit(str(v));
      }
      break;
    }
    case StmtKind::kIf:
      for (const auto& branch : s.branches) {
        if (!branch.cond || eval(*branch.cond, frame).truthy()) return exec_body(branch.body, frame);
      }
      break;
    case StmtKind::kFor: return exec_for(s, frame);
    case StmtKind::kSet: exec_set(s, frame); break;
    case StmtKind::kSetBlock: {
      Value v = make_string(capture(s.body, child_of(frame)));
      if (s.expr) v = apply_block_filter(*s.expr, std::move(v), frame);
      assign(s.targets, v, frame, s.pos);
      break;
    }
    case StmtKind::kMacro: {
      const Stmt* macro = &s;
      std::weak_ptr<Frame> scope = frame;
      frame->set(s.text, Value::function(s.text, [macro, scope](Renderer& r, CallArgs& args) {
                   return r.invoke_macro(*macro, scope, args);
                 }));
      break;
    }
    case StmtKind::kCallBlock: exec_call_block(s, frame); break;
    case StmtKind::kFilterBlock: {
      const Value v = apply_block_filter(*s.expr, make_string(capture(s.body, child_of(frame))), frame);
      emit(str(v));
      break;
    }
    case StmtKind::kWith: {
      FramePtr scope = child_of(frame);
      for (size_t i = 0; i < s.targets.size(); ++i) scope->set(s.targets[i].name, eval(*s.values[i], frame));
      return exec_body(s.body, scope);
    }
    case StmtKind::kScope: return exec_body(s.body, frame);
    case StmtKind::kBreak: return Flow::kBreak;
    case StmtKind::kContinue: return Flow::kContinue;
  }
  return Flow::kNormal;
}

namespace {

// Jinja's loop object: one per loop, updated in place each iteration (as
// Jinja's LoopContext is), so an iteration allocates nothing for it.
class LoopObject {
 public:
  enum : size_t { kIndex, kIndex0, kRevindex, kRevindex0, kFirst, kLast, kLength, kPrevitem, kNextitem, kCount };

  explicit LoopObject(size_t length) : index0_(std::make_shared<int64_t>(0)) {
    static const char* const kNames[] = {"index", "index0", "revindex", "revindex0", "first",
                                         "last",  "length", "previtem", "nextitem"};
    auto& e = value_.obj().entries;
    e.reserve(kCount + 3);
    for (const char* name : kNames) e.emplace_back(Value::string(name), Value());
    e.emplace_back(Value::string("depth"), Value::integer(1));
    e.emplace_back(Value::string("depth0"), Value::integer(0));
    std::shared_ptr<const int64_t> index0 = index0_;
    e.emplace_back(Value::string("cycle"), Value::function("cycle", [index0](Renderer&, CallArgs& args) {
                     TESSERA_CHECK(!args.positional.empty(), kInvalidArgument, "loop.cycle() needs at least one value");
                     return args.positional[static_cast<size_t>(*index0) % args.positional.size()];
                   }));
    e[kLength].second = Value::integer(static_cast<int64_t>(length));
  }

  const Value& value() const { return value_; }

  void advance(const std::vector<Value>& items, size_t i) {
    const auto n = static_cast<int64_t>(items.size());
    const auto k = static_cast<int64_t>(i);
    *index0_ = k;
    auto& e = value_.obj().entries;
    e[kIndex].second = Value::integer(k + 1);
    e[kIndex0].second = Value::integer(k);
    e[kRevindex].second = Value::integer(n - k);
    e[kRevindex0].second = Value::integer(n - k - 1);
    e[kFirst].second = Value::boolean(k == 0);
    e[kLast].second = Value::boolean(k == n - 1);
    e[kPrevitem].second = k > 0 ? items[i - 1] : Value::undefined("there is no previous item");
    e[kNextitem].second = k + 1 < n ? items[i + 1] : Value::undefined("there is no next item");
  }

 private:
  Value value_ = Value::object();
  std::shared_ptr<int64_t> index0_;
};

}  // namespace

Renderer::Flow Renderer::exec_for(const Stmt& s, const FramePtr& frame) {
  std::vector<Value> items = iterate(eval(*s.expr, frame));
  // One scope per loop, emptied each iteration: what an iteration sets is
  // gone in the next, as in Jinja.
  FramePtr scope = child_of(frame);
  if (s.cond) {
    std::vector<Value> kept;
    for (auto& item : items) {
      charge(1);
      scope->vars.clear();
      assign(s.targets, item, scope, s.pos);
      if (eval(*s.cond, scope).truthy()) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) return s.else_body.empty() ? Flow::kNormal : exec_body(s.else_body, child_of(frame));
  LoopObject loop(items.size());
  track_mutable(loop.value());
  for (size_t i = 0; i < items.size(); ++i) {
    charge(1);
    scope->vars.clear();
    assign(s.targets, items[i], scope, s.pos);
    loop.advance(items, i);
    scope->vars.emplace_back("loop", loop.value());
    if (exec_body(s.body, scope) == Flow::kBreak) break;
  }
  return Flow::kNormal;
}

void Renderer::exec_set(const Stmt& s, const FramePtr& frame) { assign(s.targets, eval(*s.expr, frame), frame, s.pos); }

void Renderer::track_mutable(const Value& container) {
  if (mutable_ids_.insert(container.identity()).second) mutable_.push_back(container);
}

void Renderer::assign(const std::vector<Target>& targets, const Value& value, const FramePtr& frame, SourcePos pos) {
  if (targets.size() == 1) {
    const Target& t = targets.front();
    if (t.attr.empty()) {
      frame->set(t.name, value);
      return;
    }
    const Value* ns = frame->find(t.name);
    TESSERA_CHECK(ns && ns->is_namespace(), kInvalidArgument, "cannot assign attribute '{}' of '{}': not a namespace",
                  t.attr, t.name);
    ns->obj().set(Value::string(t.attr), value);
    return;
  }
  TESSERA_CHECK(value.is_array(), kInvalidArgument, "cannot unpack a '{}' into {} names", value.type_name(),
                targets.size());
  const std::vector<Value> items = value.arr().items;
  TESSERA_CHECK(items.size() == targets.size(), kInvalidArgument, "{} values to unpack (expected {}, got {})",
                items.size() > targets.size() ? "too many" : "not enough", targets.size(), items.size());
  for (size_t i = 0; i < items.size(); ++i) frame->set(targets[i].name, items[i]);
}

std::string Renderer::capture(const Body& body, const FramePtr& frame) {
  std::string buffer;
  std::string* saved = out_;
  out_ = &buffer;
  try {
    exec_body(body, frame);
  } catch (...) {
    out_ = saved;
    throw;
  }
  out_ = saved;
  return buffer;
}

Value Renderer::apply_block_filter(const Expr& chain, Value input, const FramePtr& frame) {
  const Value* saved = block_input_;
  block_input_ = &input;
  try {
    Value result = eval(chain, frame);
    block_input_ = saved;
    return result;
  } catch (...) {
    block_input_ = saved;
    throw;
  }
}

void Renderer::exec_call_block(const Stmt& s, const FramePtr& frame) {
  const Expr& call_expr = *s.expr;
  Value callee = eval(*call_expr.args[0], frame);
  CallArgs args = eval_args(call_expr, 1, frame);
  const Stmt* block = &s;
  std::weak_ptr<Frame> scope = frame;
  args.named.emplace_back("caller", Value::function("caller", [block, scope](Renderer& r, CallArgs& a) {
                            return r.invoke_caller(*block, scope, a);
                          }));
  const Value result = call(callee, args);
  emit(str(result));
}

Value Renderer::invoke_macro(const Stmt& macro, const std::weak_ptr<Frame>& scope, CallArgs& args) {
  FramePtr parent = scope.lock();
  TESSERA_CHECK(parent, kInvalidArgument, "macro '{}' called after its scope ended", macro.text);
  return bind_call(macro, parent, args, true);
}

Value Renderer::invoke_caller(const Stmt& call_block, const std::weak_ptr<Frame>& scope, CallArgs& args) {
  FramePtr parent = scope.lock();
  TESSERA_CHECK(parent, kInvalidArgument, "caller() called after its call block ended");
  return bind_call(call_block, parent, args, false);
}

Value Renderer::bind_call(const Stmt& fn, const FramePtr& scope, CallArgs& args, bool is_macro) {
  if (call_depth_ >= limits_.max_call_depth) {
    fail(ErrorCode::kInvalidArgument, "macro calls nested deeper than {} levels", limits_.max_call_depth);
  }
  struct CallDepth {
    int& depth;
    explicit CallDepth(int& d) : depth(d) { ++depth; }
    ~CallDepth() { --depth; }
  } call_depth(call_depth_);

  const std::string name = is_macro ? fn.text : "caller";
  FramePtr frame = child_of(scope);
  std::vector<bool> bound(fn.params.size(), false);
  std::vector<Value> varargs;
  Value kwargs = Value::object();
  Value caller;
  for (size_t i = 0; i < args.positional.size(); ++i) {
    if (i < fn.params.size()) {
      frame->set(fn.params[i].name, std::move(args.positional[i]));
      bound[i] = true;
    } else {
      varargs.push_back(std::move(args.positional[i]));
    }
  }
  for (auto& [key, value] : args.named) {
    if (is_macro && key == "caller") {
      caller = std::move(value);
      continue;
    }
    size_t p = 0;
    while (p < fn.params.size() && fn.params[p].name != key) ++p;
    if (p == fn.params.size()) {
      kwargs.obj().set(Value::string(key), std::move(value));
      continue;
    }
    TESSERA_CHECK(!bound[p], kInvalidArgument, "{}() got multiple values for argument '{}'", name, key);
    frame->set(key, std::move(value));
    bound[p] = true;
  }
  for (size_t p = 0; p < fn.params.size(); ++p) {
    if (bound[p]) continue;
    const Param& param = fn.params[p];
    frame->set(param.name, param.default_value
                               ? eval(*param.default_value, frame)
                               : Value::undefined(fmt::format("parameter '{}' was not provided", param.name)));
  }
  if (is_macro) {
    frame->set("varargs", Value::array(std::move(varargs), /*is_tuple=*/true));
    frame->set("kwargs", std::move(kwargs));
    if (!caller.is_undefined()) frame->set("caller", std::move(caller));
  }
  return make_string(capture(fn.body, frame));
}

// ---- expressions ------------------------------------------------------------

Value Renderer::eval(const Expr& e, const FramePtr& frame) {
  DepthGuard guard(*this);
  charge(1);
  try {
    switch (e.kind) {
      case ExprKind::kLiteral: return e.literal;
      case ExprKind::kName: return eval_name(e, frame);
      case ExprKind::kList:
      case ExprKind::kTuple: return eval_sequence(e, frame);
      case ExprKind::kDict: return eval_dict(e, frame);
      case ExprKind::kAttr: return get_attr(eval(*e.args[0], frame), e.name);
      case ExprKind::kItem: {
        const Value obj = eval(*e.args[0], frame);
        return get_item(obj, eval(*e.args[1], frame));
      }
      case ExprKind::kSlice: return eval_slice(e, frame);
      case ExprKind::kCall: return eval_call(e, frame);
      case ExprKind::kFilter: return eval_filter(e, frame);
      case ExprKind::kTest: return eval_test(e, frame);
      case ExprKind::kNot: return Value::boolean(!eval(*e.args[0], frame).truthy());
      case ExprKind::kNeg:
      case ExprKind::kPos: {
        const Value v = eval(*e.args[0], frame);
        if (v.is_undefined()) throw_undefined(v);
        TESSERA_CHECK(v.is_number(), kInvalidArgument, "bad operand type for unary {}: '{}'",
                      e.kind == ExprKind::kNeg ? '-' : '+', v.type_name());
        if (e.kind == ExprKind::kPos) return v.is_bool() ? Value::integer(v.as_int()) : v;
        if (v.is_float()) return Value::number(-v.as_double());
        TESSERA_CHECK(v.as_int() != INT64_MIN, kInvalidArgument, "integer overflow");
        return Value::integer(-v.as_int());
      }
      case ExprKind::kBinary: {
        const Value a = eval(*e.args[0], frame);
        return binary_op(e.bin_op, a, eval(*e.args[1], frame), budget_);
      }
      case ExprKind::kConcat: return eval_concat(e, frame);
      case ExprKind::kAnd: {
        Value left = eval(*e.args[0], frame);
        return left.truthy() ? eval(*e.args[1], frame) : left;
      }
      case ExprKind::kOr: {
        Value left = eval(*e.args[0], frame);
        return left.truthy() ? left : eval(*e.args[1], frame);
      }
      case ExprKind::kCompare: return eval_compare(e, frame);
      case ExprKind::kCond:
        if (eval(*e.args[1], frame).truthy()) return eval(*e.args[0], frame);
        if (e.args.size() > 2) return eval(*e.args[2], frame);
        return Value::undefined("the inline if expression was false and has no else");
      case ExprKind::kBlockInput: return block_input_ ? *block_input_ : Value();
    }
  } catch (const TemplateError&) {
    throw;
  } catch (const Error& err) {
    throw TemplateError(TemplateError::Kind::kRender, e.pos, err.what());
  }
  return Value();
}

Value Renderer::eval_name(const Expr& e, const FramePtr& frame) {
  if (const Value* v = frame->find(e.name)) return *v;
  return Value::undefined(fmt::format("'{}' is undefined", e.name));
}

CallArgs Renderer::eval_args(const Expr& e, size_t first, const FramePtr& frame) {
  CallArgs args;
  args.positional.reserve(e.args.size() - first);
  for (size_t i = first; i < e.args.size(); ++i) args.positional.push_back(eval(*e.args[i], frame));
  for (const auto& kw : e.kwargs) args.named.emplace_back(kw.name, eval(*kw.value, frame));
  return args;
}

Value Renderer::call(const Value& callee, CallArgs& args) {
  if (callee.is_undefined()) throw_undefined(callee);
  TESSERA_CHECK(callee.is_function(), kInvalidArgument, "'{}' object is not callable", callee.type_name());
  const Value keep = callee;  // the function may drop the last other reference
  return keep.fn().fn(*this, args);
}

Value Renderer::eval_call(const Expr& e, const FramePtr& frame) {
  const Value callee = eval(*e.args[0], frame);
  CallArgs args = eval_args(e, 1, frame);
  return call(callee, args);
}

Value Renderer::eval_filter(const Expr& e, const FramePtr& frame) {
  const Value input = eval(*e.args[0], frame);
  TESSERA_CHECK(e.filter, kInvalidArgument, "no filter named '{}'", e.name);
  CallArgs args = eval_args(e, 1, frame);
  return e.filter(*this, input, args);
}

Value Renderer::eval_test(const Expr& e, const FramePtr& frame) {
  const Value input = eval(*e.args[0], frame);
  TESSERA_CHECK(e.test, kInvalidArgument, "no test named '{}'", e.name);
  CallArgs args = eval_args(e, 1, frame);
  return Value::boolean(e.test(*this, input, args));
}

Value Renderer::eval_compare(const Expr& e, const FramePtr& frame) {
  Value left = eval(*e.args[0], frame);
  for (size_t i = 0; i < e.cmp_ops.size(); ++i) {
    Value right = eval(*e.args[i + 1], frame);
    bool ok = false;
    switch (e.cmp_ops[i]) {
      case CmpOp::kEq: ok = equal(left, right); break;
      case CmpOp::kNe: ok = !equal(left, right); break;
      case CmpOp::kLt: ok = less(left, right); break;
      case CmpOp::kLe: ok = !less(right, left); break;
      case CmpOp::kGt: ok = less(right, left); break;
      case CmpOp::kGe: ok = !less(left, right); break;
      case CmpOp::kIn: ok = contains(right, left, budget_); break;
      case CmpOp::kNotIn: ok = !contains(right, left, budget_); break;
    }
    if (!ok) return Value::boolean(false);
    left = std::move(right);
  }
  return Value::boolean(true);
}

Value Renderer::eval_slice(const Expr& e, const FramePtr& frame) {
  const Value obj = eval(*e.args[0], frame);
  Value parts[3];
  for (int i = 0; i < 3; ++i) parts[i] = e.args[i + 1] ? eval(*e.args[i + 1], frame) : Value::none();
  if (obj.is_undefined()) throw_undefined(obj);
  return slice_value(obj, parts[0], parts[1], parts[2], budget_);
}

Value Renderer::eval_concat(const Expr& e, const FramePtr& frame) {
  std::string out;
  for (const auto& arg : e.args) {
    const Value v = eval(*arg, frame);
    append_str(out, v, budget_);
    budget_.check_size(out.size());
  }
  return make_string(std::move(out));
}

Value Renderer::eval_sequence(const Expr& e, const FramePtr& frame) {
  std::vector<Value> items;
  items.reserve(e.args.size());
  for (const auto& arg : e.args) items.push_back(eval(*arg, frame));
  return Value::array(std::move(items), e.kind == ExprKind::kTuple);
}

Value Renderer::eval_dict(const Expr& e, const FramePtr& frame) {
  Value dict = Value::object();
  for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
    Value key = eval(*e.args[i], frame);
    TESSERA_CHECK(is_hashable(key), kInvalidArgument, "unhashable type: '{}'", key.type_name());
    dict.obj().set(std::move(key), eval(*e.args[i + 1], frame));
  }
  return dict;
}

Value Renderer::get_attr(const Value& obj, std::string_view name) {
  switch (obj.kind()) {
    case Value::Kind::kUndefined: throw_undefined(obj);
    case Value::Kind::kObject: {
      if (!obj.is_namespace()) {
        Value method = find_method(obj, name);
        if (!method.is_undefined()) return method;
      }
      const Value* v = obj.obj().find(name);
      return v ? *v : missing_attribute(obj, name);
    }
    case Value::Kind::kString:
    case Value::Kind::kArray: {
      Value method = find_method(obj, name);
      return method.is_undefined() ? missing_attribute(obj, name) : method;
    }
    default: return missing_attribute(obj, name);
  }
}

Value Renderer::get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) throw_undefined(obj);
  if ((obj.is_array() || obj.is_string()) && key.is_integral()) {
    const int64_t n = py_len(obj);
    int64_t i = key.as_int();
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Value::undefined(fmt::format("'{}' has no element {}", object_type(obj), key.as_int()));
    if (obj.is_array()) return obj.arr().items[static_cast<size_t>(i)];
    return slice_value(obj, Value::integer(i), Value::integer(i + 1), Value::none(), budget_);
  }
  if (obj.is_dict() && is_hashable(key)) {
    if (const Value* v = obj.obj().find(key)) return *v;
  } else if (obj.is_namespace() && key.is_string()) {
    if (const Value* v = obj.obj().find(std::string_view(key.str()))) return *v;
  }
  if (key.is_string()) {
    if (!obj.is_namespace()) {
      Value method = find_method(obj, key.str());
      if (!method.is_undefined()) return method;
    }
    return missing_attribute(obj, key.str());
  }
  return Value::undefined(fmt::format("'{}' has no element {}", object_type(obj), to_repr(key, budget_)));
}

}  // namespace tessera::server::jinja
