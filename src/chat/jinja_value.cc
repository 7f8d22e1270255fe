// chat/jinja_value.cc — construction, Python str()/repr(), equality and json.dumps for Values.
#include "chat/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include <fmt/format.h>

#include "chat/py_str.h"

namespace kestrel::chat {

void throw_error(std::string message) {
  throw JinjaError{std::move(message), 0, 0};
}

Value Value::undefined(std::string hint) {
  Value v;
  v.s = std::move(hint);
  return v;
}
Value Value::none() {
  Value v;
  v.kind = Kind::kNone;
  return v;
}
Value Value::boolean(bool b) {
  Value v;
  v.kind = Kind::kBool;
  v.b = b;
  v.i = b ? 1 : 0;
  return v;
}
Value Value::integer(int64_t i) {
  Value v;
  v.kind = Kind::kInt;
  v.i = i;
  return v;
}
Value Value::number(double f) {
  Value v;
  v.kind = Kind::kFloat;
  v.f = f;
  return v;
}
Value Value::string(std::string s) {
  Value v;
  v.kind = Kind::kString;
  v.s = std::move(s);
  return v;
}
Value Value::make_list(List items) {
  Value v;
  v.kind = Kind::kList;
  v.list = std::make_shared<const List>(std::move(items));
  return v;
}
Value Value::make_generator(List items) {
  Value v = make_list(std::move(items));
  v.lazy = true;
  return v;
}
Value Value::make_tuple(List items) {
  Value v = make_list(std::move(items));
  v.kind = Kind::kTuple;
  return v;
}
Value Value::make_dict(Dict d) {
  Value v;
  v.kind = Kind::kDict;
  v.dict = std::make_shared<const Dict>(std::move(d));
  return v;
}
Value Value::callable(Function f) {
  Value v;
  v.kind = Kind::kCallable;
  v.fn = std::make_shared<const Function>(std::move(f));
  return v;
}

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}

void Dict::set(std::string key, Value v) {
  for (auto& [k, old] : items) {
    if (k == key) {
      old = std::move(v);
      return;
    }
  }
  items.emplace_back(std::move(key), std::move(v));
}

Value CallArgs::take(size_t index, std::string_view name) {
  if (used.size() < args.size() + kwargs.size()) used.resize(args.size() + kwargs.size());
  if (index < args.size()) {
    used[index] = true;
    return args[index];
  }
  for (size_t k = 0; k < kwargs.size(); ++k) {
    if (kwargs[k].first == name) {
      used[args.size() + k] = true;
      return kwargs[k].second;
    }
  }
  return Value::undefined();
}

void CallArgs::expect_consumed(std::string_view what) const {
  for (size_t k = 0; k < args.size() + kwargs.size(); ++k) {
    if (k >= used.size() || !used[k]) {
      if (k < args.size()) throw_error(fmt::format("TypeError: {}: too many arguments", what));
      throw_error(fmt::format("TypeError: {}: unexpected keyword argument '{}'", what,
                              kwargs[k - args.size()].first));
    }
  }
}

namespace {

template <typename Json>
Value convert_json(const Json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null:
      return Value::none();
    case nlohmann::json::value_t::boolean:
      return Value::boolean(j.template get<bool>());
    case nlohmann::json::value_t::number_integer:
      return Value::integer(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      const auto u = j.template get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value::number(static_cast<double>(u));
      return Value::integer(static_cast<int64_t>(u));
    }
    case nlohmann::json::value_t::number_float:
      return Value::number(j.template get<double>());
    case nlohmann::json::value_t::string:
      return Value::string(j.template get<std::string>());
    case nlohmann::json::value_t::array: {
      List items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(convert_json(e));
      return Value::make_list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      Dict d;
      d.items.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it) d.set(it.key(), convert_json(it.value()));
      return Value::make_dict(std::move(d));
    }
    default:
      return Value::undefined();
  }
}

}  // namespace

Value from_json(const nlohmann::json& j) {
  return convert_json(j);
}
Value from_json(const nlohmann::ordered_json& j) {
  return convert_json(j);
}

