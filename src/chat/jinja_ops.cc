// chat/jinja_ops.cc — Python operators, lookups and the methods of str, dict and list.
#include "chat/jinja_ops.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include <fmt/format.h>

#include "chat/py_str.h"

namespace kestrel::chat {

namespace {

using K = Value::Kind;

std::string undefined_hint(const Value& obj, const std::string& name) {
  if (obj.is_dict() || obj.is_sequence() || obj.is_string() || obj.is_none() || obj.is_number())
    return fmt::format("'{} object' has no attribute '{}'", type_name(obj), name);
  return fmt::format("'{}' is undefined", name);
}

Value unsafe(const std::string& type, const std::string& name) {
  return Value::undefined(
      fmt::format("SecurityError: access to attribute '{}' of '{}' object is unsafe.", name, type));
}

std::optional<std::string> opt_str(const Value& v, const char* what) {
  if (v.is_undefined() || v.is_none()) return std::nullopt;
  if (!v.is_string()) throw_error(fmt::format("TypeError: {} arg must be None or str", what));
  return v.s;
}

int64_t int_arg(const Value& v, int64_t dflt) {
  if (v.is_undefined() || v.is_none()) return dflt;
  if (!v.is_int()) throw_error("TypeError: an integer is required");
  return v.i;
}

// str.startswith/endswith with a str or a tuple of str.
bool affix_match(const std::string& s, const Value& arg, bool prefix) {
  auto one = [&](const Value& a) {
    if (!a.is_string())
      throw_error(fmt::format("TypeError: {} first arg must be str or a tuple of str, not {}",
                              prefix ? "startswith" : "endswith", type_name(a)));
    if (a.s.size() > s.size()) return false;
    return prefix ? s.compare(0, a.s.size(), a.s) == 0
                  : s.compare(s.size() - a.s.size(), a.s.size(), a.s) == 0;
  };
  if (arg.is_sequence()) {
    for (const Value& a : *arg.list)
      if (one(a)) return true;
    return false;
  }
  return one(arg);
}

// Code-point index of a byte offset.
int64_t cp_index(const std::string& s, size_t byte_offset) {
  return static_cast<int64_t>(utf8_length(std::string_view(s).substr(0, byte_offset)));
}

Value string_method(const std::string& s, const std::string& name) {
  auto method = [](std::function<Value(CallArgs&)> f) { return Value::callable(std::move(f)); };
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const bool left = name != "rstrip", right = name != "lstrip";
    return method([s, left, right, name](CallArgs& a) {
      auto chars = opt_str(a.take(0, "chars"), name.c_str());
      a.expect_consumed(name);
      return Value::string(py_strip(s, chars, left, right));
    });
  }
  if (name == "split") {
    return method([s](CallArgs& a) {
      auto sep = opt_str(a.take(0, "sep"), "split");
      const int64_t maxsplit = int_arg(a.take(1, "maxsplit"), -1);
      a.expect_consumed("split");
      List out;
      for (auto& part : py_split(s, sep, maxsplit)) out.push_back(Value::string(std::move(part)));
      return Value::make_list(std::move(out));
    });
  }
  if (name == "startswith" || name == "endswith") {
    const bool prefix = name == "startswith";
    return method([s, prefix](CallArgs& a) {
      Value arg = a.take(0, "prefix");
      a.expect_consumed(prefix ? "startswith" : "endswith");
      return Value::boolean(affix_match(s, arg, prefix));
    });
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
    return method([s, name](CallArgs& a) {
      a.expect_consumed(name);
      if (name == "upper") return Value::string(py_upper(s));
      if (name == "lower") return Value::string(py_lower(s));
      if (name == "title") return Value::string(py_title(s));
      return Value::string(py_capitalize(s));
    });
  }
  if (name == "replace") {
    return method([s](CallArgs& a) {
      Value from = a.take(0, "old"), to = a.take(1, "new");
      const int64_t count = int_arg(a.take(2, "count"), -1);
      a.expect_consumed("replace");
      if (!from.is_string() || !to.is_string())
        throw_error("TypeError: replace() arguments must be str");
      return Value::string(py_replace(s, from.s, to.s, count));
    });
  }
  if (name == "find" || name == "rfind" || name == "count" || name == "index") {
    return method([s, name](CallArgs& a) {
      Value sub = a.take(0, "sub");
      a.expect_consumed(name);
      if (!sub.is_string())
        throw_error(fmt::format("TypeError: must be str, not {}", type_name(sub)));
      if (name == "count") {
        if (sub.s.empty()) return Value::integer(static_cast<int64_t>(utf8_length(s)) + 1);
        int64_t n = 0;
        for (size_t p = s.find(sub.s); p != std::string::npos; p = s.find(sub.s, p + sub.s.size()))
          ++n;
        return Value::integer(n);
      }
      const size_t p = name == "rfind" ? s.rfind(sub.s) : s.find(sub.s);
      if (p == std::string::npos) {
        if (name == "index") throw_error("ValueError: substring not found");
        return Value::integer(-1);
      }
      return Value::integer(cp_index(s, p));
    });
  }
  if (name == "join") {
    return method([s](CallArgs& a) {
      Value items = a.take(0, "iterable");
      a.expect_consumed("join");
      std::string out;
      bool first = true;
      for (const Value& v : iterate(items)) {
        if (!v.is_string())
          throw_error(fmt::format("TypeError: sequence item: expected str instance, {} found",
                                  type_name(v)));
        if (!first) out += s;
        first = false;
        out += v.s;
      }
      return Value::string(std::move(out));
    });
  }
  if (name == "isdigit" || name == "isspace" || name == "isalpha" || name == "isalnum" ||
      name == "islower" || name == "isupper") {
    return method([s, name](CallArgs& a) {
      a.expect_consumed(name);
      if (s.empty()) return Value::boolean(false);
      if (name == "islower") return Value::boolean(py_lower(s) == s && py_upper(s) != s);
      if (name == "isupper") return Value::boolean(py_upper(s) == s && py_lower(s) != s);
      for (char32_t c : utf8_decode(s)) {
        const bool digit = c >= '0' && c <= '9';
        const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
        const bool ok = name == "isdigit"   ? digit
                        : name == "isspace" ? py_isspace(c)
                        : name == "isalpha" ? alpha
                                            : digit || alpha;
        if (!ok) return Value::boolean(false);
      }
      return Value::boolean(true);
    });
  }
  return Value::undefined(fmt::format("'str object' has no attribute '{}'", name));
}

Value dict_method(const Value& obj, const std::string& name) {
  auto d = obj.dict;
  if (name == "items" || name == "keys" || name == "values") {
    return Value::callable([d, name](CallArgs& a) {
      a.expect_consumed(name);
      List out;
      for (const auto& [k, v] : d->items) {
        if (name == "items")
          out.push_back(Value::make_tuple({Value::string(k), v}));
        else if (name == "keys")
          out.push_back(Value::string(k));
        else
          out.push_back(v);
      }
      return Value::make_list(std::move(out));
    });
  }
  if (name == "get") {
    return Value::callable([d](CallArgs& a) {
      Value key = a.take(0, "key"), dflt = a.take(1, "default");
      a.expect_consumed("get");
      if (dflt.is_undefined()) dflt = Value::none();
      if (!key.is_string()) return dflt;
      const Value* v = d->find(key.s);
      return v ? *v : dflt;
    });
  }
  if (name == "copy") {
    return Value::callable([obj](CallArgs& a) {
      a.expect_consumed("copy");
      return obj;
    });
  }
  if (name == "pop" || name == "popitem" || name == "setdefault" || name == "update" ||
      name == "clear")
    return unsafe("dict", name);
  return Value::undefined();
}

Value list_method(const Value& obj, const std::string& name) {
  if (name == "index" || name == "count") {
    auto l = obj.list;
    return Value::callable([l, name](CallArgs& a) {
      Value x = a.take(0, "value");
      a.expect_consumed(name);
      int64_t n = 0;
      for (size_t k = 0; k < l->size(); ++k) {
        if (equals((*l)[k], x)) {
          if (name == "index") return Value::integer(static_cast<int64_t>(k));
          ++n;
        }
      }
      if (name == "index") throw_error(fmt::format("ValueError: {} is not in list", repr(x)));
      return Value::integer(n);
    });
  }
  if (obj.kind == K::kList &&
      (name == "append" || name == "extend" || name == "insert" || name == "pop" ||
       name == "remove" || name == "reverse" || name == "sort" || name == "clear"))
    return unsafe("list", name);
  return Value::undefined(fmt::format("'{} object' has no attribute '{}'", type_name(obj), name));
}

void check_overflow(bool overflow) {
  if (overflow) throw_error("OverflowError: integer result too large");
}

[[noreturn]] void unsupported(const std::string& op, const Value& a, const Value& b) {
  throw_error(fmt::format("TypeError: unsupported operand type(s) for {}: '{}' and '{}'", op,
                          type_name(a), type_name(b)));
}

Value repeat(const Value& seq, int64_t n, const Limits& limits) {
  if (n < 0) n = 0;
  if (seq.is_string()) {
    if (seq.s.size() * static_cast<size_t>(n) > limits.max_output_bytes)
      throw_error("MemoryError: string repetition too large");
    std::string out;
    for (int64_t k = 0; k < n; ++k) out += seq.s;
    return Value::string(std::move(out));
  }
  if (seq.list->size() * static_cast<size_t>(n) > limits.max_collection)
    throw_error("MemoryError: list repetition too large");
  List out;
  for (int64_t k = 0; k < n; ++k) out.insert(out.end(), seq.list->begin(), seq.list->end());
  return seq.kind == K::kTuple ? Value::make_tuple(std::move(out))
                               : Value::make_list(std::move(out));
}

double py_fmod(double a, double b) {
  double m = std::fmod(a, b);
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}

int lexicographic(const List& a, const List& b);

// Three-way compare for < <= > >=; raises TypeError for unordered types.
int order(const Value& a, const Value& b, const std::string& op) {
  if (a.is_number() && b.is_number()) {
    if (a.kind == K::kFloat || b.kind == K::kFloat) {
      const double x = a.as_double(), y = b.as_double();
      return x < y ? -1 : x > y ? 1 : 0;
    }
    return a.i < b.i ? -1 : a.i > b.i ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) return a.s < b.s ? -1 : a.s > b.s ? 1 : 0;
  if (a.is_sequence() && b.is_sequence() && a.kind == b.kind)
    return lexicographic(*a.list, *b.list);
  if (a.is_undefined() || b.is_undefined()) undefined_error(a.is_undefined() ? a : b);
  throw_error(fmt::format("TypeError: '{}' not supported between instances of '{}' and '{}'", op,
                          type_name(a), type_name(b)));
}

int lexicographic(const List& a, const List& b) {
  for (size_t k = 0; k < a.size() && k < b.size(); ++k) {
    if (equals(a[k], b[k])) continue;
    return order(a[k], b[k], "<");
  }
  return a.size() < b.size() ? -1 : a.size() > b.size() ? 1 : 0;
}

// printf-style `str % args` for the conversions templates use: %s %r %d %i %f and %%, with
// an optional '-' flag, width and precision.
Value percent_format(const std::string& fmt_str, const Value& arg) {
  const List args = arg.kind == K::kTuple ? *arg.list : List{arg};
  size_t next = 0;
  std::string out;
  for (size_t k = 0; k < fmt_str.size(); ++k) {
    if (fmt_str[k] != '%') {
      out.push_back(fmt_str[k]);
      continue;
    }
    if (++k >= fmt_str.size()) throw_error("ValueError: incomplete format");
    const bool left = fmt_str[k] == '-';
    if (left) ++k;
    size_t width = 0;
    while (k < fmt_str.size() && fmt_str[k] >= '0' && fmt_str[k] <= '9')
      width = std::min<size_t>(width * 10 + static_cast<size_t>(fmt_str[k++] - '0'), 4096);
    int precision = -1;
    if (k < fmt_str.size() && fmt_str[k] == '.') {
      precision = 0;
      while (++k < fmt_str.size() && fmt_str[k] >= '0' && fmt_str[k] <= '9')
        precision = std::min(precision * 10 + (fmt_str[k] - '0'), 100);
    }
    if (k >= fmt_str.size()) throw_error("ValueError: incomplete format");
    const char conv = fmt_str[k];
    if (conv == '%') {
      out.push_back('%');
      continue;
    }
    if (next >= args.size()) throw_error("TypeError: not enough arguments for format string");
    const Value& v = args[next++];
    std::string piece;
    if (conv == 's') {
      piece = to_str(v);
      if (precision >= 0) piece = py_slice(piece, 0, precision, 1);
    } else if (conv == 'r') {
      piece = repr(v);
    } else if (conv == 'd' || conv == 'i') {
      if (!v.is_number())
        throw_error(fmt::format("TypeError: %{} format: a real number is required, not {}", conv,
                                type_name(v)));
      piece = v.is_int() ? std::to_string(v.i) : fmt::format("{:.0f}", std::trunc(v.f));
    } else if (conv == 'f') {
      if (!v.is_number())
        throw_error(fmt::format("TypeError: must be real number, not {}", type_name(v)));
      piece = fmt::format("{:.{}f}", v.as_double(), precision < 0 ? 6 : precision);
    } else {
      throw_error(fmt::format("ValueError: unsupported format character '{}'", conv));
    }
    const size_t len = utf8_length(piece);
    if (len < width) {
      const std::string pad(width - len, ' ');
      piece = left ? piece + pad : pad + piece;
    }
    out += piece;
  }
  if (next < args.size())
    throw_error("TypeError: not all arguments converted during string formatting");
  return Value::string(std::move(out));
}

}  // namespace

