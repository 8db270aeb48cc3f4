#include "template/jinja_parser.h"

#include <algorithm>
#include <initializer_list>

#include "template/jinja_builtins.h"

namespace tessera::server::jinja {

namespace {

std::string describe(const Token& t) {
  switch (t.kind) {
    case TokenKind::kText: return "template text";
    case TokenKind::kVarBegin: return "'{{'";
    case TokenKind::kVarEnd: return "'}}'";
    case TokenKind::kBlockBegin: return "'{%'";
    case TokenKind::kBlockEnd: return "'%}'";
    case TokenKind::kString: return "string";
    case TokenKind::kInt:
    case TokenKind::kFloat:
    case TokenKind::kName:
    case TokenKind::kOp: return "'" + t.text + "'";
    case TokenKind::kEof: return "end of template";
  }
  return "token";
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

  Body parse() {
    std::string which;
    Body body = parse_body({}, which, cur().pos);
    return body;
  }

 private:
  // ---- token stream ----------------------------------------------------------

  const Token& cur() const { return toks_[i_]; }
  const Token& peek() const { return toks_[std::min(i_ + 1, toks_.size() - 1)]; }
  void advance() {
    if (i_ + 1 < toks_.size()) ++i_;
  }
  bool is_op(std::string_view op) const { return cur().kind == TokenKind::kOp && cur().text == op; }
  bool is_name(std::string_view n) const { return cur().kind == TokenKind::kName && cur().text == n; }
  bool skip_op(std::string_view op) {
    if (!is_op(op)) return false;
    advance();
    return true;
  }
  [[noreturn]] void unexpected(const std::string& expected) const {
    syntax_error(cur().pos, fmt::format("expected {}, got {}", expected, describe(cur())));
  }
  void expect_op(std::string_view op) {
    if (!skip_op(op)) unexpected(fmt::format("'{}'", op));
  }
  std::string expect_name() {
    if (cur().kind != TokenKind::kName) unexpected("a name");
    std::string n = cur().text;
    advance();
    return n;
  }
  void expect_block_end() {
    if (cur().kind != TokenKind::kBlockEnd) unexpected("'%}'");
    advance();
  }

  struct DepthGuard {
    explicit DepthGuard(Parser& p) : p_(p) {
      if (++p_.depth_ > kMaxParseDepth) {
        syntax_error(p_.cur().pos, fmt::format("template nested deeper than {} levels", kMaxParseDepth));
      }
    }
    ~DepthGuard() { --p_.depth_; }
    Parser& p_;
  };

  // ---- node construction -----------------------------------------------------

  static ExprPtr node(ExprKind kind, SourcePos pos) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->pos = pos;
    return e;
  }

  // Sets the height from the children; refuses trees the evaluator could
  // not walk within its depth bound.
  static ExprPtr finish(ExprPtr e) {
    int h = 0;
    for (const auto& a : e->args) {
      if (a) h = std::max(h, a->height);
    }
    for (const auto& kw : e->kwargs) h = std::max(h, kw.value->height);
    e->height = h + 1;
    if (e->height > kMaxExprHeight) {
      syntax_error(e->pos, fmt::format("expression nested deeper than {} levels", kMaxExprHeight));
    }
    return e;
  }

  static ExprPtr make(ExprKind kind, SourcePos pos, ExprPtr a, ExprPtr b = nullptr) {
    auto e = node(kind, pos);
    e->args.push_back(std::move(a));
    if (b) e->args.push_back(std::move(b));
    return finish(std::move(e));
  }

  // ---- statements ------------------------------------------------------------

