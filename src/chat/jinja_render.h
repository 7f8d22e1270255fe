// chat/jinja_render.h — executes a parsed template over a context of variables.
#pragma once

#include <string>

#include "chat/jinja_ast.h"
#include "chat/jinja_ops.h"

namespace kestrel::chat {

// Renders `program` with `context` as the template's variables. Throws JinjaError (with the
// failing node's line and column). Touches no shared mutable state: concurrent calls are safe.
std::string render_program(const Program& program, const Dict& context, const Limits& limits);

}  // namespace kestrel::chat