std::string type_name(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
      return "Undefined";
    case Value::Kind::kNone:
      return "NoneType";
    case Value::Kind::kBool:
      return "bool";
    case Value::Kind::kInt:
      return "int";
    case Value::Kind::kFloat:
      return "float";
    case Value::Kind::kString:
      return "str";
    case Value::Kind::kList:
      return v.lazy ? "generator" : "list";
    case Value::Kind::kTuple:
      return "tuple";
    case Value::Kind::kDict:
      return "dict";
    case Value::Kind::kNamespace:
      return "Namespace";
    case Value::Kind::kCallable:
      return "function";
  }
  return "object";
}

bool truthy(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return false;
    case Value::Kind::kBool:
    case Value::Kind::kInt:
      return v.i != 0;
    case Value::Kind::kFloat:
      return v.f != 0.0;
    case Value::Kind::kString:
      return !v.s.empty();
    case Value::Kind::kList:
    case Value::Kind::kTuple:
      return v.lazy || !v.list->empty();
    case Value::Kind::kDict:
      return !v.dict->items.empty();
    default:
      return true;
  }
}

// Python's float.__repr__: the shortest digits that round-trip, scientific notation outside
// 1e-4 <= |x| < 1e16.
std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  const size_t epos = sci.find('e');
  const int exp = std::stoi(sci.substr(epos + 1));
  std::string mant = sci.substr(0, epos);
  const bool neg = mant[0] == '-';
  if (neg) mant.erase(0, 1);
  std::string digits;
  for (char c : mant)
    if (c != '.') digits.push_back(c);
  std::string out = neg ? "-" : "";
  if (exp < -4 || exp >= 16) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    out += fmt::format("e{}{:02d}", exp < 0 ? '-' : '+', std::abs(exp));
    return out;
  }
  if (exp < 0) {
    out += "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
  } else if (static_cast<size_t>(exp) + 1 >= digits.size()) {
    out += digits + std::string(static_cast<size_t>(exp) + 1 - digits.size(), '0') + ".0";
  } else {
    out += digits.substr(0, static_cast<size_t>(exp) + 1) + "." +
           digits.substr(static_cast<size_t>(exp) + 1);
  }
  return out;
}

namespace {

std::string repr_string(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t cp : utf8_decode(s)) {
    if (cp == static_cast<char32_t>(quote) || cp == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(cp));
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (py_isprintable(cp)) {
      append_utf8(out, cp);
    } else if (cp < 0x100) {
      out += fmt::format("\\x{:02x}", static_cast<uint32_t>(cp));
    } else if (cp < 0x10000) {
      out += fmt::format("\\u{:04x}", static_cast<uint32_t>(cp));
    } else {
      out += fmt::format("\\U{:08x}", static_cast<uint32_t>(cp));
    }
  }
  out.push_back(quote);
  return out;
}

}  // namespace

std::string to_str(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
      return "";
    case Value::Kind::kString:
      return v.s;
    default:
      return repr(v);
  }
}

std::string repr(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
      return "Undefined";
    case Value::Kind::kNone:
      return "None";
    case Value::Kind::kBool:
      return v.b ? "True" : "False";
    case Value::Kind::kInt:
      return std::to_string(v.i);
    case Value::Kind::kFloat:
      return float_repr(v.f);
    case Value::Kind::kString:
      return repr_string(v.s);
    case Value::Kind::kList:
    case Value::Kind::kTuple: {
      if (v.lazy) return "<generator object>";
      const bool tuple = v.kind == Value::Kind::kTuple;
      std::string out = tuple ? "(" : "[";
      for (size_t k = 0; k < v.list->size(); ++k) {
        if (k) out += ", ";
        out += repr((*v.list)[k]);
      }
      if (tuple && v.list->size() == 1) out += ",";
      out += tuple ? ")" : "]";
      return out;
    }
    case Value::Kind::kDict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, e] : v.dict->items) {
        if (!first) out += ", ";
        first = false;
        out += repr_string(k) + ": " + repr(e);
      }
      return out + "}";
    }
    case Value::Kind::kNamespace: {
      std::string out = "<Namespace {";
      bool first = true;
      for (const auto& [k, e] : v.ns->attrs.items) {
        if (!first) out += ", ";
        first = false;
        out += repr_string(k) + ": " + repr(e);
      }
      return out + "}>";
    }
    case Value::Kind::kCallable:
      return "<function>";
  }
  return "";
}

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind == Value::Kind::kFloat || b.kind == Value::Kind::kFloat)
      return a.as_double() == b.as_double();
    return a.i == b.i;
  }
  if (a.is_sequence() && b.is_sequence()) {
    if (a.lazy || b.lazy) return a.list == b.list;
    if (a.kind != b.kind || a.list->size() != b.list->size()) return false;
    for (size_t k = 0; k < a.list->size(); ++k)
      if (!equals((*a.list)[k], (*b.list)[k])) return false;
    return true;
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.s == b.s;
    case Value::Kind::kDict: {
      if (a.dict->items.size() != b.dict->items.size()) return false;
      for (const auto& [k, e] : a.dict->items) {
        const Value* o = b.dict->find(k);
        if (!o || !equals(e, *o)) return false;
      }
      return true;
    }
    case Value::Kind::kNamespace:
      return a.ns == b.ns;
    case Value::Kind::kCallable:
      return a.fn == b.fn;
    default:
      return false;
  }
}

