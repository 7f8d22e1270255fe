#include "server/protocol/chat_messages.h"

#include <fmt/format.h>

namespace kestrel::server {

using nlohmann::json;

namespace {

bool is_string_or_null(const json& object, const char* key) {
  const auto it = object.find(key);
  return it == object.end() || it->is_null() || it->is_string();
}

ProtocolError message_error(const std::string& what) {
  return bad_request(what, "messages");
}

std::optional<ProtocolError> validate_content_part(const json& part, const std::string& where) {
  if (part.is_string()) return std::nullopt;  // a bare string is a text part
  if (!part.is_object()) return message_error(where + " must be an object or a string");
  std::string type;
  const auto type_it = part.find("type");
  if (type_it != part.end() && !type_it->is_null()) {
    if (!type_it->is_string()) return message_error(where + ".type must be a string");
    type = type_it->get<std::string>();
  } else if (part.contains("text")) {
    type = "text";  // vLLM infers the type from the keys when "type" is missing
  }
  // The text-like part types vLLM renders as text (Responses-style clients send input_text and
  // output_text in chat requests too).
  if (type == "text" || type == "input_text" || type == "output_text" || type == "refusal" ||
      type == "thinking") {
    if (type == "input_text" || type == "output_text") type = "text";
    const auto text = part.find(type);
    if (text == part.end() || !text->is_string()) {
      return message_error(fmt::format("{}.{} must be a string", where, type));
    }
    return std::nullopt;
  }
  if (type == "image_url" || type == "input_image" || type == "image_embeds" ||
      type == "input_audio" || type == "audio_url" || type == "video_url" || type == "file" ||
      type == "image_pil" || type == "audio_embeds") {
    return message_error(fmt::format(
        "{}: content parts of type '{}' are not supported; Kestrel serves text-only models", where,
        type));
  }
  return message_error(fmt::format("{}: Unknown part type: {}", where, type));
}

std::optional<ProtocolError> validate_tool_calls(const json& calls, const std::string& where) {
  if (!calls.is_array()) return message_error(where + " must be an array");
  for (size_t j = 0; j < calls.size(); ++j) {
    const std::string call_where = fmt::format("{}[{}]", where, j);
    const json& call = calls[j];
    if (!call.is_object()) return message_error(call_where + " must be an object");
    if (!is_string_or_null(call, "id")) return message_error(call_where + ".id must be a string");
    const auto function = call.find("function");
    if (function == call.end() || !function->is_object()) {
      return message_error(call_where + ".function must be an object");
    }
    const auto name = function->find("name");
    if (name == function->end() || !name->is_string()) {
      return message_error(call_where + ".function.name must be a string");
    }
    // Clients send the OpenAI string form; some send the object chat templates consume.
    const auto arguments = function->find("arguments");
    if (arguments != function->end() && !arguments->is_null() && !arguments->is_string() &&
        !arguments->is_object()) {
      return message_error(call_where + ".function.arguments must be a string or an object");
    }
  }
  return std::nullopt;
}

std::optional<ProtocolError> validate_message(const json& message, size_t i) {
  const std::string where = fmt::format("messages[{}]", i);
  if (!message.is_object()) return message_error(where + " must be an object");
  const auto role = message.find("role");
  if (role == message.end() || !role->is_string()) {
    return message_error(where + ".role must be a string");
  }
  const auto content = message.find("content");
  if (content != message.end() && !content->is_null() && !content->is_string()) {
    if (!content->is_array()) {
      return message_error(where + ".content must be a string, null or an array of content parts");
    }
    for (size_t j = 0; j < content->size(); ++j) {
      if (auto e = validate_content_part((*content)[j], fmt::format("{}.content[{}]", where, j))) {
        return e;
      }
    }
  }
  for (const char* key : {"tool_call_id", "name", "reasoning", "reasoning_content"}) {
    if (!is_string_or_null(message, key)) {
      return message_error(fmt::format("{}.{} must be a string", where, key));
    }
  }
  const auto calls = message.find("tool_calls");
  if (calls != message.end() && !calls->is_null()) {
    return validate_tool_calls(*calls, where + ".tool_calls");
  }
  return std::nullopt;
}

}  // namespace

std::optional<ProtocolError> validate_chat_messages(const json& messages) {
  if (!messages.is_array()) return message_error("messages must be an array of message objects");
  if (messages.empty()) return message_error("messages must not be empty");
  for (size_t i = 0; i < messages.size(); ++i) {
    if (auto e = validate_message(messages[i], i)) return e;
  }
  return std::nullopt;
}

std::optional<ProtocolError> validate_tools(const json& tools) {
  if (!tools.is_array()) return bad_request("tools must be an array of tool objects", "tools");
  if (tools.empty()) {
    return bad_request(
        "`tools` must not be an empty array. Either provide at least one tool or omit the field "
        "entirely.",
        "tools");
  }
  for (size_t i = 0; i < tools.size(); ++i) {
    const json& tool = tools[i];
    const std::string where = fmt::format("tools[{}]", i);
    if (!tool.is_object()) return bad_request(where + " must be an object", "tools");
    const auto type = tool.find("type");
    if (type != tool.end() && !type->is_null() && *type != "function") {
      return bad_request(where + ".type must be \"function\"", "tools");
    }
    const auto function = tool.find("function");
    if (function == tool.end() || !function->is_object()) {
      return bad_request(where + ".function must be an object", "tools");
    }
    const auto name = function->find("name");
    if (name == function->end() || !name->is_string()) {
      return bad_request(where + ".function.name must be a string", "tools");
    }
    const auto parameters = function->find("parameters");
    if (parameters != function->end() && !parameters->is_null() && !parameters->is_object()) {
      return bad_request(where + ".function.parameters must be an object", "tools");
    }
  }
  return std::nullopt;
}

ParseResult<ToolChoice> parse_tool_choice(const json* tool_choice, const json* tools) {
  ToolChoice choice;
  if (tool_choice == nullptr) {
    if (tools != nullptr) choice.mode = ToolChoice::Mode::kAuto;
    return choice;
  }
  if (*tool_choice == "none") return choice;
  if (tools == nullptr) {
    return bad_request("When using `tool_choice`, `tools` must be set.", "tool_choice");
  }
  if (*tool_choice == "auto") {
    choice.mode = ToolChoice::Mode::kAuto;
    return choice;
  }
  if (*tool_choice == "required") {
    choice.mode = ToolChoice::Mode::kRequired;
    return choice;
  }
  if (!tool_choice->is_object()) {
    return bad_request(
        fmt::format("Invalid value for `tool_choice`: {}! Only named tools, "
                    "\"none\", \"auto\" or \"required\" are supported.",
                    tool_choice->dump(-1, ' ', false, json::error_handler_t::replace)),
        "tool_choice");
  }
  constexpr const char* kUsage =
      "Correct usage: `{\"type\": \"function\", \"function\": {\"name\": \"my_function\"}}`";
  const auto function = tool_choice->find("function");
  if (function == tool_choice->end() || !function->is_object()) {
    return bad_request(fmt::format("Invalid value for `function` in `tool_choice`! {}", kUsage),
                       "tool_choice.function");
  }
  const auto name = function->find("name");
  if (name == function->end() || !name->is_string() ||
      name->get_ref<const std::string&>().empty()) {
    return bad_request(fmt::format("Invalid `name` in `function` in `tool_choice`! {}", kUsage),
                       "tool_choice.function.name");
  }
  for (const json& tool : *tools) {
    if (tool.at("function").at("name") == *name) {
      choice.mode = ToolChoice::Mode::kNamed;
      choice.function_name = name->get<std::string>();
      return choice;
    }
  }
  return bad_request(
      "The tool specified in `tool_choice` does not match any of the specified `tools`",
      "tool_choice");
}

}  // namespace kestrel::server