void undefined_error(const Value& v) {
  if (v.s.rfind("SecurityError:", 0) == 0) throw_error(v.s);
  throw_error("UndefinedError: " + (v.s.empty() ? std::string("value is undefined") : v.s));
}

Value get_attr(const Value& obj, const std::string& name) {
  if (!name.empty() && name[0] == '_') return unsafe(type_name(obj), name);
  switch (obj.kind) {
    case K::kUndefined:
      undefined_error(obj);
    case K::kString:
      return string_method(obj.s, name);
    case K::kDict: {
      Value m = dict_method(obj, name);
      if (!m.is_undefined() || !m.s.empty()) return m;
      if (const Value* v = obj.dict->find(name)) return *v;
      return Value::undefined(undefined_hint(obj, name));
    }
    case K::kList:
    case K::kTuple:
      if (obj.lazy) return Value::undefined(undefined_hint(obj, name));
      return list_method(obj, name);
    case K::kNamespace:
      if (const Value* v = obj.ns->attrs.find(name)) return *v;
      return Value::undefined(fmt::format("'Namespace object' has no attribute '{}'", name));
    default:
      return Value::undefined(undefined_hint(obj, name));
  }
}

Value get_item(const Value& obj, const Value& key) {
  switch (obj.kind) {
    case K::kUndefined:
      undefined_error(obj);
    case K::kDict:
      if (key.is_string()) {
        if (const Value* v = obj.dict->find(key.s)) return *v;
        return get_attr(obj, key.s);
      }
      break;
    case K::kList:
    case K::kTuple:
    case K::kString:
      if (obj.lazy) break;  // generators are not subscriptable
      if (key.is_int()) {
        const int64_t len = obj.is_string() ? static_cast<int64_t>(utf8_length(obj.s))
                                            : static_cast<int64_t>(obj.list->size());
        int64_t idx = key.i < 0 ? key.i + len : key.i;
        if (idx < 0 || idx >= len)
          return Value::undefined(
              fmt::format("{} object has no element {}", type_name(obj), key.i));
        if (obj.is_string()) return Value::string(py_slice(obj.s, idx, idx + 1, 1));
        return (*obj.list)[static_cast<size_t>(idx)];
      }
      break;
    case K::kNamespace:
      break;
    default:
      break;
  }
  if (key.is_string()) return get_attr(obj, key.s);
  return Value::undefined(fmt::format("{} object has no element {}", type_name(obj), repr(key)));
}

