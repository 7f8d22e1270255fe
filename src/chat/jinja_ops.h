// chat/jinja_ops.h — Python operator semantics and attribute/item lookup as jinja2's sandboxed
// environment performs them. All failures throw JinjaError with the Python exception name.
#pragma once

#include <string>

#include "chat/jinja_value.h"

namespace kestrel::chat {

// Caps on work a template may cause, so hostile templates cannot exhaust memory.
struct Limits {
  size_t max_output_bytes = size_t{64} << 20;
  size_t max_collection = size_t{1} << 22;  // items from range(), repetition, join
  uint64_t max_steps = uint64_t{1} << 26;   // statements, loop iterations and calls executed
  int max_call_depth = 64;                  // nested macro calls
};

// obj.name: methods of str/dict/list first, then the item, else Undefined.
Value get_attr(const Value& obj, const std::string& name);
// obj[key]: the item, else an attribute when key is a string, else Undefined.
Value get_item(const Value& obj, const Value& key);
// a op b for + - * / // % ** (Python numeric/str/list rules).
Value binary_op(const std::string& op, const Value& a, const Value& b, const Limits& limits);
// a op b for == != < <= > >= in notin.
bool compare_op(const std::string& op, const Value& a, const Value& b);
bool contains(const Value& container, const Value& item);
// The items `for x in v` visits: list items, dict keys, string characters; Undefined is empty.
List iterate(const Value& v);
// Call a value (function, macro or bound method); Undefined and non-callables raise.
Value call_value(const Value& callee, CallArgs& args);
// jinja2's Undefined raising on use (attribute access, calls, arithmetic).
[[noreturn]] void undefined_error(const Value& v);

}  // namespace kestrel::chat
