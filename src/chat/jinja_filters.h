// chat/jinja_filters.h — jinja2's built-in filters and tests, plus transformers' tojson.
#pragma once

#include <string>

#include "chat/jinja_ops.h"
#include "chat/jinja_value.h"

namespace kestrel::chat {

// value | name(args). Throws TemplateAssertionError-style errors for unknown filters.
Value apply_filter(const std::string& name, const Value& value, CallArgs& args,
                   const Limits& limits);
// value is name(args).
bool apply_test(const std::string& name, const Value& value, CallArgs& args);
bool has_filter(const std::string& name);
bool has_test(const std::string& name);

}  // namespace kestrel::chat