Value binary_op(const std::string& op, const Value& a, const Value& b, const Limits& limits) {
  if (a.is_undefined()) undefined_error(a);
  if (b.is_undefined()) undefined_error(b);
  const bool ints = a.is_int() && b.is_int();
  const bool nums = a.is_number() && b.is_number();
  int64_t r = 0;
  if (op == "+") {
    if (ints) {
      check_overflow(__builtin_add_overflow(a.i, b.i, &r));
      return Value::integer(r);
    }
    if (nums) return Value::number(a.as_double() + b.as_double());
    if (a.is_string() && b.is_string()) {
      if (a.s.size() + b.s.size() > limits.max_output_bytes)
        throw_error("MemoryError: string too large");
      return Value::string(a.s + b.s);
    }
    if (a.is_sequence() && a.kind == b.kind && !a.lazy && !b.lazy) {
      List out = *a.list;
      out.insert(out.end(), b.list->begin(), b.list->end());
      if (out.size() > limits.max_collection) throw_error("MemoryError: list too large");
      return a.kind == K::kTuple ? Value::make_tuple(std::move(out))
                                 : Value::make_list(std::move(out));
    }
    if (a.is_string() || a.is_sequence())
      throw_error(fmt::format("TypeError: can only concatenate {} (not \"{}\") to {}", type_name(a),
                              type_name(b), type_name(a)));
    unsupported(op, a, b);
  }
  if (op == "-") {
    if (ints) {
      check_overflow(__builtin_sub_overflow(a.i, b.i, &r));
      return Value::integer(r);
    }
    if (nums) return Value::number(a.as_double() - b.as_double());
    unsupported(op, a, b);
  }
  if (op == "*") {
    if (ints) {
      check_overflow(__builtin_mul_overflow(a.i, b.i, &r));
      return Value::integer(r);
    }
    if (nums) return Value::number(a.as_double() * b.as_double());
    if ((a.is_string() || (a.is_sequence() && !a.lazy)) && b.is_int())
      return repeat(a, b.i, limits);
    if ((b.is_string() || (b.is_sequence() && !b.lazy)) && a.is_int())
      return repeat(b, a.i, limits);
    throw_error(fmt::format("TypeError: can't multiply sequence by non-int of type '{}'",
                            type_name(a.is_string() || a.is_sequence() ? b : a)));
  }
  if (op == "/") {
    if (!nums) unsupported(op, a, b);
    if (b.as_double() == 0) throw_error("ZeroDivisionError: division by zero");
    return Value::number(a.as_double() / b.as_double());
  }
  if (op == "//" || op == "%") {
    if (!nums) {
      if (a.is_string() && op == "%") return percent_format(a.s, b);
      unsupported(op, a, b);
    }
    if (ints) {
      if (b.i == 0) throw_error("ZeroDivisionError: integer division or modulo by zero");
      if (a.i == INT64_MIN && b.i == -1) throw_error("OverflowError: integer result too large");
      int64_t q = a.i / b.i, m = a.i % b.i;
      if (m != 0 && ((m < 0) != (b.i < 0))) {
        --q;
        m += b.i;
      }
      return Value::integer(op == "//" ? q : m);
    }
    const double x = a.as_double(), y = b.as_double();
    if (y == 0) throw_error("ZeroDivisionError: float division by zero");
    const double m = py_fmod(x, y);
    return Value::number(op == "//" ? std::round((x - m) / y) : m);
  }
  if (op == "**") {
    if (ints && b.i >= 0) {
      int64_t result = 1, base = a.i, e = b.i;
      while (e > 0) {
        if (e & 1) check_overflow(__builtin_mul_overflow(result, base, &result));
        e >>= 1;
        if (e > 0) check_overflow(__builtin_mul_overflow(base, base, &base));
      }
      return Value::integer(result);
    }
    if (nums) {
      if (a.as_double() == 0 && b.as_double() < 0)
        throw_error("ZeroDivisionError: 0.0 cannot be raised to a negative power");
      return Value::number(std::pow(a.as_double(), b.as_double()));
    }
    unsupported(op, a, b);
  }
  throw_error("unknown operator " + op);
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind) {
    case K::kUndefined:
      return false;
    case K::kString:
      if (!item.is_string())
        throw_error(fmt::format("TypeError: 'in <string>' requires string as left operand, not {}",
                                type_name(item)));
      return container.s.find(item.s) != std::string::npos;
    case K::kList:
    case K::kTuple:
      for (const Value& v : *container.list)
        if (equals(v, item)) return true;
      return false;
    case K::kDict:
      if (item.is_sequence() && item.kind == K::kList)
        throw_error("TypeError: unhashable type: 'list'");
      return item.is_string() && container.dict->find(item.s) != nullptr;
    default:
      throw_error(
          fmt::format("TypeError: argument of type '{}' is not iterable", type_name(container)));
  }
}

