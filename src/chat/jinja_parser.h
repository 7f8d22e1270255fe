// chat/jinja_parser.h — tokens → Program, following jinja2's grammar and operator precedence.
#pragma once

#include <memory>
#include <string_view>

#include "chat/jinja_ast.h"

namespace kestrel::chat {

// Throws JinjaError (with line and column) on syntax errors.
std::shared_ptr<const Program> parse_template(std::string_view source);

}  // namespace kestrel::chat
