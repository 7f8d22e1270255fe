// deepseek_v3 and deepseek_v31: calls inside a section opened by <｜tool▁calls▁begin｜> and
// closed by <｜tool▁calls▁end｜>, each between <｜tool▁call▁begin｜> and <｜tool▁call▁end｜>.
// Inside a call, V3 writes
//   function<｜tool▁sep｜>NAME\n```json\n{ARGS}\n```
// and V3.1 writes
//   NAME<｜tool▁sep｜>{ARGS}
#include "chat/tool_parsers/format.h"

namespace kestrel::chat {
namespace {

constexpr std::string_view kSectionBegin = "<｜tool▁calls▁begin｜>";
constexpr std::string_view kSectionEnd = "<｜tool▁calls▁end｜>";
constexpr std::string_view kCallBegin = "<｜tool▁call▁begin｜>";
constexpr std::string_view kCallEnd = "<｜tool▁call▁end｜>";
constexpr std::string_view kSep = "<｜tool▁sep｜>";

constexpr SectionMarkers kMarkers = {kSectionBegin, kSectionEnd, kCallBegin, kCallEnd};

class DeepSeekV3Format : public SectionCallFormat {
 public:
  explicit DeepSeekV3Format(ToolSetPtr tools) : SectionCallFormat(kMarkers, std::move(tools)) {}

 protected:
  std::optional<RawCall> parse_body(std::string_view body) const override {
    size_t header_end = 0;
    std::optional<std::string> name = name_line(body, &header_end);
    if (!name) return std::nullopt;
    constexpr std::string_view kFenceOpen = "```json";
    constexpr std::string_view kFenceClose = "```";
    const std::string_view fenced = trim_space(body.substr(header_end));
    if (fenced.size() < kFenceOpen.size() + kFenceClose.size() || !fenced.starts_with(kFenceOpen) ||
        !fenced.ends_with(kFenceClose)) {
      return std::nullopt;
    }
    std::optional<std::string> args = arguments_object(
        fenced.substr(kFenceOpen.size(), fenced.size() - kFenceOpen.size() - kFenceClose.size()));
    if (!args) return std::nullopt;
    return RawCall{std::move(*name), std::move(*args)};
  }

  std::optional<std::string> peek_name(std::string_view partial_body) const override {
    size_t header_end = 0;
    return name_line(partial_body, &header_end);
  }

 private:
  // "TYPE<｜tool▁sep｜>NAME\n": the accepted NAME; `end` one past the newline.
  std::optional<std::string> name_line(std::string_view body, size_t* end) const {
    const size_t sep = body.find(kSep);
    if (sep == std::string_view::npos) return std::nullopt;
    const size_t newline = body.find('\n', sep);
    if (newline == std::string_view::npos) return std::nullopt;
    const size_t start = sep + kSep.size();
    std::string name(trim_space(body.substr(start, newline - start)));
    if (!tools().accepts(name)) return std::nullopt;
    *end = newline + 1;
    return name;
  }
};

class DeepSeekV31Format : public SectionCallFormat {
 public:
  explicit DeepSeekV31Format(ToolSetPtr tools) : SectionCallFormat(kMarkers, std::move(tools)) {}

 protected:
  std::optional<RawCall> parse_body(std::string_view body) const override {
    std::optional<std::string> name = peek_name(body);
    if (!name) return std::nullopt;
    std::optional<std::string> args = arguments_object(body.substr(body.find(kSep) + kSep.size()));
    if (!args) return std::nullopt;
    return RawCall{std::move(*name), std::move(*args)};
  }

  // "NAME<｜tool▁sep｜>": the accepted NAME.
  std::optional<std::string> peek_name(std::string_view partial_body) const override {
    const size_t sep = partial_body.find(kSep);
    if (sep == std::string_view::npos) return std::nullopt;
    std::string name(trim_space(partial_body.substr(0, sep)));
    if (!tools().accepts(name)) return std::nullopt;
    return name;
  }
};

}  // namespace

std::unique_ptr<CallFormat> make_deepseek_v3_format(ToolSetPtr tools) {
  return std::make_unique<DeepSeekV3Format>(std::move(tools));
}

std::unique_ptr<CallFormat> make_deepseek_v31_format(ToolSetPtr tools) {
  return std::make_unique<DeepSeekV31Format>(std::move(tools));
}

}  // namespace kestrel::chat
