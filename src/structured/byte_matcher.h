// structured/byte_matcher.h — a pushdown automaton over bytes that accepts exactly the texts a
// Grammar allows: JSON (compact or lightly indented) or, for the generic nodes, exactly the
// strings of the regex / EBNF / choices. Nondeterminism (alternatives, keys sharing a prefix, a
// number, literal or repetition that may end here) is kept as a small set of stacks, each a
// fixed-size array of frames so that a copy is a short memcpy: the token mask explores tokens
// by copying states byte by byte.
//
// Generic nodes enter a frame only when the stack has room for the node's Node::height, and a
// sequence's last item replaces the sequence frame (a tail call), so every reachable state can
// still be completed and right recursion does not grow the stack.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "structured/grammar.h"

namespace kestrel::structured {

// Frames per stack. Containers need room for one child, so JSON nests at most kMaxDepth - 2
// containers deep (recursive schemas stop opening containers there).
inline constexpr int kMaxDepth = 32;
// Parses kept at once. A very ambiguous client grammar could otherwise multiply them without
// bound on the engine thread; dropping the excess only narrows what may still be written, since
// every kept stack can be completed on its own.
inline constexpr size_t kMaxStacks = 256;
// Between two tokens at most one space, or a newline followed by up to kMaxIndent spaces or
// tabs, so a model cannot stall on whitespace. Nothing may follow the top-level value.
inline constexpr int kMaxIndent = 32;
// Digits per part of a number (integer, fraction, exponent) for the same reason.
inline constexpr int kMaxIntDigits = 20;
inline constexpr int kMaxFracDigits = 20;
inline constexpr int kMaxExpDigits = 2;  // 1e99: far from overflowing a double

enum class FrameKind : uint8_t {
  kRoot,
  kObject,
  kArray,
  kString,
  kNumber,
  kLiteral,
  kSequence,  // a = the item in progress, or the next one once it is done
  kRepeat,    // a = rounds done (capped at min_items when unbounded: more make no difference)
  kClass,     // a = state of the class automaton inside a multi-byte character
};

// Trivial on purpose (no initializers): stacks copy only their live frames.
struct Frame {
  FrameKind kind;
  uint8_t stage;
  uint8_t ws;  // whitespace seen in the current gap
  uint8_t unused;
  int32_t id;  // grammar node, or literal table for kLiteral
  int32_t a;
  int32_t b;
  int32_t c;
  bool operator==(const Frame&) const = default;
};

class Stack {
 public:
  Stack() = default;
  Stack(const Stack& o) : depth_(o.depth_) { copy_frames(o); }
  Stack& operator=(const Stack& o) {
    if (this != &o) {
      depth_ = o.depth_;
      copy_frames(o);
    }
    return *this;
  }
  bool operator==(const Stack& o) const;

  int depth() const { return depth_; }
  Frame& top() { return frames_[depth_ - 1]; }
  const Frame& top() const { return frames_[depth_ - 1]; }
  bool push(const Frame& f) {
    if (depth_ == kMaxDepth) return false;
    frames_[depth_++] = f;
    return true;
  }
  void pop() { --depth_; }

 private:
  void copy_frames(const Stack& o);

  int depth_ = 0;
  std::array<Frame, kMaxDepth> frames_;
};

// The stack a matcher starts from.
Stack initial_stack(const Grammar& g);
// Appends to `out` every stack `s` becomes after consuming byte c (none: c is rejected).
void advance(const Grammar& g, const Stack& s, uint8_t c, std::vector<Stack>& out);
// Drops repeated stacks, and any beyond kMaxStacks.
void dedupe(std::vector<Stack>& stacks);
// Whether the text may end here (the top-level value is complete).
bool can_finish(const Grammar& g, const Stack& s);
// Whether `s` is inside a string between characters, where plain text continues it.
bool in_string_text(const Stack& s);
// Code points of `bytes` when they are plain string content: whole UTF-8 characters and whole
// escapes, no closing quote. Such bytes are accepted between the characters of any string with
// room for that many more, and leave it between characters again.
std::optional<int32_t> plain_string_chars(std::string_view bytes);

class ByteMatcher {
 public:
  explicit ByteMatcher(std::shared_ptr<const Grammar> grammar);

  // False, with the state unchanged, when the grammar rejects the byte (or any of the bytes).
  bool feed(uint8_t c);
  bool feed(std::string_view bytes);
  // The text so far is a complete document.
  bool accepting() const;
  // Complete, and the top-level value is closed so that no byte may follow.
  bool done() const;

  const Grammar& grammar() const { return *grammar_; }
  const std::vector<Stack>& stacks() const { return stacks_; }

 private:
  std::shared_ptr<const Grammar> grammar_;
  std::vector<Stack> stacks_;
  std::vector<Stack> scratch_;
};

}  // namespace kestrel::structured
