// chat/reasoning_parser.cc — one <think>…</think> state machine, configured per parser name and
// prompt.
#include "chat/reasoning_parser.h"

#include <algorithm>

namespace kestrel::chat {
namespace {

constexpr std::string_view kStart = "<think>";
constexpr std::string_view kEnd = "</think>";

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
    const size_t end = text.find(kEnd);
    if (end == std::string_view::npos) return {std::string(text), ""};
    return {std::string(text.substr(0, end)), std::string(text.substr(end + kEnd.size()))};
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
          const size_t end = held_.find(kEnd);
          if (end != std::string::npos) {
            out.reasoning.append(held_, 0, end);
            held_.erase(0, end + kEnd.size());
            state_ = State::kContent;
            continue;
          }
          const size_t keep = partial_marker_suffix(held_, kEnd);
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

  State initial_state() const {
    return mode_.starts_in_reasoning ? State::kReasoning : State::kContent;
  }

  Mode mode_;
  State state_;
  std::string held_;
};

Mode mode_for(std::string_view name, PromptThinking prompt) {
  if (prompt == PromptThinking::kOpen)
    return {.starts_in_reasoning = true, .leading_start_marker = true};
  if (prompt == PromptThinking::kClosed) return {};
  if (name == "qwen3") return {.starts_in_reasoning = false, .leading_start_marker = true};
  if (name == "deepseek_r1") return {.starts_in_reasoning = true, .leading_start_marker = true};
  return {};  // deepseek_v3, deepseek_v31: the template did not enable thinking
}

}  // namespace

const std::vector<std::string>& reasoning_parser_names() {
  static const std::vector<std::string> names = {"deepseek_r1", "deepseek_v3", "deepseek_v31",
                                                 "qwen3"};
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
