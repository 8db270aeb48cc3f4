// Syntax tree of the Jinja subset. One node struct per family (expressions,
// statements) with a kind tag; which fields a kind uses is listed beside it.
// The parser bounds every tree's height, so the evaluator and the
// destructors recurse a bounded number of times.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "template/jinja_lexer.h"
#include "template/jinja_value.h"

namespace tessera::server::jinja {

using FilterFn = Value (*)(Renderer&, const Value& input, CallArgs& args);
using TestFn = bool (*)(Renderer&, const Value& input, CallArgs& args);

enum class ExprKind : uint8_t {
  kLiteral,     // literal
  kName,        // name
  kList,        // args: elements
  kTuple,       // args: elements
  kDict,        // args: key, value, key, value, ...
  kAttr,        // args: [object]; name: attribute
  kItem,        // args: [object, key]
  kSlice,       // args: [object, start?, stop?, step?] (null when omitted)
  kCall,        // args: [callee, positional...]; kwargs
  kFilter,      // args: [input, positional...]; kwargs; name; filter (null: unknown, fails when reached)
  kTest,        // args: [input, positional...]; kwargs; name; test (likewise)
  kNot,         // args: [operand]
  kNeg,         // args: [operand]
  kPos,         // args: [operand]
  kBinary,      // args: [lhs, rhs]; bin_op
  kConcat,      // args: operands of ~
  kAnd,         // args: [lhs, rhs]
  kOr,          // args: [lhs, rhs]
  kCompare,     // args: [first, operands...]; cmp_ops (one per operand)
  kCond,        // args: [value, condition, else_value?]
  kBlockInput,  // the captured body of a {% filter %} / {% set x | f %} block
};

enum class BinOp : uint8_t { kAdd, kSub, kMul, kDiv, kFloorDiv, kMod, kPow };
enum class CmpOp : uint8_t { kEq, kNe, kLt, kLe, kGt, kGe, kIn, kNotIn };

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct KwArg {
  std::string name;
  ExprPtr value;
};

struct Expr {
  ExprKind kind = ExprKind::kLiteral;
  SourcePos pos;
  int height = 1;  // 1 + the tallest child: bounded by the parser
  Value literal;
  std::string name;
  std::vector<ExprPtr> args;
  std::vector<KwArg> kwargs;
  std::vector<CmpOp> cmp_ops;
  BinOp bin_op = BinOp::kAdd;
  FilterFn filter = nullptr;
  TestFn test = nullptr;
};

enum class StmtKind : uint8_t {
  kText,         // text
  kOutput,       // expr
  kIf,           // branches (a null condition is the else branch)
  kFor,          // targets, expr (iterable), cond (optional filter), body, else_body
  kSet,          // targets, expr
  kSetBlock,     // targets (one), body, expr (optional filter chain over kBlockInput)
  kMacro,        // text (name), params, body
  kCallBlock,    // expr (the call), params (caller's), body (caller's)
  kFilterBlock,  // expr (filter chain over kBlockInput), body
  kWith,         // targets, values, body
  kScope,        // body ({% generation %}: renders its body)
  kBreak,
  kContinue,
};

// `name`, or `name.attr` for an assignment into a namespace.
struct Target {
  std::string name;
  std::string attr;
};

struct Param {
  std::string name;
  ExprPtr default_value;  // null: required
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Branch {
  ExprPtr cond;
  Body body;
};

struct Stmt {
  StmtKind kind = StmtKind::kText;
  SourcePos pos;
  std::string text;
  ExprPtr expr;
  ExprPtr cond;
  std::vector<Branch> branches;
  std::vector<Target> targets;
  std::vector<ExprPtr> values;
  std::vector<Param> params;
  Body body;
  Body else_body;
};

}  // namespace tessera::server::jinja
