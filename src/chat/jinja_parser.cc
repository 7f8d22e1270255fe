// chat/jinja_parser.cc — recursive descent over jinja2's grammar (same precedence and the same
// places where tuples and conditional expressions are allowed).
#include "chat/jinja_parser.h"

#include <algorithm>

#include <fmt/format.h>

#include "chat/jinja_lexer.h"

namespace kestrel::chat {

namespace {

// Deep nesting in untrusted templates must fail cleanly instead of exhausting the stack.
constexpr int kMaxDepth = 200;
constexpr int kMaxHeight = 400;

using TK = Token::Kind;

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

  Body parse_all() {
    std::string which;
    Body body = parse_body({}, &which);
    return body;
  }

 private:
  // RAII nesting counter.
  struct DepthGuard {
    Parser* p;
    explicit DepthGuard(Parser* parser) : p(parser) {
      if (++p->depth_ > kMaxDepth) p->fail("template nested too deeply");
    }
    ~DepthGuard() { --p->depth_; }
  };

  const Token& cur() const { return toks_[pos_]; }
  const Token& peek(size_t k = 1) const { return toks_[std::min(pos_ + k, toks_.size() - 1)]; }
  const Token& next() {
    const Token& t = toks_[pos_];
    if (pos_ + 1 < toks_.size()) ++pos_;
    return t;
  }
  bool is_op(const char* op) const { return cur().kind == TK::kOp && cur().text == op; }
  bool is_name(const char* name) const { return cur().kind == TK::kName && cur().text == name; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const char* name) {
    if (!is_name(name)) return false;
    next();
    return true;
  }

  static std::string describe(const Token& t) {
    switch (t.kind) {
      case TK::kEof:
        return "end of template";
      case TK::kBlockEnd:
        return "end of statement block";
      case TK::kVarEnd:
        return "end of print statement";
      case TK::kBlockBegin:
        return "begin of statement block";
      case TK::kVarBegin:
        return "begin of print statement";
      case TK::kText:
        return "template data";
      default:
        return "'" + t.text + "'";
    }
  }

  [[noreturn]] void fail(const std::string& msg) const {
    throw JinjaError{"TemplateSyntaxError: " + msg, cur().line, cur().column};
  }
  [[noreturn]] void unexpected() const { fail("unexpected " + describe(cur())); }

  void expect_op(const char* op) {
    if (!skip_op(op)) fail(fmt::format("expected '{}', got {}", op, describe(cur())));
  }
  void expect_block_end() {
    if (cur().kind != TK::kBlockEnd)
      fail("expected end of statement block, got " + describe(cur()));
    next();
  }
  std::string expect_name() {
    if (cur().kind != TK::kName) fail("expected a name, got " + describe(cur()));
    return next().text;
  }

  template <typename T>
  static void place(T& node, const Token& t) {
    node.line = t.line;
    node.column = t.column;
  }

  ExprPtr make(Expr::Kind kind, const Token& at) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    place(*e, at);
    return e;
  }

  // Chains such as a+a+a… or x|f|f… build deep trees without deep parser recursion.
  ExprPtr finish(ExprPtr e) {
    int h = 0;
    for (const auto& c : e->a)
      if (c) h = std::max(h, c->height);
    for (const auto& kv : e->kwargs)
      if (kv.second) h = std::max(h, kv.second->height);
    e->height = h + 1;
    if (e->height > kMaxHeight) fail("expression nested too deeply");
    return e;
  }

  // ---- statements ----

