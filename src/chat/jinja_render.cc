// chat/jinja_render.cc — the tree-walking evaluator: jinja2's scoping (each loop iteration and
// macro call gets its own frame; namespaces are the only way to carry state out), loop
// variables, macros with caller(), and the globals transformers provides.
#include "chat/jinja_render.h"

#include <ctime>

#include <fmt/format.h>

#include "chat/jinja_filters.h"
#include "chat/py_str.h"

namespace kestrel::chat {

namespace {

using K = Value::Kind;

struct Frame {
  std::vector<std::pair<std::string, Value>> vars;
  std::shared_ptr<Frame> parent;

  const Value* find(const std::string& name) const {
    for (const Frame* f = this; f; f = f->parent.get())
      for (const auto& [k, v] : f->vars)
        if (k == name) return &v;
    return nullptr;
  }
  void set(const std::string& name, Value v) {
    for (auto& [k, old] : vars) {
      if (k == name) {
        old = std::move(v);
        return;
      }
    }
    vars.emplace_back(name, std::move(v));
  }
};
using FramePtr = std::shared_ptr<Frame>;

FramePtr child(const FramePtr& parent) {
  auto f = std::make_shared<Frame>();
  f->parent = parent;
  return f;
}

enum class Flow { kNormal, kBreak, kContinue };

// Statements inside expressions inside macro calls nest the evaluator's recursion; bounding the
// total keeps hostile templates from overflowing the stack.
constexpr int kMaxEvalDepth = 1000;

class Renderer {
 public:
  Renderer(const Dict& context, const Limits& limits) : ctx_(context), limits_(limits) {
    add_globals();
  }

  std::string run(const Program& program) {
    std::string out;
    exec_body(program.body, std::make_shared<Frame>(), out);
    return out;
  }

 private:
  void step() {
    if (++steps_ > limits_.max_steps) throw_error("TemplateRuntimeError: template ran too long");
  }

  void append(std::string& out, std::string_view s) {
    if (out.size() + s.size() > limits_.max_output_bytes)
      throw_error("TemplateRuntimeError: output too large");
    out += s;
  }

  void add_globals() {
    const Limits limits = limits_;
    globals_.set(
        "range", Value::callable([limits](CallArgs& a) {
          Value x = a.take(0, "start"), y = a.take(1, "stop"), z = a.take(2, "step");
          a.expect_consumed("range");
          for (const Value* v : {&x, &y, &z})
            if (!v->is_undefined() && !v->is_int())
              throw_error(fmt::format("TypeError: '{}' object cannot be interpreted as an integer",
                                      type_name(*v)));
          if (x.is_undefined()) throw_error("TypeError: range expected at least 1 argument, got 0");
          int64_t start = 0, stop = x.i, stride = 1;
          if (!y.is_undefined()) {
            start = x.i;
            stop = y.i;
          }
          if (!z.is_undefined()) stride = z.i;
          if (stride == 0) throw_error("ValueError: range() arg 3 must not be zero");
          List out;
          for (int64_t k = start; stride > 0 ? k < stop : k > stop; k += stride) {
            if (out.size() >= limits.max_collection) throw_error("OverflowError: range too large");
            out.push_back(Value::integer(k));
            if ((stride > 0 && k > INT64_MAX - stride) || (stride < 0 && k < INT64_MIN - stride))
              break;
          }
          return Value::make_list(std::move(out));
        }));
    globals_.set("namespace", Value::callable([](CallArgs& a) {
                   Value v;
                   v.kind = K::kNamespace;
                   v.ns = std::make_shared<Namespace>();
                   for (const Value& init : a.args) {
                     if (!init.is_dict())
                       throw_error("TypeError: namespace() positional argument must be a dict");
                     for (const auto& [k, e] : init.dict->items) v.ns->attrs.set(k, e);
                   }
                   for (const auto& [k, e] : a.kwargs) v.ns->attrs.set(k, e);
                   return v;
                 }));
    globals_.set("dict", Value::callable([](CallArgs& a) {
                   Dict d;
                   for (const Value& init : a.args) {
                     if (!init.is_dict())
                       throw_error("TypeError: dict() positional argument must be a dict");
                     for (const auto& [k, e] : init.dict->items) d.set(k, e);
                   }
                   for (const auto& [k, e] : a.kwargs) d.set(k, e);
                   return Value::make_dict(std::move(d));
                 }));
    // transformers' strftime_now: the local time, as datetime.now().strftime(format).
    globals_.set("strftime_now", Value::callable([](CallArgs& a) {
                   Value format = a.take(0, "format");
                   a.expect_consumed("strftime_now");
                   if (!format.is_string())
                     throw_error("TypeError: strftime_now() argument must be str");
                   const std::time_t now = std::time(nullptr);
                   std::tm local{};
                   localtime_r(&now, &local);
                   std::string buf(format.s.size() * 8 + 64, '\0');
                   const size_t n = std::strftime(buf.data(), buf.size(), format.s.c_str(), &local);
                   buf.resize(n);
                   return Value::string(std::move(buf));
                 }));
    globals_.set("raise_exception", Value::callable([](CallArgs& a) -> Value {
                   Value msg = a.take(0, "message");
                   throw_error("TemplateError: " + to_str(msg));
                 }));
  }

