// chat/reasoning_parser.cc — one <think>…</think> state machine, configured per parser name and
// prompt.
#include "chat/reasoning_parser.h"

#include <algorithm>
#include <utility>

namespace kestrel::chat {
namespace {

constexpr std::string_view kStart = "<think>";
constexpr std::string_view kEnd = "</think>";
// DeepSeek-V4 may open its tool calls without closing reasoning first.
constexpr std::string_view kDsmlToolCalls = "<｜DSML｜tool_calls>";

enum class PromptThinking { kOpen, kClosed, kUnset };

PromptThinking prompt_thinking(std::string_view prompt) {
  const size_t last = prompt.find_last_not_of(" \t\r\n");
  prompt = prompt.substr(0, last == std::string_view::npos ? 0 : last + 1);
  if (prompt.ends_with(kStart)) return PromptThinking::kOpen;
  if (prompt.ends_with(kEnd)) return PromptThinking::kClosed;
  return PromptThinking::kUnset;
}

struct Mode {
  bool starts_in_reasoning = false;
  // A "<think>" at offset 0 of the output is dropped and (re)opens reasoning.
  bool leading_start_marker = false;
  // Besides "</think>", this marker (when not empty) ends reasoning; it is kept as content.
  std::string_view content_marker;
};

// Length of the longest proper prefix of `marker` that `text` ends with.
size_t partial_marker_suffix(std::string_view text, std::string_view marker) {
  for (size_t n = std::min(text.size(), marker.size() - 1); n > 0; --n) {
    if (text.ends_with(marker.substr(0, n))) return n;
  }
  return 0;
}

class ThinkTagParser final : public ReasoningParser {
 public:
  explicit ThinkTagParser(Mode mode)
      : mode_(mode), state_(mode.leading_start_marker ? State::kLeading : initial_state()) {}

  ReasoningSplit parse(std::string_view text) override {
    bool reasoning = mode_.starts_in_reasoning;
    if (mode_.leading_start_marker && text.starts_with(kStart)) {
      text.remove_prefix(kStart.size());
      reasoning = true;
    }
    if (!reasoning) return {"", std::string(text)};
    const auto [end, skip] = reasoning_end(text);
    if (end == std::string_view::npos) return {std::string(text), ""};
    return {std::string(text.substr(0, end)), std::string(text.substr(end + skip))};
  }

  ReasoningSplit feed(std::string_view delta) override {
    held_.append(delta);
    ReasoningSplit out;
    for (;;) {
      switch (state_) {
        case State::kLeading:
          if (held_.starts_with(kStart)) {
            held_.erase(0, kStart.size());
            state_ = State::kReasoning;
            continue;
          }
          if (held_.size() < kStart.size() && kStart.starts_with(held_)) return out;
          state_ = initial_state();
          continue;
        case State::kReasoning: {
          const auto [end, skip] = reasoning_end(held_);
          if (end != std::string::npos) {
            out.reasoning.append(held_, 0, end);
            held_.erase(0, end + skip);
            state_ = State::kContent;
            continue;
          }
          size_t keep = partial_marker_suffix(held_, kEnd);
          if (!mode_.content_marker.empty())
            keep = std::max(keep, partial_marker_suffix(held_, mode_.content_marker));
          out.reasoning.append(held_, 0, held_.size() - keep);
          held_.erase(0, held_.size() - keep);
          return out;
        }
        case State::kContent:
          out.content.append(held_);
          held_.clear();
          return out;
      }
    }
  }

  ReasoningSplit finish() override {
    ReasoningSplit out;
    // Held text was only ever a marker's prefix; at the end it is plain text of the mode the
    // output would have continued in.
    const bool reasoning =
        state_ == State::kReasoning || (state_ == State::kLeading && mode_.starts_in_reasoning);
    (reasoning ? out.reasoning : out.content) = std::move(held_);
    held_.clear();
    return out;
  }

 private:
  enum class State { kLeading, kReasoning, kContent };

  // Where reasoning in `text` ends (npos: not yet) and how many bytes of markup to drop there.
  std::pair<size_t, size_t> reasoning_end(std::string_view text) const {
    const size_t end = text.find(kEnd);
    if (!mode_.content_marker.empty()) {
      const size_t marker = text.find(mode_.content_marker);
      if (marker < end) return {marker, 0};
    }
    return {end, end == std::string_view::npos ? 0 : kEnd.size()};
  }

  State initial_state() const {
    return mode_.starts_in_reasoning ? State::kReasoning : State::kContent;
  }

  Mode mode_;
  State state_;
  std::string held_;
};

Mode mode_for(std::string_view name, PromptThinking prompt) {
  const std::string_view marker = name == "deepseek_v4" ? kDsmlToolCalls : std::string_view();
  if (prompt == PromptThinking::kOpen)
    return {.starts_in_reasoning = true, .leading_start_marker = true, .content_marker = marker};
  if (prompt == PromptThinking::kClosed) return {};
  if (name == "qwen3")
    return {.starts_in_reasoning = false, .leading_start_marker = true, .content_marker = {}};
  if (name == "deepseek_r1" || name == "deepseek_v4")
    return {.starts_in_reasoning = true, .leading_start_marker = true, .content_marker = marker};
  return {};  // deepseek_v3, deepseek_v31, deepseek_v32: the template did not enable thinking
}

}  // namespace

const std::vector<std::string>& reasoning_parser_names() {
  static const std::vector<std::string> names = {"deepseek_r1",  "deepseek_v3", "deepseek_v31",
                                                 "deepseek_v32", "deepseek_v4", "qwen3"};
  return names;
}

ReasoningSplit feed_reasoning(ReasoningParser& parser, std::string_view delta, bool last) {
  ReasoningSplit split = parser.feed(delta);
  if (last) {
    ReasoningSplit rest = parser.finish();
    split.reasoning += rest.reasoning;
    split.content += rest.content;
  }
  return split;
}

std::unique_ptr<ReasoningParser> make_reasoning_parser(std::string_view name,
                                                       std::string_view prompt) {
  const auto& names = reasoning_parser_names();
  if (std::find(names.begin(), names.end(), name) == names.end()) return nullptr;
  return std::make_unique<ThinkTagParser>(mode_for(name, prompt_thinking(prompt)));
}

}  // namespace kestrel::chat
