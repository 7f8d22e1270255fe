// deepseek_v32 and deepseek_v4: DSML calls (DeepSeek's XML-like markup, its bars the full-width
// U+FF5C). A block opened by <｜DSML｜function_calls> (V3.2) or <｜DSML｜tool_calls> (V4) and
// closed by the matching end tag holds one or more calls, one tag per line:
//   <｜DSML｜invoke name="get_weather">
//   <｜DSML｜parameter name="city" string="true">Zürich</｜DSML｜parameter>
//   <｜DSML｜parameter name="days" string="false">2</｜DSML｜parameter>
//   </｜DSML｜invoke>
// string="true" takes the value verbatim as a string; string="false" reads it as JSON whatever
// it looks like ("42" is a number only with string="false"), and a value that is not JSON
// breaks the call. The arguments keep the parameters' order. Whitespace may separate the
// attributes and the tags; anything else between the parameters breaks the call.
#include "chat/tool_parsers/format.h"

namespace kestrel::chat {
namespace {

using ojson = nlohmann::ordered_json;

constexpr std::string_view kInvokeBegin = "<｜DSML｜invoke";
constexpr std::string_view kInvokeEnd = "</｜DSML｜invoke>";
constexpr std::string_view kParameterBegin = "<｜DSML｜parameter";
constexpr std::string_view kParameterEnd = "</｜DSML｜parameter>";

// ` KEY="VALUE"` at the front of `s` (at least one whitespace first, a non-empty value); `s`
// moves past it.
std::optional<std::string_view> attribute(std::string_view& s, std::string_view key) {
  const size_t space = leading_space(s);
  if (space == 0) return std::nullopt;
  std::string_view rest = s.substr(space);
  if (!rest.starts_with(key)) return std::nullopt;
  rest.remove_prefix(key.size());
  if (!rest.starts_with("=\"")) return std::nullopt;
  rest.remove_prefix(2);
  const size_t quote = rest.find('"');
  if (quote == std::string_view::npos || quote == 0) return std::nullopt;
  s = rest.substr(quote + 1);
  return rest.substr(0, quote);
}

// Optional whitespace and the '>' that ends a tag; `s` moves past it.
bool tag_end(std::string_view& s) {
  s.remove_prefix(leading_space(s));
  if (!s.starts_with('>')) return false;
  s.remove_prefix(1);
  return true;
}

class DsmlFormat : public SectionCallFormat {
 public:
  DsmlFormat(std::string_view block_begin, std::string_view block_end, ToolSetPtr tools)
      : SectionCallFormat({block_begin, block_end, kInvokeBegin, kInvokeEnd}, std::move(tools)) {}

 protected:
  std::optional<RawCall> parse_body(std::string_view body) const override {
    std::optional<std::string> name = invoke_name(body);
    if (!name) return std::nullopt;
    ojson args = ojson::object();
    while (true) {
      body.remove_prefix(leading_space(body));
      if (body.empty()) break;
      if (!body.starts_with(kParameterBegin)) return std::nullopt;
      body.remove_prefix(kParameterBegin.size());
      const std::optional<std::string_view> param = attribute(body, "name");
      const std::optional<std::string_view> is_string = attribute(body, "string");
      if (!param || !is_string || (*is_string != "true" && *is_string != "false") ||
          !tag_end(body)) {
        return std::nullopt;
      }
      const size_t end = body.find(kParameterEnd);
      if (end == std::string_view::npos) return std::nullopt;
      const std::string_view value = body.substr(0, end);
      if (*is_string == "true") {
        args[std::string(*param)] = std::string(value);
      } else {
        ojson parsed = ojson::parse(value, nullptr, /*allow_exceptions=*/false);
        if (parsed.is_discarded()) return std::nullopt;
        args[std::string(*param)] = std::move(parsed);
      }
      body.remove_prefix(end + kParameterEnd.size());
    }
    // Invalid UTF-8 in a value cannot be written as JSON: the replace handler keeps dump()
    // from throwing.
    return RawCall{std::move(*name), args.dump(-1, ' ', false, ojson::error_handler_t::replace)};
  }

  std::optional<std::string> peek_name(std::string_view partial_body) const override {
    return invoke_name(partial_body);
  }

 private:
  // ` name="NAME">` at the front of an invoke's body, when NAME is accepted; `body` moves past
  // it.
  std::optional<std::string> invoke_name(std::string_view& body) const {
    const std::optional<std::string_view> name = attribute(body, "name");
    if (!name || !tag_end(body) || !tools().accepts(*name)) return std::nullopt;
    return std::string(*name);
  }
};

}  // namespace

std::unique_ptr<CallFormat> make_deepseek_v32_format(ToolSetPtr tools) {
  return std::make_unique<DsmlFormat>("<｜DSML｜function_calls>", "</｜DSML｜function_calls>",
                                      std::move(tools));
}

std::unique_ptr<CallFormat> make_deepseek_v4_format(ToolSetPtr tools) {
  return std::make_unique<DsmlFormat>("<｜DSML｜tool_calls>", "</｜DSML｜tool_calls>",
                                      std::move(tools));
}

}  // namespace kestrel::chat
