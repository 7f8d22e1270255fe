// Python's view of JSON messages and the DSML rendering the DeepSeek encoders share.
#include "chat/deepseek_encoding_parts.h"

#include "chat/jinja_value.h"

namespace kestrel::chat::deepseek {

const ojson* get(const ojson& msg, std::string_view key) {
  if (!msg.is_object()) return nullptr;
  const auto it = msg.find(key);
  return it == msg.end() || it->is_null() ? nullptr : &*it;
}

bool truthy(const ojson* v) {
  if (v == nullptr || v->is_null()) return false;
  if (v->is_boolean()) return v->get<bool>();
  if (v->is_number_integer()) return v->get<int64_t>() != 0;
  if (v->is_number_unsigned()) return v->get<uint64_t>() != 0;
  if (v->is_number_float()) return v->get<double>() != 0.0;
  if (v->is_string()) return !v->get_ref<const std::string&>().empty();
  return !v->empty();  // array or object
}

std::string str(const ojson* v) {
  if (v == nullptr) return "None";
  if (v->is_string()) return v->get<std::string>();
  return to_str(from_json(*v));
}

std::string str_or_empty(const ojson* v) {
  return truthy(v) ? str(v) : "";
}

std::string to_json(const ojson& v) {
  return chat::to_json(from_json(v), JsonOptions{});
}

std::string role(const ojson& msg) {
  const ojson* r = get(msg, "role");
  return r != nullptr && r->is_string() ? r->get<std::string>() : "";
}

int64_t last_user_index(const std::vector<ojson>& messages) {
  for (int64_t i = static_cast<int64_t>(messages.size()) - 1; i >= 0; --i) {
    const std::string r = role(messages[static_cast<size_t>(i)]);
    if (r == "user" || r == "developer") return i;
  }
  return -1;
}

Expected<std::string> tool_schemas(const ojson& tools) {
  if (!tools.is_array()) return make_error("tools must be a list");
  std::string out;
  for (const ojson& tool : tools) {
    if (!tool.is_object() || !tool.contains("function"))
      return make_error("a tool has no \"function\"");
    if (!out.empty()) out += "\n";
    out += to_json(tool["function"]);
  }
  return out;
}

namespace {

constexpr std::string_view kDsml = "｜DSML｜";

// One call's arguments as DSML parameter lines.
Expected<std::string> dsml_parameters(const ojson& function) {
  if (!function.contains("arguments")) return make_error("a tool call has no arguments");
  ojson arguments = function["arguments"];
  if (arguments.is_string()) {
    arguments = ojson::parse(arguments.get<std::string>(), nullptr, /*allow_exceptions=*/false);
    if (arguments.is_discarded()) return make_error("a tool call's arguments are not JSON");
  }
  if (!arguments.is_object()) return make_error("a tool call's arguments are not an object");
  std::string out;
  for (const auto& [key, value] : arguments.items()) {
    if (!out.empty()) out += "\n";
    const bool is_string = value.is_string();
    out += fmt::format("<{}parameter name=\"{}\" string=\"{}\">{}</{}parameter>", kDsml, key,
                       is_string ? "true" : "false",
                       is_string ? value.get<std::string>() : to_json(value), kDsml);
  }
  return out;
}

}  // namespace

Expected<std::string> dsml_tool_calls(const ojson& tool_calls, std::string_view block) {
  if (!tool_calls.is_array()) return make_error("tool_calls must be a list");
  std::string invokes;
  for (const ojson& call : tool_calls) {
    const ojson* function = call.is_object() ? get(call, "function") : nullptr;
    if (function == nullptr || !function->is_object() || !function->contains("name"))
      return make_error("a tool call has no function name");
    auto parameters = dsml_parameters(*function);
    if (!parameters.ok()) return parameters.error();
    if (!invokes.empty()) invokes += "\n";
    invokes += fmt::format("<{}invoke name=\"{}\">\n{}\n</{}invoke>", kDsml,
                           str(get(*function, "name")), *parameters, kDsml);
  }
  return fmt::format("<{}{}>\n{}\n</{}{}>", kDsml, block, invokes, kDsml, block);
}

}  // namespace kestrel::chat::deepseek
