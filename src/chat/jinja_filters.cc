// chat/jinja_filters.cc — filters and tests with jinja2 3.1's argument names and defaults.
#include "chat/jinja_filters.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <set>

#include <fmt/format.h>

#include "chat/py_str.h"

namespace kestrel::chat {

namespace {

using K = Value::Kind;

int64_t length_of(const Value& v) {
  switch (v.kind) {
    case K::kUndefined:
      return 0;
    case K::kString:
      return static_cast<int64_t>(utf8_length(v.s));
    case K::kList:
    case K::kTuple:
      if (v.lazy) break;
      return static_cast<int64_t>(v.list->size());
    case K::kDict:
      return static_cast<int64_t>(v.dict->items.size());
    default:
      break;
  }
  throw_error(fmt::format("TypeError: object of type '{}' has no len()", type_name(v)));
}

bool arg_bool(const Value& v, bool dflt) {
  return v.is_undefined() ? dflt : truthy(v);
}

// jinja2's make_attrgetter: dotted paths, integer parts index sequences.
Value attr_path(const Value& item, const Value& attribute) {
  if (attribute.is_int()) return get_item(item, attribute);
  if (!attribute.is_string()) throw_error("TypeError: attribute must be a string");
  Value cur = item;
  size_t start = 0;
  while (true) {
    const size_t dot = attribute.s.find('.', start);
    const std::string part =
        attribute.s.substr(start, dot == std::string::npos ? dot : dot - start);
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    cur = get_item(cur, digits ? Value::integer(std::stoll(part)) : Value::string(part));
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

// Sort/compare key: strings fold case unless case_sensitive.
Value fold(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value::string(py_lower(v.s));
  return v;
}

std::string soft_str(const Value& v) {
  return to_str(v);
}

std::vector<std::u32string> splitlines(const std::u32string& s) {
  std::vector<std::u32string> out;
  std::u32string cur;
  for (size_t k = 0; k < s.size(); ++k) {
    const char32_t c = s[k];
    if (c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E ||
        c == 0x85 || c == 0x2028 || c == 0x2029) {
      if (c == '\r' && k + 1 < s.size() && s[k + 1] == '\n') ++k;
      out.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(c);
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

std::string do_indent(const std::string& s, const Value& width, bool first, bool blank) {
  const std::string ind =
      width.is_string()
          ? width.s
          : std::string(
                static_cast<size_t>(std::max<int64_t>(0, width.is_undefined() ? 4 : width.i)), ' ');
  const auto lines = splitlines(utf8_decode(s + "\n"));
  std::string rv;
  if (blank) {
    for (size_t k = 0; k < lines.size(); ++k) {
      if (k) {
        rv += '\n';
        rv += ind;
      }
      rv += utf8_encode(lines[k]);
    }
  } else if (!lines.empty()) {
    rv = utf8_encode(lines[0]);
    for (size_t k = 1; k < lines.size(); ++k) {
      rv += "\n";
      if (!lines[k].empty()) rv += ind;
      rv += utf8_encode(lines[k]);
    }
  }
  if (first) rv.insert(0, ind);
  return rv;
}

Value to_int(const Value& v, const Value& dflt, int64_t base) {
  const Value fallback = dflt.is_undefined() ? Value::integer(0) : dflt;
  if (v.is_int()) return Value::integer(v.i);
  if (v.kind == K::kFloat) {
    if (!std::isfinite(v.f) || std::fabs(v.f) >= 9.2e18) return fallback;
    return Value::integer(static_cast<int64_t>(v.f));
  }
  if (v.is_string()) {
    const std::string t = py_strip(v.s, std::nullopt, true, true);
    std::string digits;
    for (char c : t)
      if (c != '_') digits.push_back(c);
    if (!digits.empty()) {
      char* end = nullptr;
      errno = 0;
      const long long r = std::strtoll(digits.c_str(), &end, static_cast<int>(base));
      if (*end == '\0' && errno == 0) return Value::integer(r);
      const double d = std::strtod(digits.c_str(), &end);
      if (*end == '\0' && std::isfinite(d) && std::fabs(d) < 9.2e18)
        return Value::integer(static_cast<int64_t>(d));
    }
  }
  return fallback;
}

Value to_float(const Value& v, const Value& dflt) {
  const Value fallback = dflt.is_undefined() ? Value::number(0.0) : dflt;
  if (v.is_number()) return Value::number(v.as_double());
  if (v.is_string()) {
    const std::string t = py_strip(v.s, std::nullopt, true, true);
    char* end = nullptr;
    const double d = std::strtod(t.c_str(), &end);
    if (!t.empty() && *end == '\0') return Value::number(d);
  }
  return fallback;
}

double py_round(double x, int64_t ndigits) {
  // Python rounds half to even on the exact decimal value; for the
  // values templates round this matches std::nearbyint on the scaled value.
  const double p = std::pow(10.0, static_cast<double>(ndigits));
  const double y = x * p;
  double r = std::nearbyint(y);
  if (std::fabs(y - std::trunc(y)) != 0.5) r = std::round(y);
  return r / p;
}

Value do_minmax(const Value& v, CallArgs& a, bool want_max) {
  const bool cs = arg_bool(a.take(0, "case_sensitive"), false);
  const Value attribute = a.take(1, "attribute");
  a.expect_consumed(want_max ? "max" : "min");
  const List items = iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  auto key = [&](const Value& x) {
    return fold(attribute.is_undefined() ? x : attr_path(x, attribute), cs);
  };
  for (size_t k = 1; k < items.size(); ++k) {
    const bool better = want_max ? compare_op(">", key(items[k]), key(items[best]))
                                 : compare_op("<", key(items[k]), key(items[best]));
    if (better) best = k;
  }
  return items[best];
}

// select/reject/selectattr/rejectattr.
Value do_select(const Value& v, CallArgs& a, bool with_attr, bool select) {
  const List items = iterate(v);
  size_t next = 0;
  Value attribute;
  if (with_attr) attribute = a.take(next++, "attribute");
  Value test = a.take(next++, "test");
  CallArgs test_args;
  for (size_t k = next; k < a.args.size(); ++k) test_args.args.push_back(a.args[k]);
  for (const auto& kv : a.kwargs)
    if (kv.first != "attribute" && kv.first != "test") test_args.kwargs.push_back(kv);
  List out;
  for (const Value& item : items) {
    const Value subject = with_attr ? attr_path(item, attribute) : item;
    bool ok;
    if (test.is_undefined()) {
      ok = truthy(subject);
    } else {
      if (!test.is_string()) throw_error("TypeError: test name must be a string");
      CallArgs copy = test_args;
      ok = apply_test(test.s, subject, copy);
    }
    if (ok == select) out.push_back(item);
  }
  return Value::make_generator(std::move(out));
}

Value do_map(const Value& v, CallArgs& a, const Limits& limits) {
  const List items = iterate(v);
  List out;
  if (a.args.empty()) {
    Value attribute = a.take_keyword("attribute");
    Value dflt = a.take_keyword("default");
    a.expect_consumed("map");
    if (attribute.is_undefined())
      throw_error("FilterArgumentError: map requires a filter argument");
    for (const Value& item : items) {
      Value r = attr_path(item, attribute);
      if (r.is_undefined() && !dflt.is_undefined()) r = dflt;
      out.push_back(r);
    }
    return Value::make_generator(std::move(out));
  }
  const Value name = a.args[0];
  if (!name.is_string()) throw_error("TypeError: map filter name must be a string");
  for (const Value& item : items) {
    CallArgs rest;
    rest.args.assign(a.args.begin() + 1, a.args.end());
    rest.kwargs = a.kwargs;
    out.push_back(apply_filter(name.s, item, rest, limits));
  }
  return Value::make_generator(std::move(out));
}

Value do_sort(const Value& v, CallArgs& a) {
  const bool reverse = arg_bool(a.take(0, "reverse"), false);
  const bool cs = arg_bool(a.take(1, "case_sensitive"), false);
  const Value attribute = a.take(2, "attribute");
  a.expect_consumed("sort");
  List items = iterate(v);
  auto key = [&](const Value& x) {
    return fold(attribute.is_undefined() ? x : attr_path(x, attribute), cs);
  };
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    return reverse ? compare_op("<", key(y), key(x)) : compare_op("<", key(x), key(y));
  });
  return Value::make_list(std::move(items));
}

Value do_tojson(const Value& v, CallArgs& a) {
  JsonOptions o;
  o.ensure_ascii = arg_bool(a.take(0, "ensure_ascii"), false);
  const Value indent = a.take(1, "indent");
  const Value separators = a.take(2, "separators");
  o.sort_keys = arg_bool(a.take(3, "sort_keys"), false);
  a.expect_consumed("tojson");
  if (indent.is_int()) {
    o.indented = true;
    o.indent_str = std::string(static_cast<size_t>(std::clamp<int64_t>(indent.i, 0, 1024)), ' ');
  } else if (indent.is_string()) {
    o.indented = true;
    o.indent_str = indent.s;
  } else if (!indent.is_undefined() && !indent.is_none()) {
    throw_error("TypeError: indent must be an int or a string");
  }
  if (o.indented) o.item_sep = ",";
  if (separators.is_sequence()) {
    if (separators.list->size() != 2 || !(*separators.list)[0].is_string() ||
        !(*separators.list)[1].is_string())
      throw_error("ValueError: separators must be a pair of strings");
    o.item_sep = (*separators.list)[0].s;
    o.key_sep = (*separators.list)[1].s;
  }
  return Value::string(to_json(v, o));
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

const std::set<std::string>& filter_names() {
  static const std::set<std::string> names = {
      "abs",      "attr",   "batch",      "capitalize", "count",     "d",           "default",
      "dictsort", "e",      "escape",     "first",      "float",     "indent",      "int",
      "items",    "join",   "last",       "length",     "list",      "lower",       "map",
      "max",      "min",    "reject",     "rejectattr", "replace",   "reverse",     "round",
      "safe",     "select", "selectattr", "sort",       "string",    "sum",         "title",
      "tojson",   "trim",   "unique",     "upper",      "wordcount", "forceescape",
  };
  return names;
}

const std::set<std::string>& test_names() {
  static const std::set<std::string> names = {
      "boolean",  "callable", "defined",  "divisibleby", "eq",    "equalto", "==",   "escaped",
      "even",     "false",    "float",    "ge",          ">=",    "gt",      ">",    "greaterthan",
      "in",       "integer",  "iterable", "le",          "<=",    "lower",   "lt",   "<",
      "lessthan", "mapping",  "ne",       "!=",          "none",  "number",  "odd",  "sameas",
      "sequence", "string",   "true",     "undefined",   "upper", "filter",  "test",
  };
  return names;
}

}  // namespace

bool has_filter(const std::string& name) {
  return filter_names().count(name) != 0;
}
bool has_test(const std::string& name) {
  return test_names().count(name) != 0;
}

Value apply_filter(const std::string& name, const Value& v, CallArgs& a, const Limits& limits) {
  if (name == "default" || name == "d") {
    Value dflt = a.take(0, "default_value");
    const bool boolean = arg_bool(a.take(1, "boolean"), false);
    a.expect_consumed(name);
    if (v.is_undefined() || (boolean && !truthy(v)))
      return dflt.is_undefined() ? Value::string("") : dflt;
    return v;
  }
  if (name == "tojson") return do_tojson(v, a);
  if (name == "map") return do_map(v, a, limits);
  if (name == "select" || name == "reject") return do_select(v, a, false, name == "select");
  if (name == "selectattr" || name == "rejectattr")
    return do_select(v, a, true, name == "selectattr");
  if (name == "sort") return do_sort(v, a);
  if (name == "max" || name == "min") return do_minmax(v, a, name == "max");
  if (name == "trim") {
    Value chars = a.take(0, "chars");
    a.expect_consumed(name);
    std::optional<std::string> c;
    if (chars.is_string()) c = chars.s;
    return Value::string(py_strip(soft_str(v), c, true, true));
  }
  if (name == "replace") {
    Value from = a.take(0, "old"), to = a.take(1, "new"), count = a.take(2, "count");
    a.expect_consumed(name);
    return Value::string(
        py_replace(soft_str(v), soft_str(from), soft_str(to), count.is_int() ? count.i : -1));
  }
  if (name == "indent") {
    Value width = a.take(0, "width");
    const bool first = arg_bool(a.take(1, "first"), false);
    const bool blank = arg_bool(a.take(2, "blank"), false);
    a.expect_consumed(name);
    return Value::string(do_indent(soft_str(v), width, first, blank));
  }
  if (name == "int") {
    Value dflt = a.take(0, "default"), base = a.take(1, "base");
    a.expect_consumed(name);
    return to_int(v, dflt, base.is_int() ? base.i : 10);
  }
  if (name == "float") {
    Value dflt = a.take(0, "default");
    a.expect_consumed(name);
    return to_float(v, dflt);
  }
  if (name == "join") {
    Value sep = a.take(0, "d"), attribute = a.take(1, "attribute");
    a.expect_consumed(name);
    std::string out;
    bool first = true;
    for (const Value& item : iterate(v)) {
      if (!first) out += soft_str(sep);
      first = false;
      out += soft_str(attribute.is_undefined() ? item : attr_path(item, attribute));
      if (out.size() > limits.max_output_bytes) throw_error("MemoryError: join result too large");
    }
    return Value::string(std::move(out));
  }
  if (name == "round") {
    Value precision = a.take(0, "precision"), method = a.take(1, "method");
    a.expect_consumed(name);
    const int64_t p = precision.is_int() ? precision.i : 0;
    if (!v.is_number()) throw_error("TypeError: round requires a number");
    const std::string m = method.is_string() ? method.s : "common";
    if (m == "common") {
      if (v.is_int()) return Value::integer(v.i);
      return Value::number(py_round(v.f, p));
    }
    const double scale = std::pow(10.0, static_cast<double>(p));
    if (m == "ceil") return Value::number(std::ceil(v.as_double() * scale) / scale);
    if (m == "floor") return Value::number(std::floor(v.as_double() * scale) / scale);
    throw_error("FilterArgumentError: method must be common, ceil or floor");
  }
  if (name == "sum") {
    Value attribute = a.take(0, "attribute"), start = a.take(1, "start");
    a.expect_consumed(name);
    Value total = start.is_undefined() ? Value::integer(0) : start;
    for (const Value& item : iterate(v))
      total = binary_op("+", total, attribute.is_undefined() ? item : attr_path(item, attribute),
                        limits);
    return total;
  }
  if (name == "unique") {
    const bool cs = arg_bool(a.take(0, "case_sensitive"), false);
    Value attribute = a.take(1, "attribute");
    a.expect_consumed(name);
    List out, seen;
    for (const Value& item : iterate(v)) {
      Value key = fold(attribute.is_undefined() ? item : attr_path(item, attribute), cs);
      if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, key); }))
        continue;
      seen.push_back(key);
      out.push_back(item);
    }
    return Value::make_generator(std::move(out));
  }
  if (name == "batch") {
    Value n = a.take(0, "linecount"), fill = a.take(1, "fill_with");
    a.expect_consumed(name);
    if (!n.is_int() || n.i <= 0) throw_error("ValueError: batch size must be positive");
    List out, cur;
    for (const Value& item : iterate(v)) {
      cur.push_back(item);
      if (static_cast<int64_t>(cur.size()) == n.i) {
        out.push_back(Value::make_list(std::move(cur)));
        cur.clear();
      }
    }
    if (!cur.empty()) {
      if (!fill.is_undefined())
        while (static_cast<int64_t>(cur.size()) < n.i) cur.push_back(fill);
      out.push_back(Value::make_list(std::move(cur)));
    }
    return Value::make_generator(std::move(out));
  }
  if (name == "attr") {
    Value attr = a.take(0, "name");
    a.expect_consumed(name);
    if (!attr.is_string()) throw_error("TypeError: attribute name must be a string");
    return get_attr(v, attr.s);
  }
  if (name == "dictsort") {
    const bool cs = arg_bool(a.take(0, "case_sensitive"), false);
    Value by = a.take(1, "by");
    const bool reverse = arg_bool(a.take(2, "reverse"), false);
    a.expect_consumed(name);
    if (!v.is_dict()) throw_error("TypeError: dictsort requires a mapping");
    const size_t pos = by.is_string() && by.s == "value" ? 1 : 0;
    List items;
    for (const auto& [k, e] : v.dict->items)
      items.push_back(Value::make_tuple({Value::string(k), e}));
    std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
      const Value kx = fold((*x.list)[pos], cs), ky = fold((*y.list)[pos], cs);
      return reverse ? compare_op("<", ky, kx) : compare_op("<", kx, ky);
    });
    return Value::make_list(std::move(items));
  }
  a.expect_consumed(name);
  if (name == "length" || name == "count") return Value::integer(length_of(v));
  if (name == "string") return Value::string(soft_str(v));
  if (name == "safe") return Value::string(soft_str(v));
  if (name == "escape" || name == "e" || name == "forceescape")
    return Value::string(html_escape(soft_str(v)));
  if (name == "upper") return Value::string(py_upper(soft_str(v)));
  if (name == "lower") return Value::string(py_lower(soft_str(v)));
  if (name == "title") return Value::string(py_title(soft_str(v)));
  if (name == "capitalize") return Value::string(py_capitalize(soft_str(v)));
  if (name == "wordcount") {
    int64_t n = 0;
    bool in_word = false;
    for (char32_t c : utf8_decode(soft_str(v))) {
      const bool w = c == '_' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
                     (c >= 'A' && c <= 'Z') || (c >= 0x80 && !py_isspace(c) && py_isprintable(c));
      if (w && !in_word) ++n;
      in_word = w;
    }
    return Value::integer(n);
  }
  if (name == "abs") {
    if (v.is_int()) {
      if (v.i == INT64_MIN) throw_error("OverflowError: integer result too large");
      return Value::integer(v.i < 0 ? -v.i : v.i);
    }
    if (v.kind == K::kFloat) return Value::number(std::fabs(v.f));
    throw_error(fmt::format("TypeError: bad operand type for abs(): '{}'", type_name(v)));
  }
  if (name == "first") {
    if (v.is_sequence())
      return v.list->empty() ? Value::undefined("No first item, sequence was empty.")
                             : v.list->front();
    const List items = iterate(v);
    return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
  }
  if (name == "last") {
    if (v.is_dict() || v.lazy)
      throw_error(fmt::format("TypeError: '{}' object is not reversible", type_name(v)));
    const List items = iterate(v);
    return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
  }
  if (name == "list") return Value::make_list(iterate(v));
  if (name == "reverse") {
    if (v.is_string()) return Value::string(py_slice(v.s, std::nullopt, std::nullopt, -1));
    if (v.is_dict()) throw_error("TypeError: argument to reversed() must be a sequence");
    List items = iterate(v);
    std::reverse(items.begin(), items.end());
    return Value::make_generator(std::move(items));
  }
  if (name == "items") {
    if (v.is_undefined()) return Value::make_generator({});
    if (!v.is_dict()) throw_error("TypeError: Can only get item pairs from a mapping.");
    List items;
    for (const auto& [k, e] : v.dict->items)
      items.push_back(Value::make_tuple({Value::string(k), e}));
    return Value::make_generator(std::move(items));
  }
  throw_error(fmt::format("TemplateAssertionError: No filter named '{}'.", name));
}

