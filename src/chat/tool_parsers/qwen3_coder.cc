// qwen3_coder (Qwen3-Coder, Qwen3.5): XML-like calls whose parameter values are bare text,
//   <tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>
// The values are typed by the tool's JSON schema, since the text itself carries no types.
#include <algorithm>
#include <cctype>

#include "chat/tool_parsers/format.h"

namespace kestrel::chat {
namespace {

using ojson = nlohmann::ordered_json;

constexpr std::string_view kFunctionOpen = "<function=";
constexpr std::string_view kFunctionClose = "</function>";
constexpr std::string_view kParameterOpen = "<parameter=";
constexpr std::string_view kParameterClose = "</parameter>";

// The JSON types a parameter's schema allows: "type" (a name or a list) and those of
// anyOf/oneOf alternatives.
std::vector<std::string> schema_types(const nlohmann::json* parameters, const std::string& name) {
  std::vector<std::string> types;
  if (parameters == nullptr || !parameters->is_object()) return types;
  const auto props = parameters->find("properties");
  if (props == parameters->end() || !props->is_object()) return types;
  const auto prop = props->find(name);
  if (prop == props->end() || !prop->is_object()) return types;
  const auto add = [&](const nlohmann::json& schema) {
    const auto type = schema.find("type");
    if (type == schema.end()) return;
    if (type->is_string()) types.push_back(type->get<std::string>());
    if (type->is_array()) {
      for (const auto& t : *type) {
        if (t.is_string()) types.push_back(t.get<std::string>());
      }
    }
  };
  add(*prop);
  for (const char* key : {"anyOf", "oneOf"}) {
    const auto alternatives = prop->find(key);
    if (alternatives == prop->end() || !alternatives->is_array()) continue;
    for (const auto& alt : *alternatives) {
      if (alt.is_object()) add(alt);
    }
  }
  return types;
}

std::optional<ojson> convert(std::string_view text, const std::string& type) {
  if (type == "boolean") {
    std::string lower(text);
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return std::tolower(c); });
    if (lower == "true") return ojson(true);
    if (lower == "false") return ojson(false);
    return std::nullopt;
  }
  ojson j = ojson::parse(text, nullptr, false);
  const bool fits = (type == "integer" && j.is_number_integer()) ||
                    (type == "number" && j.is_number()) || (type == "object" && j.is_object()) ||
                    (type == "array" && j.is_array());
  if (!fits) return std::nullopt;
  return j;
}

// A parameter's value as its schema types it: the types in schema order, the first that fits
// wins ("string" always fits); text no type fits stays a string.
ojson typed_value(const std::string& raw, const std::vector<std::string>& types) {
  const std::string_view text = trim_space(raw);
  if (text == "null" && std::find(types.begin(), types.end(), "null") != types.end()) {
    return ojson(nullptr);
  }
  for (const std::string& type : types) {
    if (type == "string") break;
    if (std::optional<ojson> v = convert(text, type)) return *v;
  }
  return ojson(raw);
}

class Qwen3CoderFormat : public TaggedCallFormat {
 public:
  explicit Qwen3CoderFormat(ToolSetPtr tools)
      : TaggedCallFormat("<tool_call>", "</tool_call>", std::move(tools)) {}

 protected:
  std::optional<RawCall> parse_body(std::string_view body) const override {
    size_t end = 0;
    std::optional<std::string> name = function_name(body, &end);
    if (!name) return std::nullopt;
    const nlohmann::json* parameters = tools().parameters(*name);
    ojson args = ojson::object();
    std::string_view rest = body.substr(end);
    while (true) {
      rest.remove_prefix(leading_space(rest));
      if (rest.starts_with(kFunctionClose)) break;
      if (!rest.starts_with(kParameterOpen)) return std::nullopt;
      const size_t name_end = rest.find('>');
      const size_t value_end = rest.find(kParameterClose);
      if (name_end == std::string_view::npos || value_end == std::string_view::npos ||
          value_end < name_end) {
        return std::nullopt;
      }
      const std::string param(
          trim_space(rest.substr(kParameterOpen.size(), name_end - kParameterOpen.size())));
      // The template writes each value between a newline after the tag and one before the
      // closing tag; those two are markup, any other whitespace is the value's.
      std::string_view value = rest.substr(name_end + 1, value_end - name_end - 1);
      if (value.starts_with('\n')) value.remove_prefix(1);
      if (value.ends_with('\n')) value.remove_suffix(1);
      if (param.empty()) return std::nullopt;
      args[param] = typed_value(std::string(value), schema_types(parameters, param));
      rest.remove_prefix(value_end + kParameterClose.size());
    }
    if (!trim_space(rest.substr(kFunctionClose.size())).empty()) return std::nullopt;
    return RawCall{std::move(*name), args.dump(-1, ' ', false, ojson::error_handler_t::replace)};
  }

  std::optional<std::string> peek_name(std::string_view partial_body) const override {
    size_t end = 0;
    return function_name(partial_body, &end);
  }

 private:
  // `<function=NAME>` at the start of the body (after whitespace), when NAME is accepted; `end`
  // is set one past the '>'.
  std::optional<std::string> function_name(std::string_view body, size_t* end) const {
    const size_t start = leading_space(body);
    if (!body.substr(start).starts_with(kFunctionOpen)) return std::nullopt;
    const size_t name_start = start + kFunctionOpen.size();
    const size_t close = body.find('>', name_start);
    if (close == std::string_view::npos) return std::nullopt;
    std::string name(trim_space(body.substr(name_start, close - name_start)));
    if (!tools().accepts(name)) return std::nullopt;
    *end = close + 1;
    return name;
  }
};

}  // namespace

std::unique_ptr<CallFormat> make_qwen3_coder_format(ToolSetPtr tools) {
  return std::make_unique<Qwen3CoderFormat>(std::move(tools));
}

}  // namespace kestrel::chat
