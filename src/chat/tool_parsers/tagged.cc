// TaggedCallFormat: finds <open>…<close> blocks and falls back to content for broken ones.
#include <algorithm>

#include "chat/tool_parsers/format.h"

namespace kestrel::chat {

Step TaggedCallFormat::next(std::string_view text, bool eof) {
  Step step = decide(text, eof);
  // Only whitespace right after a call is dropped; content may be cut anywhere when streaming,
  // so what follows content must not depend on where it was cut.
  if (step.kind == StepKind::kContent) after_call_ = false;
  if (step.kind == StepKind::kCalls) after_call_ = true;
  if (step.kind != StepKind::kNeedMore) searched_ = 0;
  return step;
}

Step TaggedCallFormat::decide(std::string_view text, bool eof) {
  const std::string_view markers[] = {open_};
  if (auto step = scan_content(text, eof, markers, after_call_)) return *step;
  // An unclosed block's text only grows while streaming: search only what is new.
  const size_t from = resume_search(searched_, open_.size(), std::max(open_.size(), close_.size()));
  const size_t close = text.find(close_, from);
  // An unclosed block followed by another one is broken up to where the next one opens.
  const size_t reopen = text.find(open_, from);
  if (reopen != std::string_view::npos && (close == std::string_view::npos || reopen < close)) {
    return content_step(reopen);
  }
  if (close == std::string_view::npos) {
    if (eof) return content_step(text.size());
    searched_ = text.size();
    std::optional<std::string> name = peek_name(text.substr(open_.size()));
    return name ? need_more({std::move(*name)}) : need_more();
  }
  const size_t length = close + close_.size();
  std::optional<RawCall> call = parse_body(text.substr(open_.size(), close - open_.size()));
  if (!call) return content_step(length);
  return calls_step(length, {std::move(*call)});
}

}  // namespace kestrel::chat
