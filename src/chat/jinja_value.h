// chat/jinja_value.h — the values a chat template computes with, modelled on the Python objects
// jinja2 sees when transformers renders a template (str, int, float, bool, None, list, tuple,
// dict, jinja2's Undefined and namespace, callables).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace kestrel::chat {

// Runtime and parse failures inside the engine. Line/column are 1-based; 0 means "not yet
// known" and is filled in by the nearest enclosing node. Never escapes the public API.
struct JinjaError {
  std::string message;
  int line = 0;
  int column = 0;
};

[[noreturn]] void throw_error(std::string message);

struct Value;
using List = std::vector<Value>;
struct Dict;
struct Namespace;
struct CallArgs;
using Function = std::function<Value(CallArgs&)>;

struct Value {
  enum class Kind : uint8_t {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kTuple,
    kDict,
    kNamespace,
    kCallable,
  };
  Kind kind = Kind::kUndefined;
  bool b = false;
  int64_t i = 0;
  double f = 0.0;
  std::string s;  // string value; for kUndefined the name that was missing (for messages)
  std::shared_ptr<const List> list;  // kList and kTuple: immutable, as the sandbox forbids mutation
  std::shared_ptr<const Dict> dict;
  std::shared_ptr<Namespace> ns;  // the one mutable object: {% set ns.x = … %}
  std::shared_ptr<const Function> fn;
  // A kList standing for a Python generator or iterator (what map, select, reverse… return):
  // always truthy, no len(), not subscriptable, not JSON serializable.
  bool lazy = false;

  static Value undefined(std::string hint = {});
  static Value none();
  static Value boolean(bool v);
  static Value integer(int64_t v);
  static Value number(double v);
  static Value string(std::string v);
  static Value make_list(List items);
  static Value make_generator(List items);
  static Value make_tuple(List items);
  static Value make_dict(Dict d);
  static Value callable(Function f);

  bool is_undefined() const { return kind == Kind::kUndefined; }
  bool is_none() const { return kind == Kind::kNone; }
  bool is_string() const { return kind == Kind::kString; }
  bool is_int() const { return kind == Kind::kInt || kind == Kind::kBool; }  // bool is an int
  bool is_number() const { return is_int() || kind == Kind::kFloat; }
  bool is_sequence() const { return kind == Kind::kList || kind == Kind::kTuple; }
  bool is_dict() const { return kind == Kind::kDict; }
  double as_double() const { return kind == Kind::kFloat ? f : static_cast<double>(i); }
};

// Insertion-ordered string-keyed mapping, as JSON objects and Python dicts are.
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  const Value* find(std::string_view key) const;
  void set(std::string key, Value v);
};

struct Namespace {
  Dict attrs;
};

struct CallArgs {
  std::vector<Value> args;
  std::vector<std::pair<std::string, Value>> kwargs;
  // Removes and returns positional `index` or keyword `name`; undefined when absent.
  Value take(size_t index, std::string_view name);
  // Keyword-only parameter.
  Value take_keyword(std::string_view name) { return take(SIZE_MAX, name); }
  // Fails when arguments remain that no parameter took.
  void expect_consumed(std::string_view what) const;
  std::vector<bool> used;
};

// Objects keep their key order only with ordered_json; nlohmann::json sorts keys.
Value from_json(const nlohmann::json& j);
Value from_json(const nlohmann::ordered_json& j);

// Python type name for messages ("str", "list", "NoneType", …).
std::string type_name(const Value& v);
bool truthy(const Value& v);
// str(v) as Python prints it; Undefined prints as "".
std::string to_str(const Value& v);
// repr(v) as Python prints it.
std::string repr(const Value& v);
std::string float_repr(double d);
bool equals(const Value& a, const Value& b);

struct JsonOptions {
  bool indented = false;  // indent=None: one line
  std::string indent_str;
  std::string item_sep = ", ";
  std::string key_sep = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;
};
// json.dumps(v, …) as Python writes it.
std::string to_json(const Value& v, const JsonOptions& opts);

}  // namespace kestrel::chat