bool compare_op(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return equals(a, b);
  if (op == "!=") return !equals(a, b);
  if (op == "in") return contains(b, a);
  if (op == "notin") return !contains(b, a);
  const int c = order(a, b, op);
  if (op == "<") return c < 0;
  if (op == "<=") return c <= 0;
  if (op == ">") return c > 0;
  return c >= 0;
}

List iterate(const Value& v) {
  switch (v.kind) {
    case K::kUndefined:
      return {};
    case K::kList:
    case K::kTuple:
      return *v.list;
    case K::kDict: {
      List out;
      for (const auto& [k, e] : v.dict->items) out.push_back(Value::string(k));
      return out;
    }
    case K::kString: {
      List out;
      for (char32_t cp : utf8_decode(v.s))
        out.push_back(Value::string(utf8_encode(std::u32string(1, cp))));
      return out;
    }
    default:
      throw_error(fmt::format("TypeError: '{}' object is not iterable", type_name(v)));
  }
}

Value call_value(const Value& callee, CallArgs& args) {
  if (callee.is_undefined()) undefined_error(callee);
  if (callee.kind != K::kCallable)
    throw_error(fmt::format("TypeError: '{}' object is not callable", type_name(callee)));
  return (*callee.fn)(args);
}

}  // namespace kestrel::chat
