// chat/jinja_ast.h — the parsed template: expression and statement trees. Immutable after
// parsing, so one tree serves concurrent renders.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/jinja_value.h"

namespace kestrel::chat {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind : uint8_t {
    kConst,    // value
    kName,     // name
    kAttr,     // a[0].name
    kItem,     // a[0][a[1]]
    kSlice,    // a[0][a[1]:a[2]:a[3]], null children for absent bounds
    kCall,     // a[0](a[1..], kwargs)
    kFilter,   // a[0] | name(a[1..], kwargs); a[0] null in {% filter %} blocks
    kTest,     // a[0] is [not] name(a[1..])
    kNeg,      // -a[0]
    kPos,      // +a[0]
    kNot,      // not a[0]
    kBinary,   // a[0] op a[1]: + - * / // % ** ~ and or
    kCompare,  // a[0] ops[0] a[1] ops[1] a[2] … (== != < <= > >= in notin)
    kCond,     // a[1] if a[0] else a[2] (a[2] null: undefined)
    kList,     // [a…]
    kTuple,    // (a…)
    kDict,     // {keys[i]: a[i]}
  };
  Kind kind = Kind::kConst;
  Value value;
  std::string name;  // name / attribute / filter / test / operator
  bool negated = false;
  std::vector<ExprPtr> a;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
  int line = 0;
  int column = 0;
  int height = 1;  // longest path to a leaf, bounded by the parser so evaluation cannot overflow
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

// Assignment targets: a name, a namespace attribute (ns.x), or a tuple of names.
struct Target {
  std::vector<std::string> names;  // one name unless unpacking
  std::string attr;                // non-empty: names[0].attr
  bool tuple = false;
};

struct MacroDef {
  std::string name;
  std::vector<std::pair<std::string, ExprPtr>> params;  // default null when required
  Body body;
};

struct Stmt {
  enum class Kind : uint8_t {
    kText,         // text
    kOutput,       // {{ expr }}
    kIf,           // conds[i] → bodies[i]; else_body
    kFor,          // for target in expr [if cond]: bodies[0]; else_body
    kSet,          // target = expr
    kSetBlock,     // target = rendered bodies[0] (| filter_expr)
    kMacro,        // macro
    kCallBlock,    // call(macro caller params) expr: bodies[0]
    kFilterBlock,  // filter_expr applied to rendered bodies[0]
    kBreak,
    kContinue,
  };
  Kind kind = Kind::kText;
  std::string text;
  ExprPtr expr;
  ExprPtr cond;
  ExprPtr filter_expr;
  std::vector<ExprPtr> conds;
  std::vector<Body> bodies;
  Body else_body;
  Target target;
  std::shared_ptr<MacroDef> macro;
  int line = 0;
  int column = 0;
};

struct Program {
  Body body;
};

}  // namespace kestrel::chat
