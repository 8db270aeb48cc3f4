// Evaluator of the Jinja subset: executes a parsed template against
// variables and returns the text. One Renderer per render; it owns the
// budget (steps, string sizes, output size, call depth) that bounds what a
// template may do with user-supplied data.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include "template/jinja_ast.h"
#include "template/jinja_value.h"

namespace tessera::server::jinja {

struct RenderLimits {
  size_t max_output_bytes = 4u << 20;  // the rendered text, and any string built on the way
  // expression nodes + statements + loop iterations + elements visited; Qwen3's
  // template spends about 60 per message
  int64_t max_steps = 2'000'000;
  int max_call_depth = 64;             // nested macro / caller() calls
  int max_depth = 1000;                // nested evaluation (bounds the C++ stack)
  // strftime_now()'s clock: seconds since the epoch, formatted as UTC; -1
  // for the wall clock in local time. Fixed, a render is reproducible
  // (`tessera chat-template --date`).
  int64_t fixed_time = -1;
};

// A scope: a for-loop iteration, a macro call, a with block, or the
// template's top level. Values never own frames (macros hold weak
// references), so frames and values cannot form cycles.
struct Frame {
  std::shared_ptr<Frame> parent;
  std::vector<std::pair<std::string, Value>> vars;

  const Value* find(std::string_view name) const;
  void set(std::string_view name, Value value);
};
using FramePtr = std::shared_ptr<Frame>;

class Renderer {
 public:
  explicit Renderer(const RenderLimits& limits);
  const RenderLimits& limits() const { return limits_; }

  // Renders `body` with `vars` as the template's variables (the globals
  // range, namespace, dict, raise_exception and strftime_now sit below them).
  // Throws TemplateError.
  std::string render(const Body& body, std::vector<std::pair<std::string, Value>> vars);

  // ---- for built-ins --------------------------------------------------------
  Budget& budget() { return budget_; }
  void charge(int64_t n) { budget_.charge(n); }
  // A new string value, checked against the size limit.
  Value make_string(std::string s);
  std::string str(const Value& v) { return to_str(v, budget_); }
  bool equal(const Value& a, const Value& b) { return values_equal(a, b, budget_); }
  bool less(const Value& a, const Value& b) { return values_less(a, b, budget_); }
  // `obj.name` and `obj[key]` with Jinja's rules (attribute, then item, or
  // the reverse; missing gives undefined).
  Value get_attr(const Value& obj, std::string_view name);
  Value get_item(const Value& obj, const Value& key);
  // Calls a function value (macro, caller, method, global).
  Value call(const Value& callee, CallArgs& args);
  // Registers a container the template may mutate (a namespace, a list
  // given to append): emptied when the render ends, which breaks any
  // reference cycle the template built through it.
  void track_mutable(const Value& container);

  // Used by the function values that macros and call blocks create.
  Value invoke_macro(const Stmt& macro, const std::weak_ptr<Frame>& scope, CallArgs& args);
  Value invoke_caller(const Stmt& call_block, const std::weak_ptr<Frame>& scope, CallArgs& args);

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  struct DepthGuard;

  Flow exec_body(const Body& body, const FramePtr& frame);
  Flow exec(const Stmt& s, const FramePtr& frame);
  Flow exec_for(const Stmt& s, const FramePtr& frame);
  void exec_set(const Stmt& s, const FramePtr& frame);
  void exec_call_block(const Stmt& s, const FramePtr& frame);
  void assign(const std::vector<Target>& targets, const Value& value, const FramePtr& frame, SourcePos pos);
  std::string capture(const Body& body, const FramePtr& frame);
  Value apply_block_filter(const Expr& chain, Value input, const FramePtr& frame);
  void emit(std::string_view s);

  Value eval(const Expr& e, const FramePtr& frame);
  Value eval_name(const Expr& e, const FramePtr& frame);
  Value eval_call(const Expr& e, const FramePtr& frame);
  Value eval_filter(const Expr& e, const FramePtr& frame);
  Value eval_test(const Expr& e, const FramePtr& frame);
  Value eval_compare(const Expr& e, const FramePtr& frame);
  Value eval_slice(const Expr& e, const FramePtr& frame);
  Value eval_concat(const Expr& e, const FramePtr& frame);
  Value eval_sequence(const Expr& e, const FramePtr& frame);
  Value eval_dict(const Expr& e, const FramePtr& frame);
  CallArgs eval_args(const Expr& e, size_t first, const FramePtr& frame);
  Value bind_call(const Stmt& fn, const FramePtr& scope, CallArgs& args, bool is_macro);

  RenderLimits limits_;
  Budget budget_;
  std::vector<Value> mutable_;  // see track_mutable
  std::unordered_set<const void*> mutable_ids_;
  std::string* out_ = nullptr;
  int depth_ = 0;
  int call_depth_ = 0;
  const Value* block_input_ = nullptr;
};

// Arithmetic with Python's rules (int stays int, / is true division, // and
// % floor, str * int repeats, list + list concatenates). Throws Error.
Value binary_op(BinOp op, const Value& a, const Value& b, Budget& budget);
// `needle in haystack` (substring, element, key).
bool contains(const Value& haystack, const Value& needle, Budget& budget);
// Python's obj[start:stop:step] for lists, tuples and strings (none for an
// omitted part); undefined for other types.
Value slice_value(const Value& obj, const Value& start, const Value& stop, const Value& step, Budget& budget);

}  // namespace tessera::server::jinja