namespace {

void json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out.push_back('"');
  for (char32_t cp : utf8_decode(s)) {
    switch (cp) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (cp < 0x20 || (ensure_ascii && cp >= 0x7F)) {
          if (cp >= 0x10000) {
            const char32_t v = cp - 0x10000;
            out += fmt::format("\\u{:04x}\\u{:04x}", static_cast<uint32_t>(0xD800 + (v >> 10)),
                               static_cast<uint32_t>(0xDC00 + (v & 0x3FF)));
          } else {
            out += fmt::format("\\u{:04x}", static_cast<uint32_t>(cp));
          }
        } else {
          append_utf8(out, cp);
        }
    }
  }
  out.push_back('"');
}

void json_value(std::string& out, const Value& v, const JsonOptions& o, int depth) {
  if (depth > 512) throw_error("ValueError: Circular reference detected");
  auto newline = [&](int d) {
    out.push_back('\n');
    for (int k = 0; k < d; ++k) out += o.indent_str;
  };
  switch (v.kind) {
    case Value::Kind::kNone:
      out += "null";
      return;
    case Value::Kind::kBool:
      out += v.b ? "true" : "false";
      return;
    case Value::Kind::kInt:
      out += std::to_string(v.i);
      return;
    case Value::Kind::kFloat:
      if (std::isnan(v.f)) {
        out += "NaN";
      } else if (std::isinf(v.f)) {
        out += v.f < 0 ? "-Infinity" : "Infinity";
      } else {
        out += float_repr(v.f);
      }
      return;
    case Value::Kind::kString:
      json_string(out, v.s, o.ensure_ascii);
      return;
    case Value::Kind::kList:
    case Value::Kind::kTuple: {
      if (v.lazy) throw_error("TypeError: Object of type generator is not JSON serializable");
      if (v.list->empty()) {
        out += "[]";
        return;
      }
      out.push_back('[');
      for (size_t k = 0; k < v.list->size(); ++k) {
        if (k) out += o.item_sep;
        if (o.indented) newline(depth + 1);
        json_value(out, (*v.list)[k], o, depth + 1);
      }
      if (o.indented) newline(depth);
      out.push_back(']');
      return;
    }
    case Value::Kind::kDict:
    case Value::Kind::kNamespace: {
      const Dict& d = v.kind == Value::Kind::kDict ? *v.dict : v.ns->attrs;
      if (v.kind == Value::Kind::kNamespace)
        throw_error("TypeError: Object of type Namespace is not JSON serializable");
      if (d.items.empty()) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& it : d.items) items.push_back(&it);
      if (o.sort_keys)
        std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) {
          return utf8_decode(a->first) < utf8_decode(b->first);
        });
      out.push_back('{');
      for (size_t k = 0; k < items.size(); ++k) {
        if (k) out += o.item_sep;
        if (o.indented) newline(depth + 1);
        json_string(out, items[k]->first, o.ensure_ascii);
        out += o.key_sep;
        json_value(out, items[k]->second, o, depth + 1);
      }
      if (o.indented) newline(depth);
      out.push_back('}');
      return;
    }
    default:
      throw_error(
          fmt::format("TypeError: Object of type {} is not JSON serializable", type_name(v)));
  }
}

}  // namespace

std::string to_json(const Value& v, const JsonOptions& opts) {
  std::string out;
  json_value(out, v, opts, 0);
  return out;
}

}  // namespace kestrel::chat
