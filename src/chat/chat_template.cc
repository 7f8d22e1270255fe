// chat/chat_template.cc — the public face of the Jinja engine: turns internal JinjaErrors into
// Expected errors at the boundary.
#include "chat/chat_template.h"

#include "chat/jinja_parser.h"
#include "chat/jinja_render.h"

namespace kestrel::chat {

namespace {

Error to_error(const JinjaError& e) {
  if (e.line == 0) return Error{e.message};
  return make_error("line {}, column {}: {}", e.line, e.column, e.message);
}

}  // namespace

Expected<ChatTemplate> ChatTemplate::parse(std::string_view source) {
  ChatTemplate t;
  try {
    t.program_ = parse_template(source);
  } catch (const JinjaError& e) {
    return to_error(e);
  }
  return t;
}

Expected<std::string> ChatTemplate::render_value(const Value& context, const Limits& limits) const {
  if (!context.is_dict()) return make_error("chat template context must be a JSON object");
  try {
    return render_program(*program_, *context.dict, limits);
  } catch (const JinjaError& e) {
    return to_error(e);
  }
}

Expected<std::string> ChatTemplate::render(const nlohmann::ordered_json& context,
                                           const Limits& limits) const {
  return render_value(from_json(context), limits);
}

Expected<std::string> ChatTemplate::render(const nlohmann::json& context,
                                           const Limits& limits) const {
  return render_value(from_json(context), limits);
}

Expected<std::string> render(std::string_view source, const nlohmann::ordered_json& context) {
  KASSIGN(ChatTemplate t, ChatTemplate::parse(source));
  return t.render(context);
}

Expected<std::string> render(std::string_view source, const nlohmann::json& context) {
  KASSIGN(ChatTemplate t, ChatTemplate::parse(source));
  return t.render(context);
}

}  // namespace kestrel::chat