bool apply_test(const std::string& name, const Value& v, CallArgs& a) {
  if (name == "divisibleby" || name == "eq" || name == "equalto" || name == "==" || name == "ne" ||
      name == "!=" || name == "lt" || name == "lessthan" || name == "<" || name == "le" ||
      name == "<=" || name == "gt" || name == "greaterthan" || name == ">" || name == "ge" ||
      name == ">=" || name == "in" || name == "sameas") {
    Value other = a.take(0, "other");
    a.expect_consumed(name);
    if (name == "divisibleby") {
      Value m = binary_op("%", v, other, Limits{});
      return equals(m, Value::integer(0));
    }
    if (name == "eq" || name == "equalto" || name == "==") return equals(v, other);
    if (name == "ne" || name == "!=") return !equals(v, other);
    if (name == "lt" || name == "lessthan" || name == "<") return compare_op("<", v, other);
    if (name == "le" || name == "<=") return compare_op("<=", v, other);
    if (name == "gt" || name == "greaterthan" || name == ">") return compare_op(">", v, other);
    if (name == "ge" || name == ">=") return compare_op(">=", v, other);
    if (name == "in") return contains(other, v);
    // `is` identity: singletons and shared containers compare by identity, others by value.
    if (v.kind != other.kind) return false;
    if (v.is_sequence()) return v.list == other.list;
    if (v.is_dict()) return v.dict == other.dict;
    return equals(v, other);
  }
  a.expect_consumed(name);
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_dict();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.kind == K::kInt;
  if (name == "float") return v.kind == K::kFloat;
  if (name == "boolean") return v.kind == K::kBool;
  if (name == "true") return v.kind == K::kBool && v.b;
  if (name == "false") return v.kind == K::kBool && !v.b;
  if (name == "callable") return v.kind == K::kCallable;
  if (name == "escaped") return false;
  if (name == "iterable")
    return v.is_undefined() || v.is_string() || v.is_sequence() || v.is_dict();
  if (name == "sequence")
    return v.is_undefined() || v.is_string() || (v.is_sequence() && !v.lazy) || v.is_dict();
  if (name == "odd" || name == "even") {
    Value m = binary_op("%", v, Value::integer(2), Limits{});
    return equals(m, Value::integer(name == "odd" ? 1 : 0));
  }
  if (name == "lower") return v.is_string() && py_lower(v.s) == v.s;
  if (name == "upper") return v.is_string() && py_upper(v.s) == v.s;
  if (name == "filter") return v.is_string() && has_filter(v.s);
  if (name == "test") return v.is_string() && has_test(v.s);
  throw_error(fmt::format("TemplateAssertionError: No test named '{}'.", name));
}

}  // namespace kestrel::chat