  Body parse_body(const std::vector<std::string>& ends, std::string* which) {
    DepthGuard guard(this);
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.kind == TK::kEof) {
        if (!ends.empty())
          fail(fmt::format("unexpected end of template, expected '{}'", ends.back()));
        return body;
      }
      if (t.kind == TK::kText) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::kText;
        s->text = t.text;
        place(*s, t);
        body.push_back(std::move(s));
        next();
        continue;
      }
      if (t.kind == TK::kVarBegin) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::kOutput;
        place(*s, t);
        next();
        s->expr = parse_tuple(true, {});
        if (cur().kind != TK::kVarEnd)
          fail("expected end of print statement, got " + describe(cur()));
        next();
        body.push_back(std::move(s));
        continue;
      }
      if (t.kind != TK::kBlockBegin) unexpected();
      const Token& name = peek();
      if (name.kind == TK::kName && std::find(ends.begin(), ends.end(), name.text) != ends.end()) {
        next();
        *which = next().text;
        return body;
      }
      body.push_back(parse_statement());
    }
  }

  StmtPtr parse_statement() {
    const Token& begin = next();
    if (cur().kind != TK::kName) fail("tag name expected");
    const std::string tag = cur().text;
    auto s = std::make_unique<Stmt>();
    place(*s, begin);
    next();
    std::string which;
    if (tag == "if") {
      s->kind = Stmt::Kind::kIf;
      s->conds.push_back(parse_tuple(false, {}));
      expect_block_end();
      while (true) {
        s->bodies.push_back(parse_body({"elif", "else", "endif"}, &which));
        if (which == "elif") {
          s->conds.push_back(parse_tuple(false, {}));
          expect_block_end();
          continue;
        }
        if (which == "else") {
          expect_block_end();
          s->else_body = parse_body({"endif"}, &which);
        }
        expect_block_end();
        break;
      }
    } else if (tag == "for") {
      s->kind = Stmt::Kind::kFor;
      s->target = parse_target(false);
      if (!skip_name("in")) fail("expected 'in', got " + describe(cur()));
      s->expr = parse_tuple(false, {"recursive", "if"});
      if (skip_name("if")) s->cond = parse_expression();
      if (is_name("recursive")) fail("recursive loops are not supported");
      expect_block_end();
      ++loop_depth_;
      s->bodies.push_back(parse_body({"endfor", "else"}, &which));
      --loop_depth_;
      if (which == "else") {
        expect_block_end();
        s->else_body = parse_body({"endfor"}, &which);
      }
      expect_block_end();
    } else if (tag == "set") {
      s->target = parse_target(true);
      if (skip_op("=")) {
        s->kind = Stmt::Kind::kSet;
        s->expr = parse_tuple(true, {});
        expect_block_end();
      } else {
        if (s->target.tuple) fail("block set takes one name");
        s->kind = Stmt::Kind::kSetBlock;
        if (is_op("|")) s->filter_expr = parse_filter(nullptr, false);
        expect_block_end();
        s->bodies.push_back(parse_body({"endset"}, &which));
        expect_block_end();
      }
    } else if (tag == "macro") {
      s->kind = Stmt::Kind::kMacro;
      s->macro = std::make_shared<MacroDef>();
      s->macro->name = expect_name();
      parse_params(s->macro->params);
      expect_block_end();
      const int saved = loop_depth_;
      loop_depth_ = 0;
      s->macro->body = parse_body({"endmacro"}, &which);
      loop_depth_ = saved;
      expect_block_end();
    } else if (tag == "call") {
      s->kind = Stmt::Kind::kCallBlock;
      s->macro = std::make_shared<MacroDef>();
      s->macro->name = "caller";
      if (is_op("(")) parse_params(s->macro->params);
      s->expr = parse_expression();
      if (s->expr->kind != Expr::Kind::kCall) fail("expected call");
      expect_block_end();
      s->macro->body = parse_body({"endcall"}, &which);
      expect_block_end();
    } else if (tag == "filter") {
      s->kind = Stmt::Kind::kFilterBlock;
      s->filter_expr = parse_filter(nullptr, true);
      expect_block_end();
      s->bodies.push_back(parse_body({"endfilter"}, &which));
      expect_block_end();
    } else if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) fail(fmt::format("'{}' outside of a loop", tag));
      s->kind = tag == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue;
      expect_block_end();
    } else {
      pos_--;
      fail(fmt::format("Encountered unknown tag '{}'.", tag));
    }
    return s;
  }

  void parse_params(std::vector<std::pair<std::string, ExprPtr>>& params) {
    expect_op("(");
    while (!is_op(")")) {
      if (!params.empty()) expect_op(",");
      if (is_op(")")) break;
      std::string name = expect_name();
      ExprPtr dflt;
      if (skip_op("="))
        dflt = parse_expression();
      else if (!params.empty() && params.back().second)
        fail("non-default argument follows default argument");
      params.emplace_back(std::move(name), std::move(dflt));
    }
    next();
  }

  Target parse_target(bool with_namespace) {
    Target t;
    const bool paren = skip_op("(");
    t.names.push_back(expect_name());
    if (with_namespace && !paren && is_op(".")) {
      next();
      t.attr = expect_name();
      return t;
    }
    while (skip_op(",")) {
      t.tuple = true;
      if (cur().kind != TK::kName || is_name("in")) break;
      t.names.push_back(expect_name());
    }
    if (paren) {
      expect_op(")");
      t.tuple = true;
    }
    for (const auto& n : t.names)
      if (n == "true" || n == "false" || n == "none" || n == "True" || n == "False" || n == "None")
        fail(fmt::format("Can't assign to '{}'", n));
    return t;
  }

  // ---- expressions ----

  bool is_tuple_end(const std::vector<std::string>& extra_end) const {
    if (cur().kind == TK::kVarEnd || cur().kind == TK::kBlockEnd || is_op(")")) return true;
    return cur().kind == TK::kName &&
           std::find(extra_end.begin(), extra_end.end(), cur().text) != extra_end.end();
  }

  ExprPtr parse_tuple(bool with_condexpr, const std::vector<std::string>& extra_end,
                      bool explicit_parens = false) {
    const Token start = cur();
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (is_tuple_end(extra_end)) break;
      items.push_back(with_condexpr ? parse_expression() : parse_or());
      if (is_op(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parens) fail("Expected an expression, got " + describe(cur()));
    }
    auto e = make(Expr::Kind::kTuple, start);
    e->a = std::move(items);
    return finish(std::move(e));
  }

  ExprPtr parse_expression() {
    DepthGuard guard(this);
    ExprPtr e = parse_or();
    while (is_name("if")) {
      const Token at = next();
      auto c = make(Expr::Kind::kCond, at);
      ExprPtr test = parse_or();
      ExprPtr other;
      if (skip_name("else")) other = parse_expression();
      c->a.push_back(std::move(test));
      c->a.push_back(std::move(e));
      c->a.push_back(std::move(other));
      e = finish(std::move(c));
    }
    return e;
  }

  ExprPtr binary(const Token& at, std::string op, ExprPtr l, ExprPtr r) {
    auto e = make(Expr::Kind::kBinary, at);
    e->name = std::move(op);
    e->a.push_back(std::move(l));
    e->a.push_back(std::move(r));
    return finish(std::move(e));
  }

  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (is_name("or")) {
      const Token at = next();
      e = binary(at, "or", std::move(e), parse_and());
    }
    return e;
  }

  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (is_name("and")) {
      const Token at = next();
      e = binary(at, "and", std::move(e), parse_not());
    }
    return e;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard guard(this);
      const Token at = next();
      auto e = make(Expr::Kind::kNot, at);
      e->a.push_back(parse_not());
      return finish(std::move(e));
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const Token start = cur();
    ExprPtr first = parse_math1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (cur().kind == TK::kOp &&
          (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == "<=" ||
           cur().text == ">" || cur().text == ">=")) {
        op = next().text;
      } else if (is_name("in")) {
        next();
        op = "in";
      } else if (is_name("not") && peek().kind == TK::kName && peek().text == "in") {
        next();
        next();
        op = "notin";
      } else {
        break;
      }
      if (!cmp) {
        cmp = make(Expr::Kind::kCompare, start);
        cmp->a.push_back(std::move(first));
      }
      cmp->ops.push_back(op);
      cmp->a.push_back(parse_math1());
    }
    return cmp ? finish(std::move(cmp)) : std::move(first);
  }

  ExprPtr parse_math1() {
    ExprPtr e = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token at = next();
      e = binary(at, at.text, std::move(e), parse_concat());
    }
    return e;
  }

  ExprPtr parse_concat() {
    ExprPtr e = parse_math2();
    while (is_op("~")) {
      const Token at = next();
      e = binary(at, "~", std::move(e), parse_math2());
    }
    return e;
  }

  ExprPtr parse_math2() {
    ExprPtr e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token at = next();
      e = binary(at, at.text, std::move(e), parse_pow());
    }
    return e;
  }

  ExprPtr parse_pow() {
    ExprPtr e = parse_unary(true);
    while (is_op("**")) {
      const Token at = next();
      e = binary(at, "**", std::move(e), parse_unary(true));
    }
    return e;
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(this);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      const Token at = next();
      e = make(at.text == "-" ? Expr::Kind::kNeg : Expr::Kind::kPos, at);
      e->a.push_back(parse_unary(false));
      e = finish(std::move(e));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    DepthGuard guard(this);
    const Token t = cur();
    if (t.kind == TK::kName) {
      next();
      if (t.text == "true" || t.text == "True" || t.text == "false" || t.text == "False") {
        auto e = make(Expr::Kind::kConst, t);
        e->value = Value::boolean(t.text[0] == 't' || t.text[0] == 'T');
        return e;
      }
      if (t.text == "none" || t.text == "None") {
        auto e = make(Expr::Kind::kConst, t);
        e->value = Value::none();
        return e;
      }
      auto e = make(Expr::Kind::kName, t);
      e->name = t.text;
      return e;
    }
    if (t.kind == TK::kString) {
      std::string s;
      while (cur().kind == TK::kString) s += next().text;
      auto e = make(Expr::Kind::kConst, t);
      e->value = Value::string(std::move(s));
      return e;
    }
    if (t.kind == TK::kInt || t.kind == TK::kFloat) {
      next();
      auto e = make(Expr::Kind::kConst, t);
      e->value = t.kind == TK::kInt ? Value::integer(t.int_value) : Value::number(t.float_value);
      return e;
    }
    if (is_op("(")) {
      next();
      ExprPtr e = parse_tuple(true, {}, true);
      expect_op(")");
      return e;
    }
    if (is_op("[")) {
      next();
      auto e = make(Expr::Kind::kList, t);
      while (!is_op("]")) {
        if (!e->a.empty()) expect_op(",");
        if (is_op("]")) break;
        e->a.push_back(parse_expression());
      }
      next();
      return finish(std::move(e));
    }
    if (is_op("{")) {
      next();
      auto e = make(Expr::Kind::kDict, t);
      while (!is_op("}")) {
        if (!e->a.empty()) expect_op(",");
        if (is_op("}")) break;
        ExprPtr key = parse_expression();
        expect_op(":");
        e->kwargs.emplace_back("", std::move(key));
        e->a.push_back(parse_expression());
      }
      next();
      return finish(std::move(e));
    }
    unexpected();
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      if (is_op(".")) {
        const Token at = next();
        if (cur().kind == TK::kName) {
          auto g = make(Expr::Kind::kAttr, at);
          g->name = next().text;
          g->a.push_back(std::move(e));
          e = finish(std::move(g));
        } else if (cur().kind == TK::kInt) {
          auto g = make(Expr::Kind::kItem, at);
          g->a.push_back(std::move(e));
          auto idx = make(Expr::Kind::kConst, cur());
          idx->value = Value::integer(next().int_value);
          g->a.push_back(std::move(idx));
          e = finish(std::move(g));
        } else {
          fail("expected name or number");
        }
      } else if (is_op("[")) {
        e = parse_subscript(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr obj) {
    const Token at = next();
    std::vector<ExprPtr> items;
    ExprPtr slice;
    while (!is_op("]")) {
      if (!items.empty() || slice) expect_op(",");
      ExprPtr start;
      if (!is_op(":")) {
        start = parse_expression();
        if (!is_op(":")) {
          items.push_back(std::move(start));
          continue;
        }
      }
      next();
      auto s = make(Expr::Kind::kSlice, at);
      s->a.push_back(std::move(obj));
      s->a.push_back(std::move(start));
      s->a.push_back(is_op("]") || is_op(",") || is_op(":") ? nullptr : parse_expression());
      if (skip_op(":"))
        s->a.push_back(is_op("]") || is_op(",") ? nullptr : parse_expression());
      else
        s->a.push_back(nullptr);
      slice = std::move(s);
      if (!items.empty() || is_op(",")) fail("multi-dimensional slices are not supported");
    }
    next();
    if (slice) return finish(std::move(slice));
    if (items.empty()) fail("expected subscript expression");
    auto g = make(Expr::Kind::kItem, at);
    g->a.push_back(std::move(obj));
    if (items.size() == 1) {
      g->a.push_back(std::move(items[0]));
    } else {
      auto tup = make(Expr::Kind::kTuple, at);
      tup->a = std::move(items);
      g->a.push_back(finish(std::move(tup)));
    }
    return finish(std::move(g));
  }

  void parse_call_args(Expr& call) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (is_op(")")) break;
      if (is_op("*") || is_op("**")) fail("*args and **kwargs are not supported");
      if (cur().kind == TK::kName && peek().kind == TK::kOp && peek().text == "=") {
        std::string key = next().text;
        next();
        call.kwargs.emplace_back(std::move(key), parse_expression());
      } else {
        if (!call.kwargs.empty()) fail("positional argument follows keyword argument");
        call.a.push_back(parse_expression());
      }
    }
    next();
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto c = make(Expr::Kind::kCall, cur());
    c->a.push_back(std::move(callee));
    parse_call_args(*c);
    return finish(std::move(c));
  }

  std::string dotted_name() {
    std::string name = expect_name();
    while (is_op(".")) {
      next();
      name += "." + expect_name();
    }
    return name;
  }

  ExprPtr parse_filter(ExprPtr obj, bool start_inline) {
    while (is_op("|") || start_inline) {
      if (!start_inline) next();
      start_inline = false;
      auto f = make(Expr::Kind::kFilter, cur());
      f->name = dotted_name();
      f->a.push_back(std::move(obj));
      if (is_op("(")) parse_call_args(*f);
      obj = finish(std::move(f));
    }
    return obj;
  }

  ExprPtr parse_test(ExprPtr obj) {
    const Token at = next();
    auto t = make(Expr::Kind::kTest, at);
    t->negated = skip_name("not");
    t->name = dotted_name();
    t->a.push_back(std::move(obj));
    if (is_op("(")) {
      parse_call_args(*t);
    } else if ((cur().kind == TK::kName || cur().kind == TK::kString || cur().kind == TK::kInt ||
                cur().kind == TK::kFloat || is_op("(") || is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) fail("You cannot chain multiple tests with is");
      t->a.push_back(parse_postfix(parse_primary()));
    }
    return finish(std::move(t));
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

  std::vector<Token> toks_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

std::shared_ptr<const Program> parse_template(std::string_view source) {
  auto program = std::make_shared<Program>();
  Parser parser(tokenize(source));
  program->body = parser.parse_all();
  return program;
}

}  // namespace kestrel::chat
