// SectionCallFormat: calls inside a begin/end section; broken calls fall back to content.
#include <algorithm>

#include "chat/tool_parsers/format.h"

namespace kestrel::chat {
namespace {

bool proper_prefix_of(std::string_view s, std::string_view marker) {
  return s.size() < marker.size() && marker.starts_with(s);
}

}  // namespace

Step SectionCallFormat::next(std::string_view text, bool eof) {
  Step step = in_section_ ? in_section(text, eof) : outside(text, eof);
  // Whitespace is dropped only right after a call (content may be cut anywhere).
  if (step.kind == StepKind::kContent) after_call_ = false;
  if (step.kind == StepKind::kCalls) after_call_ = true;
  if (step.kind != StepKind::kNeedMore) searched_ = 0;
  return step;
}

Step SectionCallFormat::outside(std::string_view text, bool eof) {
  const std::string_view markers[] = {m_.section_begin};
  if (auto step = scan_content(text, eof, markers, after_call_)) return *step;
  const size_t call = m_.section_begin.size() + leading_space(text.substr(m_.section_begin.size()));
  const std::string_view after = text.substr(call);
  if (after.starts_with(m_.call_begin)) {
    // The section marker goes with its first call: dropped with it, or content with it.
    Step step = call_at(text, call, eof);
    if (step.kind != StepKind::kNeedMore) {
      in_section_ = true;
      section_calls_ = step.kind == StepKind::kCalls ? 1 : 0;
    }
    return step;
  }
  if (!eof && proper_prefix_of(after, m_.call_begin)) return need_more();
  return content_step(m_.section_begin.size());
}

Step SectionCallFormat::in_section(std::string_view text, bool eof) {
  const size_t space = leading_space(text);
  const std::string_view after = text.substr(space);
  if (after.empty()) return eof ? skip_step(space) : need_more();
  if (after.starts_with(m_.section_end)) {
    in_section_ = false;
    after_call_ = section_calls_ > 0;
    const size_t length = space + m_.section_end.size();
    return after_call_ ? skip_step(length) : content_step(length);
  }
  if (after.starts_with(m_.call_begin)) {
    Step step = call_at(text, space, eof);
    if (step.kind == StepKind::kCalls) ++section_calls_;
    return step;
  }
  if (!eof && (proper_prefix_of(after, m_.section_end) || proper_prefix_of(after, m_.call_begin))) {
    return need_more();
  }
  // Not a call: the section is over (unclosed) and this is ordinary text.
  in_section_ = false;
  after_call_ = section_calls_ > 0;
  return outside(text, eof);
}

// The call whose call_begin is at text[at]; the `at` bytes before it go with it.
Step SectionCallFormat::call_at(std::string_view text, size_t at, bool eof) {
  const size_t body = at + m_.call_begin.size();
  // An unclosed call's text only grows while streaming: search only what is new.
  const size_t from =
      resume_search(searched_, body, std::max(m_.call_begin.size(), m_.call_end.size()));
  const size_t end = text.find(m_.call_end, from);
  const size_t reopen = text.find(m_.call_begin, from);
  if (reopen != std::string_view::npos && (end == std::string_view::npos || reopen < end)) {
    return content_step(reopen);
  }
  if (end == std::string_view::npos) {
    if (eof) return content_step(text.size());
    searched_ = text.size();
    std::optional<std::string> name = peek_name(text.substr(body));
    return name ? need_more({std::move(*name)}) : need_more();
  }
  const size_t length = end + m_.call_end.size();
  std::optional<RawCall> call = parse_body(text.substr(body, end - body));
  if (!call) return content_step(length);
  return calls_step(length, {std::move(*call)});
}

}  // namespace kestrel::chat