  // Parses until a block tag named in `end_tags`; consumes `{% name` and
  // leaves the rest of that tag. `which` receives the name.
  Body parse_body(std::initializer_list<std::string_view> end_tags, std::string& which, SourcePos opened_at) {
    DepthGuard guard(*this);
    Body body;
    while (true) {
      const Token& t = cur();
      switch (t.kind) {
        case TokenKind::kText: {
          auto s = std::make_unique<Stmt>();
          s->kind = StmtKind::kText;
          s->pos = t.pos;
          s->text = t.text;
          body.push_back(std::move(s));
          advance();
          break;
        }
        case TokenKind::kVarBegin: {
          auto s = std::make_unique<Stmt>();
          s->kind = StmtKind::kOutput;
          s->pos = t.pos;
          advance();
          s->expr = parse_tuple(true, false, {});
          if (cur().kind != TokenKind::kVarEnd) unexpected("'}}'");
          advance();
          body.push_back(std::move(s));
          break;
        }
        case TokenKind::kBlockBegin: {
          const Token& name = peek();
          if (name.kind == TokenKind::kName &&
              std::find(end_tags.begin(), end_tags.end(), name.text) != end_tags.end()) {
            advance();
            which = name.text;
            advance();
            return body;
          }
          advance();
          body.push_back(parse_statement());
          break;
        }
        case TokenKind::kEof: {
          if (end_tags.size() == 0) return body;
          std::string names;
          for (auto n : end_tags) names += fmt::format("{}'{}'", names.empty() ? "" : " or ", n);
          syntax_error(t.pos, fmt::format("unexpected end of template, expected {} to close the block opened at {}:{}",
                                          names, opened_at.line, opened_at.col));
        }
        default: unexpected("template text or a tag");
      }
    }
  }

  StmtPtr new_stmt(StmtKind kind, SourcePos pos) {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->pos = pos;
    return s;
  }

