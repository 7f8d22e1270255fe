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

bool proper_prefix_of(std::string_view s, std::string_view marker) {
  return s.size() < marker.size() && marker.starts_with(s);
}

class DeepSeekFormat : public CallFormat {
 public:
  explicit DeepSeekFormat(ToolSetPtr tools) : tools_(std::move(tools)) {}

  Step next(std::string_view text, bool eof) override {
    Step step = in_section_ ? in_section(text, eof) : outside(text, eof);
    // Whitespace is dropped only right after a call (content may be cut anywhere).
    if (step.kind == StepKind::kContent) after_call_ = false;
    if (step.kind == StepKind::kCalls) after_call_ = true;
    if (step.kind != StepKind::kNeedMore) searched_ = 0;
    return step;
  }

 protected:
  // What is between kCallBegin and kCallEnd.
  virtual std::optional<RawCall> parse_body(std::string_view body) const = 0;
  virtual std::optional<std::string> peek_name(std::string_view partial_body) const = 0;
  const ToolSet& tools() const { return *tools_; }

 private:
  Step outside(std::string_view text, bool eof) {
    const std::string_view markers[] = {kSectionBegin};
    if (auto step = scan_content(text, eof, markers, after_call_)) return *step;
    const size_t call = kSectionBegin.size() + leading_space(text.substr(kSectionBegin.size()));
    const std::string_view after = text.substr(call);
    if (after.starts_with(kCallBegin)) {
      // The section marker goes with its first call: dropped with it, or content with it.
      Step step = call_at(text, call, eof);
      if (step.kind != StepKind::kNeedMore) {
        in_section_ = true;
        section_calls_ = step.kind == StepKind::kCalls ? 1 : 0;
      }
      return step;
    }
    if (!eof && proper_prefix_of(after, kCallBegin)) return need_more();
    return content_step(kSectionBegin.size());
  }

  Step in_section(std::string_view text, bool eof) {
    const size_t space = leading_space(text);
    const std::string_view after = text.substr(space);
    if (after.empty()) return eof ? skip_step(space) : need_more();
    if (after.starts_with(kSectionEnd)) {
      in_section_ = false;
      after_call_ = section_calls_ > 0;
      const size_t length = space + kSectionEnd.size();
      return after_call_ ? skip_step(length) : content_step(length);
    }
    if (after.starts_with(kCallBegin)) {
      Step step = call_at(text, space, eof);
      if (step.kind == StepKind::kCalls) ++section_calls_;
      return step;
    }
    if (!eof && (proper_prefix_of(after, kSectionEnd) || proper_prefix_of(after, kCallBegin))) {
      return need_more();
    }
    // Not a call: the section is over (unclosed) and this is ordinary text.
    in_section_ = false;
    after_call_ = section_calls_ > 0;
    return outside(text, eof);
  }

  // The call whose kCallBegin is at text[at]; the `at` bytes before it go with it.
  Step call_at(std::string_view text, size_t at, bool eof) {
    const size_t body = at + kCallBegin.size();
    // An unclosed call's text only grows while streaming: search only what is new.
    const size_t from = resume_search(searched_, body, kCallBegin.size());
    const size_t end = text.find(kCallEnd, from);
    const size_t reopen = text.find(kCallBegin, from);
    if (reopen != std::string_view::npos && (end == std::string_view::npos || reopen < end)) {
      return content_step(reopen);
    }
    if (end == std::string_view::npos) {
      if (eof) return content_step(text.size());
      searched_ = text.size();
      std::optional<std::string> name = peek_name(text.substr(body));
      return name ? need_more({std::move(*name)}) : need_more();
    }
    const size_t length = end + kCallEnd.size();
    std::optional<RawCall> call = parse_body(text.substr(body, end - body));
    if (!call) return content_step(length);
    return calls_step(length, {std::move(*call)});
  }

  ToolSetPtr tools_;
  bool in_section_ = false;
  int section_calls_ = 0;  // calls parsed in the open section
  bool after_call_ = false;
  size_t searched_ = 0;  // bytes of the unclosed call at the front already searched
};

class DeepSeekV3Format : public DeepSeekFormat {
 public:
  using DeepSeekFormat::DeepSeekFormat;

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

class DeepSeekV31Format : public DeepSeekFormat {
 public:
  using DeepSeekFormat::DeepSeekFormat;

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
