// chat/tool_parsers/format.h — what each model family's tool-call format tells the shared
// driver (tool_parsers/tool_parser.cc). A format looks at the unconsumed front of the text and
// decides how much of it is content, dropped markup, or complete calls — or that it needs more
// text. parse() runs the same decisions with `eof` set from the start, so a format whose decisions
// on a prefix agree with those on the whole text streams exactly what parse() returns.
#pragma once

#include <algorithm>
#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "chat/tool_parsers/tool_parser.h"

namespace kestrel::chat {

struct RawCall {
  std::string name;
  std::string arguments;  // JSON object text
};

enum class StepKind {
  kNeedMore,  // undecided until more text arrives (never returned with eof)
  kContent,   // the first `length` bytes are content
  kSkip,      // the first `length` bytes are markup or separators to drop
  kCalls,     // the first `length` bytes are the complete calls in `calls`
};

struct Step {
  StepKind kind = StepKind::kNeedMore;
  size_t length = 0;
  std::vector<RawCall> calls;  // kCalls
  // kNeedMore: names of the calls at the front of the text that are already known (and valid),
  // in order, so the driver can announce them early.
  std::vector<std::string> names;
};

class CallFormat {
 public:
  virtual ~CallFormat() = default;
  // `text` is non-empty. A consuming step (anything but kNeedMore) has length > 0. State changes
  // made while returning kNeedMore must be ones the same text forces anyway, so that deciding on
  // a prefix first and on the longer text later ends where deciding on the longer text does.
  virtual Step next(std::string_view text, bool eof) = 0;
};

// The request's tools, shared by the formats of one parser.
struct ToolSet {
  std::vector<ToolSpec> tools;
  // With no tools in the request any plain name (no spaces, controls, quotes or angle brackets)
  // is accepted.
  bool accepts(std::string_view name) const;
  // The function's parameters schema, or nullptr.
  const nlohmann::json* parameters(std::string_view name) const;
};

using ToolSetPtr = std::shared_ptr<const ToolSet>;

// Calls wrapped one by one in open/close tags (<tool_call>…</tool_call>); subclasses read what
// is between the tags. Whitespace between and after calls is dropped.
class TaggedCallFormat : public CallFormat {
 public:
  TaggedCallFormat(std::string_view open, std::string_view close, ToolSetPtr tools)
      : open_(open), close_(close), tools_(std::move(tools)) {}
  Step next(std::string_view text, bool eof) final;

 protected:
  virtual std::optional<RawCall> parse_body(std::string_view body) const = 0;
  // The call's name (only an accepted one) from the start of its body, once known.
  virtual std::optional<std::string> peek_name(std::string_view partial_body) const = 0;
  const ToolSet& tools() const { return *tools_; }

 private:
  Step decide(std::string_view text, bool eof);

  std::string_view open_, close_;
  ToolSetPtr tools_;
  bool after_call_ = false;
  size_t searched_ = 0;  // bytes of the unclosed block at the front already searched
};

// The markers of a section that holds one or more calls.
struct SectionMarkers {
  std::string_view section_begin, section_end;  // around all the calls
  std::string_view call_begin, call_end;        // around each call
};

// Calls inside a section: the section's begin marker, then calls each between call_begin and
// call_end, then the section's end marker, with whitespace between them (DeepSeek's formats).
// Subclasses read what is between a call's markers. The section marker goes with the first
// call (dropped with it, or content with it when it is broken); a section that is left without
// its end marker ends at the first text that is not a call.
class SectionCallFormat : public CallFormat {
 public:
  SectionCallFormat(SectionMarkers markers, ToolSetPtr tools)
      : m_(markers), tools_(std::move(tools)) {}
  Step next(std::string_view text, bool eof) final;

 protected:
  // What is between call_begin and call_end.
  virtual std::optional<RawCall> parse_body(std::string_view body) const = 0;
  // The call's name (only an accepted one) from the start of its body, once known.
  virtual std::optional<std::string> peek_name(std::string_view partial_body) const = 0;
  const ToolSet& tools() const { return *tools_; }

 private:
  Step outside(std::string_view text, bool eof);
  Step in_section(std::string_view text, bool eof);
  Step call_at(std::string_view text, size_t at, bool eof);

  SectionMarkers m_;
  ToolSetPtr tools_;
  bool in_section_ = false;
  int section_calls_ = 0;  // calls parsed in the open section
  bool after_call_ = false;
  size_t searched_ = 0;  // bytes of the unclosed call at the front already searched
};

std::unique_ptr<CallFormat> make_hermes_format(ToolSetPtr tools);
std::unique_ptr<CallFormat> make_qwen3_coder_format(ToolSetPtr tools);
std::unique_ptr<CallFormat> make_deepseek_v3_format(ToolSetPtr tools);
std::unique_ptr<CallFormat> make_deepseek_v31_format(ToolSetPtr tools);
std::unique_ptr<CallFormat> make_deepseek_v32_format(ToolSetPtr tools);
std::unique_ptr<CallFormat> make_deepseek_v4_format(ToolSetPtr tools);
std::unique_ptr<CallFormat> make_llama3_json_format(ToolSetPtr tools);
std::unique_ptr<CallFormat> make_mistral_format(ToolSetPtr tools);

// ---- Shared scanning helpers (tool_parsers/scan.cc) ----

inline Step need_more(std::vector<std::string> names = {}) {
  return Step{StepKind::kNeedMore, 0, {}, std::move(names)};
}
inline Step content_step(size_t n) {
  return Step{StepKind::kContent, n, {}, {}};
}
inline Step skip_step(size_t n) {
  return Step{StepKind::kSkip, n, {}, {}};
}
inline Step calls_step(size_t n, std::vector<RawCall> calls) {
  return Step{StepKind::kCalls, n, std::move(calls), {}};
}

// Where a search for needles of up to `longest` bytes resumes in a text that grew, when its first
// `searched` bytes held none (a match may straddle their end); never before `start`.
inline size_t resume_search(size_t searched, size_t start, size_t longest) {
  return std::max(start, searched >= longest ? searched - longest + 1 : 0);
}

bool is_json_space(char c);
size_t leading_space(std::string_view s);
std::string_view trim_space(std::string_view s);

// Content outside calls, up to the earliest of `markers`. nullopt when `text` starts with a
// marker (the caller parses what follows). Without eof, a tail that may be the start of a marker
// is held back. With `drop_leading_space` (after a call), leading whitespace is dropped when a
// marker or the end follows it, and kept as content otherwise.
std::optional<Step> scan_content(std::string_view text, bool eof,
                                 std::span<const std::string_view> markers,
                                 bool drop_leading_space);

// Where the JSON object or array starting at text[0] ('{' or '[') ends (one past its closing
// bracket), or nullopt when the text ends first. Only brackets and strings are tracked; whether
// the value is valid JSON is left to the real parser.
std::optional<size_t> json_value_end(std::string_view text);

// The "name" of a JSON object whose text may be incomplete, once `{"name": "…"` has arrived.
std::optional<std::string> peek_json_name(std::string_view partial_object);

// A complete call object {"name": str, <args_key>: object}; the arguments come back as compact
// JSON text in the model's key order. nullopt when malformed or the name is not accepted.
std::optional<RawCall> call_from_json(std::string_view object_text,
                                      std::span<const std::string_view> args_keys,
                                      const ToolSet& tools);

// Arguments text: a JSON object in the model's key order, nullopt unless `text` is one.
std::optional<std::string> arguments_object(std::string_view text);

}  // namespace kestrel::chat