  StmtPtr parse_statement() {
    const SourcePos pos = cur().pos;
    if (cur().kind != TokenKind::kName) unexpected("a statement name");
    const std::string tag = expect_name();
    if (tag == "if") return parse_if(pos);
    if (tag == "for") return parse_for(pos);
    if (tag == "set") return parse_set(pos);
    if (tag == "macro") return parse_macro(pos);
    if (tag == "call") return parse_call_block(pos);
    if (tag == "filter") return parse_filter_block(pos);
    if (tag == "with") return parse_with(pos);
    if (tag == "generation") {
      auto s = new_stmt(StmtKind::kScope, pos);
      expect_block_end();
      s->body = parse_closed_body("endgeneration", pos);
      return s;
    }
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) syntax_error(pos, fmt::format("'{}' outside of a loop", tag));
      expect_block_end();
      return new_stmt(tag == "break" ? StmtKind::kBreak : StmtKind::kContinue, pos);
    }
    if (tag.rfind("end", 0) == 0 || tag == "elif" || tag == "else") {
      syntax_error(pos, fmt::format("unexpected '{}': no open block to close", tag));
    }
    syntax_error(pos, fmt::format("unknown or unsupported tag '{}'", tag));
  }

  // Body up to `{% end_tag %}`, consuming the closing tag.
  Body parse_closed_body(std::string_view end_tag, SourcePos opened_at) {
    std::string which;
    Body body = parse_body({end_tag}, which, opened_at);
    expect_block_end();
    return body;
  }

  StmtPtr parse_if(SourcePos pos) {
    auto s = new_stmt(StmtKind::kIf, pos);
    ExprPtr cond = parse_expression(true);
    expect_block_end();
    while (true) {
      std::string which;
      Body body = parse_body({"elif", "else", "endif"}, which, pos);
      s->branches.push_back({std::move(cond), std::move(body)});
      if (which == "elif") {
        cond = parse_expression(true);
        expect_block_end();
        continue;
      }
      expect_block_end();
      if (which == "else") s->branches.push_back({nullptr, parse_closed_body("endif", pos)});
      return s;
    }
  }

  std::vector<Target> parse_targets(bool allow_namespace) {
    std::vector<Target> targets;
    const bool paren = skip_op("(");
    while (true) {
      Target t;
      t.name = expect_name();
      if (allow_namespace && skip_op(".")) t.attr = expect_name();
      targets.push_back(std::move(t));
      if (!skip_op(",")) break;
      if (cur().kind != TokenKind::kName || is_name("in")) break;
    }
    if (paren) expect_op(")");
    if (targets.size() > 1) {
      for (const auto& t : targets) {
        if (!t.attr.empty()) syntax_error(cur().pos, "namespace attributes cannot be unpacked into");
      }
    }
    return targets;
  }

  StmtPtr parse_for(SourcePos pos) {
    auto s = new_stmt(StmtKind::kFor, pos);
    s->targets = parse_targets(false);
    if (!is_name("in")) unexpected("'in'");
    advance();
    s->expr = parse_tuple(false, false, {"recursive"});
    if (is_name("if")) {
      advance();
      s->cond = parse_expression(true);
    }
    if (is_name("recursive")) syntax_error(cur().pos, "recursive loops are not supported");
    expect_block_end();
    ++loop_depth_;
    std::string which;
    s->body = parse_body({"endfor", "else"}, which, pos);
    --loop_depth_;
    expect_block_end();
    if (which == "else") s->else_body = parse_closed_body("endfor", pos);
    return s;
  }

  StmtPtr parse_set(SourcePos pos) {
    std::vector<Target> targets = parse_targets(true);
    if (skip_op("=")) {
      auto s = new_stmt(StmtKind::kSet, pos);
      s->targets = std::move(targets);
      s->expr = parse_tuple(true, false, {});
      expect_block_end();
      return s;
    }
    auto s = new_stmt(StmtKind::kSetBlock, pos);
    if (targets.size() != 1) syntax_error(pos, "a set block assigns one name");
    s->targets = std::move(targets);
    if (is_op("|")) s->expr = parse_filter(node(ExprKind::kBlockInput, cur().pos), false);
    expect_block_end();
    s->body = parse_closed_body("endset", pos);
    return s;
  }

  std::vector<Param> parse_signature() {
    std::vector<Param> params;
    expect_op("(");
    while (!is_op(")")) {
      if (!params.empty()) expect_op(",");
      if (is_op(")")) break;
      Param p;
      p.name = expect_name();
      if (skip_op("=")) p.default_value = parse_expression(true);
      params.push_back(std::move(p));
    }
    advance();
    return params;
  }

  StmtPtr parse_macro(SourcePos pos) {
    auto s = new_stmt(StmtKind::kMacro, pos);
    s->text = expect_name();
    s->params = parse_signature();
    expect_block_end();
    const int saved_loops = loop_depth_;
    loop_depth_ = 0;
    s->body = parse_closed_body("endmacro", pos);
    loop_depth_ = saved_loops;
    return s;
  }

  StmtPtr parse_call_block(SourcePos pos) {
    auto s = new_stmt(StmtKind::kCallBlock, pos);
    if (is_op("(")) s->params = parse_signature();
    s->expr = parse_expression(true);
    if (s->expr->kind != ExprKind::kCall) syntax_error(s->expr->pos, "expected a call after 'call'");
    expect_block_end();
    const int saved_loops = loop_depth_;
    loop_depth_ = 0;
    s->body = parse_closed_body("endcall", pos);
    loop_depth_ = saved_loops;
    return s;
  }

  StmtPtr parse_filter_block(SourcePos pos) {
    auto s = new_stmt(StmtKind::kFilterBlock, pos);
    s->expr = parse_filter(node(ExprKind::kBlockInput, pos), true);
    expect_block_end();
    s->body = parse_closed_body("endfilter", pos);
    return s;
  }

  StmtPtr parse_with(SourcePos pos) {
    auto s = new_stmt(StmtKind::kWith, pos);
    while (cur().kind != TokenKind::kBlockEnd) {
      if (!s->targets.empty()) expect_op(",");
      Target t;
      t.name = expect_name();
      s->targets.push_back(std::move(t));
      expect_op("=");
      s->values.push_back(parse_expression(true));
    }
    expect_block_end();
    s->body = parse_closed_body("endwith", pos);
    return s;
  }

  // ---- expressions (Jinja's precedence, loosest first) ------------------------

  bool at_tuple_end(std::initializer_list<std::string_view> extra_end) const {
    if (cur().kind == TokenKind::kVarEnd || cur().kind == TokenKind::kBlockEnd || is_op(")")) return true;
    if (cur().kind == TokenKind::kName) {
      return std::find(extra_end.begin(), extra_end.end(), cur().text) != extra_end.end();
    }
    return false;
  }

  // `a`, or `a, b, ...` as a tuple. `explicit_parens` allows `()`.
  ExprPtr parse_tuple(bool with_condexpr, bool explicit_parens, std::initializer_list<std::string_view> extra_end) {
    const SourcePos pos = cur().pos;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (at_tuple_end(extra_end)) break;
      items.push_back(parse_expression(with_condexpr));
      if (!is_op(",")) break;
      is_tuple = true;
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items.front());
      if (!explicit_parens) unexpected("an expression");
    }
    auto e = node(ExprKind::kTuple, pos);
    e->args = std::move(items);
    return finish(std::move(e));
  }

  ExprPtr parse_expression(bool with_condexpr) {
    DepthGuard guard(*this);
    if (!with_condexpr) return parse_or();
    ExprPtr expr = parse_or();
    while (is_name("if")) {
      const SourcePos pos = cur().pos;
      advance();
      ExprPtr cond = parse_or();
      ExprPtr else_value;
      if (is_name("else")) {
        advance();
        else_value = parse_expression(true);
      }
      auto e = node(ExprKind::kCond, pos);
      e->args.push_back(std::move(expr));
      e->args.push_back(std::move(cond));
      if (else_value) e->args.push_back(std::move(else_value));
      expr = finish(std::move(e));
    }
    return expr;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      const SourcePos pos = cur().pos;
      advance();
      left = make(ExprKind::kOr, pos, std::move(left), parse_and());
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      const SourcePos pos = cur().pos;
      advance();
      left = make(ExprKind::kAnd, pos, std::move(left), parse_not());
    }
    return left;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard guard(*this);
      const SourcePos pos = cur().pos;
      advance();
      return make(ExprKind::kNot, pos, parse_not());
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const SourcePos pos = cur().pos;
    ExprPtr first = parse_math1();
    std::vector<CmpOp> ops;
    std::vector<ExprPtr> operands;
    while (true) {
      CmpOp op;
      if (is_op("==")) op = CmpOp::kEq;
      else if (is_op("!=")) op = CmpOp::kNe;
      else if (is_op("<")) op = CmpOp::kLt;
      else if (is_op("<=")) op = CmpOp::kLe;
      else if (is_op(">")) op = CmpOp::kGt;
      else if (is_op(">=")) op = CmpOp::kGe;
      else if (is_name("in")) op = CmpOp::kIn;
      else if (is_name("not") && peek().kind == TokenKind::kName && peek().text == "in") {
        op = CmpOp::kNotIn;
        advance();
      } else {
        break;
      }
      advance();
      ops.push_back(op);
      operands.push_back(parse_math1());
    }
    if (ops.empty()) return first;
    auto e = node(ExprKind::kCompare, pos);
    e->args.push_back(std::move(first));
    for (auto& o : operands) e->args.push_back(std::move(o));
    e->cmp_ops = std::move(ops);
    return finish(std::move(e));
  }

  ExprPtr binary(BinOp op, SourcePos pos, ExprPtr a, ExprPtr b) {
    auto e = make(ExprKind::kBinary, pos, std::move(a), std::move(b));
    e->bin_op = op;
    return e;
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      const BinOp op = is_op("+") ? BinOp::kAdd : BinOp::kSub;
      const SourcePos pos = cur().pos;
      advance();
      left = binary(op, pos, std::move(left), parse_concat());
    }
    return left;
  }

  ExprPtr parse_concat() {
    const SourcePos pos = cur().pos;
    ExprPtr first = parse_math2();
    if (!is_op("~")) return first;
    auto e = node(ExprKind::kConcat, pos);
    e->args.push_back(std::move(first));
    while (skip_op("~")) e->args.push_back(parse_math2());
    return finish(std::move(e));
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (true) {
      BinOp op;
      if (is_op("*")) op = BinOp::kMul;
      else if (is_op("/")) op = BinOp::kDiv;
      else if (is_op("//")) op = BinOp::kFloorDiv;
      else if (is_op("%")) op = BinOp::kMod;
      else break;
      const SourcePos pos = cur().pos;
      advance();
      left = binary(op, pos, std::move(left), parse_pow());
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (is_op("**")) {
      const SourcePos pos = cur().pos;
      advance();
      left = binary(BinOp::kPow, pos, std::move(left), parse_unary(true));
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(*this);
    const SourcePos pos = cur().pos;
    ExprPtr e;
    if (skip_op("-")) {
      e = make(ExprKind::kNeg, pos, parse_unary(false));
    } else if (skip_op("+")) {
      e = make(ExprKind::kPos, pos, parse_unary(false));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr literal(Value v, SourcePos pos) {
    auto e = node(ExprKind::kLiteral, pos);
    e->literal = std::move(v);
    return e;
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    const SourcePos pos = t.pos;
    switch (t.kind) {
      case TokenKind::kName: {
        const std::string name = t.text;
        advance();
        if (name == "true" || name == "True") return literal(Value::boolean(true), pos);
        if (name == "false" || name == "False") return literal(Value::boolean(false), pos);
        if (name == "none" || name == "None") return literal(Value::none(), pos);
        auto e = node(ExprKind::kName, pos);
        e->name = name;
        return e;
      }
      case TokenKind::kString: {
        std::string s = t.text;
        advance();
        while (cur().kind == TokenKind::kString) {  // adjacent literals concatenate
          s += cur().text;
          advance();
        }
        return literal(Value::string(std::move(s)), pos);
      }
      case TokenKind::kInt: {
        const int64_t v = t.int_value;
        advance();
        return literal(Value::integer(v), pos);
      }
      case TokenKind::kFloat: {
        const double v = t.float_value;
        advance();
        return literal(Value::number(v), pos);
      }
      case TokenKind::kOp:
        if (skip_op("(")) {
          ExprPtr e = parse_tuple(true, true, {});
          expect_op(")");
          return e;
        }
        if (is_op("[")) return parse_list();
        if (is_op("{")) return parse_dict();
        break;
      default: break;
    }
    unexpected("an expression");
  }

  ExprPtr parse_list() {
    auto e = node(ExprKind::kList, cur().pos);
    expect_op("[");
    while (!is_op("]")) {
      if (!e->args.empty()) expect_op(",");
      if (is_op("]")) break;
      e->args.push_back(parse_expression(true));
    }
    advance();
    return finish(std::move(e));
  }

  ExprPtr parse_dict() {
    auto e = node(ExprKind::kDict, cur().pos);
    expect_op("{");
    while (!is_op("}")) {
      if (!e->args.empty()) expect_op(",");
      if (is_op("}")) break;
      e->args.push_back(parse_expression(true));
      expect_op(":");
      e->args.push_back(parse_expression(true));
    }
    advance();
    return finish(std::move(e));
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      if (is_op(".") || is_op("[")) {
        e = parse_subscript(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr obj) {
    const SourcePos pos = cur().pos;
    if (skip_op(".")) {
      if (cur().kind == TokenKind::kName) {
        auto e = make(ExprKind::kAttr, pos, std::move(obj));
        e->name = expect_name();
        return e;
      }
      if (cur().kind == TokenKind::kInt) {
        ExprPtr key = literal(Value::integer(cur().int_value), cur().pos);
        advance();
        return make(ExprKind::kItem, pos, std::move(obj), std::move(key));
      }
      unexpected("an attribute name");
    }
    expect_op("[");
    ExprPtr result = parse_subscripted(std::move(obj), pos);
    if (is_op(",")) syntax_error(cur().pos, "tuple subscripts are not supported");
    expect_op("]");
    return result;
  }

  // `obj[key]` or `obj[start:stop:step]` with any part omitted.
  ExprPtr parse_subscripted(ExprPtr obj, SourcePos pos) {
    ExprPtr start;
    if (!is_op(":")) {
      start = parse_expression(true);
      if (!is_op(":")) return make(ExprKind::kItem, pos, std::move(obj), std::move(start));
    }
    advance();  // ':'
    ExprPtr stop;
    ExprPtr step;
    if (!is_op("]") && !is_op(",") && !is_op(":")) stop = parse_expression(true);
    if (skip_op(":")) {
      if (!is_op("]") && !is_op(",")) step = parse_expression(true);
    }
    auto e = node(ExprKind::kSlice, pos);
    e->args.push_back(std::move(obj));
    e->args.push_back(std::move(start));
    e->args.push_back(std::move(stop));
    e->args.push_back(std::move(step));
    return finish(std::move(e));
  }

  // Parses `(args)` into e->args (after any already there) and e->kwargs.
  void parse_call_args(Expr& e) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (is_op(")")) break;
      if (is_op("*") || is_op("**")) syntax_error(cur().pos, "*args and **kwargs in calls are not supported");
      if (cur().kind == TokenKind::kName && peek().kind == TokenKind::kOp && peek().text == "=") {
        KwArg kw;
        kw.name = expect_name();
        advance();
        kw.value = parse_expression(true);
        e.kwargs.push_back(std::move(kw));
      } else {
        if (!e.kwargs.empty()) syntax_error(cur().pos, "positional argument after keyword argument");
        e.args.push_back(parse_expression(true));
      }
    }
    advance();
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto e = node(ExprKind::kCall, cur().pos);
    e->args.push_back(std::move(callee));
    parse_call_args(*e);
    return finish(std::move(e));
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    while (true) {
      if (is_op("|")) {
        e = parse_filter(std::move(e), false);
      } else if (is_name("is")) {
        e = parse_test(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  std::string parse_dotted_name() {
    std::string name = expect_name();
    while (skip_op(".")) {
      name += '.';
      name += expect_name();
    }
    return name;
  }

  // `| name(args) | name ...`; with `start_inline` the first filter has no
  // pipe (`{% filter upper %}`).
  ExprPtr parse_filter(ExprPtr input, bool start_inline) {
    while (start_inline || is_op("|")) {
      if (!start_inline) advance();
      start_inline = false;
      auto e = node(ExprKind::kFilter, cur().pos);
      e->name = parse_dotted_name();
      e->filter = find_filter(e->name);
      e->args.push_back(std::move(input));
      if (is_op("(")) parse_call_args(*e);
      input = finish(std::move(e));
    }
    return input;
  }

  ExprPtr parse_test(ExprPtr input) {
    const SourcePos pos = cur().pos;
    advance();  // 'is'
    bool negated = false;
    if (is_name("not")) {
      negated = true;
      advance();
    }
    auto e = node(ExprKind::kTest, pos);
    e->name = parse_dotted_name();
    e->test = find_test(e->name);
    e->args.push_back(std::move(input));
    const Token& t = cur();
    if (is_op("(")) {
      parse_call_args(*e);
    } else if ((t.kind == TokenKind::kName || t.kind == TokenKind::kString || t.kind == TokenKind::kInt ||
                t.kind == TokenKind::kFloat || is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) syntax_error(t.pos, "tests cannot be chained with 'is'");
      e->args.push_back(parse_postfix(parse_primary()));
    }
    ExprPtr test = finish(std::move(e));
    return negated ? make(ExprKind::kNot, pos, std::move(test)) : std::move(test);
  }

  std::vector<Token> toks_;
  size_t i_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

Body parse_template(std::string_view source) { return Parser(lex(source)).parse(); }

}  // namespace tessera::server::jinja