  Value lookup(const std::string& name, const FramePtr& frame) const {
    if (const Value* v = frame->find(name)) return *v;
    if (const Value* v = ctx_.find(name)) return *v;
    if (const Value* v = globals_.find(name)) return *v;
    return Value::undefined(fmt::format("'{}' is undefined", name));
  }

  // ---- statements ----

  Flow exec_body(const Body& body, const FramePtr& frame, std::string& out) {
    for (const StmtPtr& s : body) {
      const Flow f = exec(*s, frame, out);
      if (f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
  }

  struct Nest {
    int* depth;
    explicit Nest(int* d) : depth(d) {
      if (++*depth > kMaxEvalDepth) {
        --*depth;
        throw_error("TemplateRuntimeError: template nested too deeply");
      }
    }
    ~Nest() { --*depth; }
  };

  Flow exec(const Stmt& s, const FramePtr& frame, std::string& out) {
    step();
    const Nest nest(&eval_depth_);
    try {
      return exec_inner(s, frame, out);
    } catch (JinjaError& e) {
      if (e.line == 0) {
        e.line = s.line;
        e.column = s.column;
      }
      throw;
    }
  }

  void assign(const Target& t, const Value& v, const FramePtr& frame) {
    if (!t.attr.empty()) {
      Value ns = lookup(t.names[0], frame);
      if (ns.kind != K::kNamespace)
        throw_error("TemplateRuntimeError: cannot assign attribute on non-namespace object");
      ns.ns->attrs.set(t.attr, v);
      return;
    }
    if (!t.tuple) {
      frame->set(t.names[0], v);
      return;
    }
    const List items = iterate(v);
    if (items.size() != t.names.size())
      throw_error(
          items.size() > t.names.size()
              ? fmt::format("ValueError: too many values to unpack (expected {})", t.names.size())
              : fmt::format("ValueError: not enough values to unpack (expected {}, got {})",
                            t.names.size(), items.size()));
    for (size_t k = 0; k < items.size(); ++k) frame->set(t.names[k], items[k]);
  }

  Flow exec_inner(const Stmt& s, const FramePtr& frame, std::string& out) {
    switch (s.kind) {
      case Stmt::Kind::kText:
        append(out, s.text);
        return Flow::kNormal;
      case Stmt::Kind::kOutput:
        append(out, to_str(eval(*s.expr, frame)));
        return Flow::kNormal;
      case Stmt::Kind::kIf:
        for (size_t k = 0; k < s.conds.size(); ++k)
          if (truthy(eval(*s.conds[k], frame))) return exec_body(s.bodies[k], frame, out);
        return exec_body(s.else_body, frame, out);
      case Stmt::Kind::kFor:
        exec_for(s, frame, out);
        return Flow::kNormal;
      case Stmt::Kind::kSet:
        assign(s.target, eval(*s.expr, frame), frame);
        return Flow::kNormal;
      case Stmt::Kind::kSetBlock: {
        std::string body;
        exec_body(s.bodies[0], child(frame), body);
        Value v = Value::string(std::move(body));
        if (s.filter_expr) v = eval_filter_chain(*s.filter_expr, v, frame);
        assign(s.target, v, frame);
        return Flow::kNormal;
      }
      case Stmt::Kind::kMacro:
        frame->set(s.macro->name, make_macro(s.macro, frame));
        return Flow::kNormal;
      case Stmt::Kind::kCallBlock: {
        const Expr& call = *s.expr;
        Value callee = eval(*call.a[0], frame);
        CallArgs args = eval_args(call, frame);
        args.kwargs.emplace_back("caller", make_macro(s.macro, frame));
        append(out, to_str(call_value(callee, args)));
        return Flow::kNormal;
      }
      case Stmt::Kind::kFilterBlock: {
        std::string body;
        exec_body(s.bodies[0], child(frame), body);
        append(out,
               to_str(eval_filter_chain(*s.filter_expr, Value::string(std::move(body)), frame)));
        return Flow::kNormal;
      }
      case Stmt::Kind::kBreak:
        return Flow::kBreak;
      case Stmt::Kind::kContinue:
        return Flow::kContinue;
    }
    return Flow::kNormal;
  }

  void exec_for(const Stmt& s, const FramePtr& frame, std::string& out) {
    List items = iterate(eval(*s.expr, frame));
    if (s.cond) {
      List kept;
      for (Value& item : items) {
        step();
        FramePtr f = child(frame);
        assign(s.target, item, f);
        if (truthy(eval(*s.cond, f))) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      exec_body(s.else_body, child(frame), out);
      return;
    }
    const int64_t n = static_cast<int64_t>(items.size());
    for (int64_t k = 0; k < n; ++k) {
      step();
      FramePtr f = child(frame);
      Dict loop;
      loop.set("index", Value::integer(k + 1));
      loop.set("index0", Value::integer(k));
      loop.set("revindex", Value::integer(n - k));
      loop.set("revindex0", Value::integer(n - k - 1));
      loop.set("first", Value::boolean(k == 0));
      loop.set("last", Value::boolean(k == n - 1));
      loop.set("length", Value::integer(n));
      loop.set("depth", Value::integer(1));
      loop.set("depth0", Value::integer(0));
      loop.set("previtem", k > 0 ? items[static_cast<size_t>(k - 1)]
                                 : Value::undefined("there is no previous item"));
      loop.set("nextitem", k + 1 < n ? items[static_cast<size_t>(k + 1)]
                                     : Value::undefined("there is no next item"));
      loop.set("cycle", Value::callable([k](CallArgs& a) {
                 if (a.args.empty()) throw_error("TypeError: no items for cycling given");
                 return a.args[static_cast<size_t>(k) % a.args.size()];
               }));
      f->set("loop", Value::make_dict(std::move(loop)));
      assign(s.target, items[static_cast<size_t>(k)], f);
      if (exec_body(s.bodies[0], f, out) == Flow::kBreak) break;
    }
  }

  // The macro sees its defining scope through a weak reference: the scope usually holds the
  // macro, and a strong one would form a cycle that leaks both. A macro outlives its scope only
  // when smuggled out through a namespace, and calling it then is an error.
  Value make_macro(const std::shared_ptr<MacroDef>& def, const FramePtr& closure) {
    std::weak_ptr<Frame> scope = closure;
    return Value::callable([this, def, scope](CallArgs& a) {
      const FramePtr closure = scope.lock();
      if (!closure)
        throw_error(fmt::format("TemplateRuntimeError: macro '{}' called after its scope ended",
                                def->name));
      if (++call_depth_ > limits_.max_call_depth) {
        --call_depth_;
        throw_error("TemplateRuntimeError: macro calls nested too deeply");
      }
      struct Leave {
        int* depth;
        ~Leave() { --*depth; }
      } leave{&call_depth_};
      step();
      FramePtr f = child(closure);
      if (a.args.size() > def->params.size())
        throw_error(fmt::format("TypeError: macro '{}' takes not more than {} argument(s)",
                                def->name, def->params.size()));
      for (const auto& [key, v] : a.kwargs) {
        if (key == "caller") {
          f->set("caller", v);
          continue;
        }
        bool known = false;
        for (size_t p = 0; p < def->params.size(); ++p) {
          if (def->params[p].first != key) continue;
          known = true;
          if (p < a.args.size())
            throw_error(fmt::format("TypeError: macro '{}' got multiple values for argument '{}'",
                                    def->name, key));
        }
        if (!known)
          throw_error(
              fmt::format("TypeError: macro '{}' takes no keyword argument '{}'", def->name, key));
      }
      for (size_t p = 0; p < def->params.size(); ++p) {
        const auto& [pname, dflt] = def->params[p];
        Value v = a.take(p, pname);
        if (v.is_undefined() && p >= a.args.size()) {
          v = dflt ? eval(*dflt, f)
                   : Value::undefined(fmt::format("parameter '{}' was not provided", pname));
        }
        f->set(pname, v);
      }
      std::string out;
      exec_body(def->body, f, out);
      return Value::string(std::move(out));
    });
  }

  // ---- expressions ----

  CallArgs eval_args(const Expr& e, const FramePtr& frame, size_t first = 1) {
    CallArgs args;
    for (size_t k = first; k < e.a.size(); ++k) args.args.push_back(eval(*e.a[k], frame));
    for (const auto& [key, v] : e.kwargs) args.kwargs.emplace_back(key, eval(*v, frame));
    return args;
  }

  // A filter chain from {% filter %} or a block set: the innermost operand is `input`.
  Value eval_filter_chain(const Expr& e, const Value& input, const FramePtr& frame) {
    Value v = e.a[0] ? eval_filter_chain(*e.a[0], input, frame) : input;
    CallArgs args = eval_args(e, frame);
    return apply_filter(e.name, v, args, limits_);
  }

  Value eval(const Expr& e, const FramePtr& frame) {
    const Nest nest(&eval_depth_);
    try {
      return eval_inner(e, frame);
    } catch (JinjaError& err) {
      if (err.line == 0) {
        err.line = e.line;
        err.column = e.column;
      }
      throw;
    }
  }

  static std::optional<int64_t> slice_bound(const Value& v) {
    if (v.is_undefined() || v.is_none()) return std::nullopt;
    if (!v.is_int())
      throw_error("TypeError: slice indices must be integers or None or have an __index__ method");
    return v.i;
  }

  Value eval_inner(const Expr& e, const FramePtr& frame) {
    switch (e.kind) {
      case Expr::Kind::kConst:
        return e.value;
      case Expr::Kind::kName:
        return lookup(e.name, frame);
      case Expr::Kind::kAttr:
        return get_attr(eval(*e.a[0], frame), e.name);
      case Expr::Kind::kItem:
        return get_item(eval(*e.a[0], frame), eval(*e.a[1], frame));
      case Expr::Kind::kSlice: {
        Value obj = eval(*e.a[0], frame);
        std::optional<int64_t> b, en, st;
        if (e.a[1]) b = slice_bound(eval(*e.a[1], frame));
        if (e.a[2]) en = slice_bound(eval(*e.a[2], frame));
        if (e.a[3]) st = slice_bound(eval(*e.a[3], frame));
        if (obj.is_string()) return Value::string(py_slice(obj.s, b, en, st));
        if (obj.is_sequence() && !obj.lazy) {
          List out;
          for (int64_t k : slice_indices(static_cast<int64_t>(obj.list->size()), b, en, st))
            out.push_back((*obj.list)[static_cast<size_t>(k)]);
          return obj.kind == K::kTuple ? Value::make_tuple(std::move(out))
                                       : Value::make_list(std::move(out));
        }
        if (obj.is_undefined()) undefined_error(obj);
        return Value::undefined(fmt::format("'{}' object is not subscriptable", type_name(obj)));
      }
      case Expr::Kind::kCall: {
        Value callee = eval(*e.a[0], frame);
        CallArgs args = eval_args(e, frame);
        step();
        return call_value(callee, args);
      }
      case Expr::Kind::kFilter: {
        Value v = eval(*e.a[0], frame);
        CallArgs args = eval_args(e, frame);
        return apply_filter(e.name, v, args, limits_);
      }
      case Expr::Kind::kTest: {
        Value v = eval(*e.a[0], frame);
        CallArgs args = eval_args(e, frame);
        return Value::boolean(apply_test(e.name, v, args) != e.negated);
      }
      case Expr::Kind::kNeg:
      case Expr::Kind::kPos: {
        Value v = eval(*e.a[0], frame);
        if (v.is_undefined()) undefined_error(v);
        const bool neg = e.kind == Expr::Kind::kNeg;
        if (v.is_int()) {
          if (neg && v.i == INT64_MIN) throw_error("OverflowError: integer result too large");
          return Value::integer(neg ? -v.i : v.i);
        }
        if (v.kind == K::kFloat) return Value::number(neg ? -v.f : v.f);
        throw_error(fmt::format("TypeError: bad operand type for unary {}: '{}'", neg ? '-' : '+',
                                type_name(v)));
      }
      case Expr::Kind::kNot:
        return Value::boolean(!truthy(eval(*e.a[0], frame)));
      case Expr::Kind::kBinary: {
        if (e.name == "and" || e.name == "or") {
          Value l = eval(*e.a[0], frame);
          if (truthy(l) == (e.name == "or")) return l;
          return eval(*e.a[1], frame);
        }
        Value l = eval(*e.a[0], frame);
        Value r = eval(*e.a[1], frame);
        if (e.name == "~") {
          std::string s = to_str(l);
          const std::string rs = to_str(r);
          if (s.size() + rs.size() > limits_.max_output_bytes)
            throw_error("MemoryError: string too large");
          return Value::string(s + rs);
        }
        return binary_op(e.name, l, r, limits_);
      }
      case Expr::Kind::kCompare: {
        Value left = eval(*e.a[0], frame);
        for (size_t k = 0; k < e.ops.size(); ++k) {
          Value right = eval(*e.a[k + 1], frame);
          if (!compare_op(e.ops[k], left, right)) return Value::boolean(false);
          left = std::move(right);
        }
        return Value::boolean(true);
      }
      case Expr::Kind::kCond:
        if (truthy(eval(*e.a[0], frame))) return eval(*e.a[1], frame);
        return e.a[2] ? eval(*e.a[2], frame)
                      : Value::undefined(
                            "the inline if-expression on "
                            "evaluated to false and no else "
                            "section was defined.");
      case Expr::Kind::kList:
      case Expr::Kind::kTuple: {
        List items;
        for (const ExprPtr& x : e.a) items.push_back(eval(*x, frame));
        return e.kind == Expr::Kind::kList ? Value::make_list(std::move(items))
                                           : Value::make_tuple(std::move(items));
      }
      case Expr::Kind::kDict: {
        Dict d;
        for (size_t k = 0; k < e.a.size(); ++k) {
          Value key = eval(*e.kwargs[k].second, frame);
          if (!key.is_string())
            throw_error(
                fmt::format("TypeError: dict keys of type '{}' are not supported", type_name(key)));
          d.set(key.s, eval(*e.a[k], frame));
        }
        return Value::make_dict(std::move(d));
      }
    }
    return Value::undefined();
  }

  const Dict& ctx_;
  Dict globals_;
  Limits limits_;
  int call_depth_ = 0;
  int eval_depth_ = 0;
  uint64_t steps_ = 0;
};

}  // namespace

std::string render_program(const Program& program, const Dict& context, const Limits& limits) {
  Renderer r(context, limits);
  return r.run(program);
}

}  // namespace kestrel::chat
