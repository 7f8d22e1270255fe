#include "structured/byte_matcher.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "structured/frames.h"

namespace kestrel::structured {

using frames::begin;
using frames::child_done;
using frames::make_frame;

namespace {

enum RootStage : uint8_t { kRootBefore, kRootValue, kRootDone };
enum ObjectStage : uint8_t {
  kObjOpen,
  kObjKey,  // the key is the child frame
  kObjColon,
  kObjValueStart,
  kObjValue,  // the value is the child frame
  kObjAfterValue,
  kObjNeedKey,
};
enum ArrayStage : uint8_t { kArrOpen, kArrItem, kArrAfterItem, kArrNeedItem };
enum StringStage : uint8_t { kStrChars, kStrEscape, kStrHex, kStrUtf8 };
enum NumberStage : uint8_t {
  kNumStart,
  kNumMinus,
  kNumZero,
  kNumInt,
  kNumFrac0,
  kNumFrac,
  kNumExp0,
  kNumExpSign,
  kNumExp,
};

// Frame fields: object a = first property still allowed, b = property being written;
// array a = items started; string a = code points, b = hex digits seen or UTF-8 bytes still
// due, c = allowed range of the next UTF-8 byte (lo | hi << 8) or "\u began with D";
// number a = digits in the current part; literal [a, b) = candidate strings, c = bytes matched;
// generic frames: see FrameKind.

// Consumes c when it is whitespace the current gap still allows.
bool gap(Frame& f, uint8_t c) {
  if (f.ws == 0) {
    if (c == ' ') f.ws = 1;
    if (c == '\n') f.ws = 2;
    return f.ws != 0;
  }
  if (f.ws >= 2 && f.ws < 2 + kMaxIndent && (c == ' ' || c == '\t')) {
    ++f.ws;
    return true;
  }
  return false;
}

// The top frame ended on the byte just consumed.
void finish(const Grammar& g, Stack& s, int32_t payload, std::vector<Stack>& out) {
  s.pop();
  child_done(g, s, payload);
  out.push_back(s);
}

bool utf8_lead(uint8_t c, int32_t& need, int32_t& lo, int32_t& hi) {
  lo = 0x80;
  hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    need = 1;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 2;
    if (c == 0xE0) lo = 0xA0;  // no overlong forms
    if (c == 0xED) hi = 0x9F;  // no surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 3;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return false;
  }
  return true;
}

bool is_hex(uint8_t c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

enum class StringStep { kReject, kContinue, kClose };

StringStep string_step(Frame& f, int32_t min_length, int32_t max_length, uint8_t c) {
  switch (f.stage) {
    case kStrChars: {
      if (c == '"') return f.a >= min_length ? StringStep::kClose : StringStep::kReject;
      if (c < 0x20 || f.a >= max_length) return StringStep::kReject;
      if (c == '\\') {
        f.stage = kStrEscape;
      } else if (c >= 0x80) {
        int32_t need = 0, lo = 0, hi = 0;
        if (!utf8_lead(c, need, lo, hi)) return StringStep::kReject;
        f.stage = kStrUtf8;
        f.b = need;
        f.c = lo | hi << 8;
      }
      ++f.a;
      return StringStep::kContinue;
    }
    case kStrEscape:
      switch (c) {
        case 'u':
          f.stage = kStrHex;
          f.b = 0;
          f.c = 0;
          return StringStep::kContinue;
        case '"':
        case '\\':
        case '/':
        case 'b':
        case 'f':
        case 'n':
        case 'r':
        case 't':
          f.stage = kStrChars;
          return StringStep::kContinue;
        default:
          return StringStep::kReject;
      }
    case kStrHex:
      // \uD800-\uDFFF are refused: a lone surrogate is not valid text.
      if (!is_hex(c)) return StringStep::kReject;
      if (f.b == 0) f.c = c == 'd' || c == 'D';
      if (f.b == 1 && f.c != 0 && c > '7') return StringStep::kReject;
      if (++f.b == 4) f.stage = kStrChars;
      return StringStep::kContinue;
    case kStrUtf8:
      if (c < (f.c & 0xFF) || c > (f.c >> 8)) return StringStep::kReject;
      f.c = 0x80 | 0xBF << 8;
      if (--f.b == 0) f.stage = kStrChars;
      return StringStep::kContinue;
    default:
      return StringStep::kReject;
  }
}

bool number_step(Frame& f, bool integer, uint8_t c) {
  const bool digit = c >= '0' && c <= '9';
  switch (f.stage) {
    case kNumStart:
      if (c == '-') {
        f.stage = kNumMinus;
        return true;
      }
      [[fallthrough]];
    case kNumMinus:
      if (c == '0') {
        f.stage = kNumZero;
        return true;
      }
      if (!digit) return false;
      f.stage = kNumInt;
      f.a = 1;
      return true;
    case kNumZero:
    case kNumInt:
      if (digit && f.stage == kNumInt && f.a < kMaxIntDigits) {
        ++f.a;
        return true;
      }
      if (integer) return false;
      if (c == '.' || c == 'e' || c == 'E') {
        f.stage = c == '.' ? kNumFrac0 : kNumExp0;
        f.a = 0;
        return true;
      }
      return false;
    case kNumFrac0:
    case kNumFrac:
      if (digit && f.a < kMaxFracDigits) {
        f.stage = kNumFrac;
        ++f.a;
        return true;
      }
      if (f.stage == kNumFrac && (c == 'e' || c == 'E')) {
        f.stage = kNumExp0;
        f.a = 0;
        return true;
      }
      return false;
    case kNumExp0:
      if (c == '+' || c == '-') {
        f.stage = kNumExpSign;
        return true;
      }
      [[fallthrough]];
    case kNumExpSign:
    case kNumExp:
      if (!digit || f.a >= kMaxExpDigits) return false;
      f.stage = kNumExp;
      ++f.a;
      return true;
    default:
      return false;
  }
}

bool number_can_end(const Frame& f) {
  return f.stage == kNumZero || f.stage == kNumInt || f.stage == kNumFrac || f.stage == kNumExp;
}

bool literal_can_end(const Grammar& g, const Frame& f) {
  return g.tables[f.id].strings[f.a].size() == static_cast<size_t>(f.c);
}

// Room for a container and one child frame.
bool room_for_container(const Stack& s) {
  return s.depth() + 2 <= kMaxDepth;
}

void advance_root(const Grammar& g, const Stack& s, uint8_t c, std::vector<Stack>& out) {
  Stack t = s;
  Frame& f = t.top();
  if (f.stage != kRootBefore) return;
  if (g.json_whitespace && gap(f, c)) {
    out.push_back(t);
    return;
  }
  f.stage = kRootValue;
  f.ws = 0;
  begin(g, t, g.root, c, out);
}

void begin_key(const Grammar& g, Stack& t, uint8_t c, std::vector<Stack>& out) {
  Frame& f = t.top();
  const Node& n = g.nodes[f.id];
  f.stage = kObjKey;
  f.ws = 0;
  if (n.free_value >= 0) {
    begin(g, t, g.key_string, c, out);
    return;
  }
  const int32_t table = n.key_tables[f.a];
  Frame key = make_frame(FrameKind::kLiteral, 0, table);
  key.b = static_cast<int32_t>(g.tables[table].strings.size());
  if (key.b == 0 || !t.push(key)) return;
  advance(g, t, c, out);
}

void advance_object(const Grammar& g, const Stack& s, uint8_t c, std::vector<Stack>& out) {
  Stack t = s;
  Frame& f = t.top();
  const Node& n = g.nodes[f.id];
  const bool free = n.free_value >= 0;
  const bool gap_allowed = f.stage != kObjKey && f.stage != kObjValue;
  if (gap_allowed && g.json_whitespace && gap(f, c)) {
    out.push_back(t);
    return;
  }
  switch (f.stage) {
    case kObjOpen:
      if (c == '}') {
        if (free || n.closable[0]) finish(g, t, -1, out);
        return;
      }
      begin_key(g, t, c, out);
      return;
    case kObjNeedKey:
      begin_key(g, t, c, out);
      return;
    case kObjColon:
      if (c != ':') return;
      f.stage = kObjValueStart;
      f.ws = 0;
      out.push_back(t);
      return;
    case kObjValueStart:
      f.stage = kObjValue;
      f.ws = 0;
      begin(g, t, free ? n.free_value : n.props[f.b].node, c, out);
      return;
    case kObjAfterValue:
      if (c == ',' && (free || static_cast<size_t>(f.a) < n.props.size())) {
        f.stage = kObjNeedKey;
        f.ws = 0;
        out.push_back(t);
      } else if (c == '}' && (free || n.closable[f.a])) {
        finish(g, t, -1, out);
      }
      return;
    default:
      return;
  }
}

void advance_array(const Grammar& g, const Stack& s, uint8_t c, std::vector<Stack>& out) {
  Stack t = s;
  Frame& f = t.top();
  const Node& n = g.nodes[f.id];
  if (f.stage != kArrItem && g.json_whitespace && gap(f, c)) {
    out.push_back(t);
    return;
  }
  switch (f.stage) {
    case kArrOpen:
      if (c == ']') {
        if (n.min_items == 0) finish(g, t, -1, out);
        return;
      }
      if (n.max_items == 0) return;
      f.stage = kArrItem;
      f.ws = 0;
      f.a = 1;
      begin(g, t, n.item, c, out);
      return;
    case kArrAfterItem:
      if (c == ',' && f.a < n.max_items) {
        f.stage = kArrNeedItem;
        f.ws = 0;
        out.push_back(t);
      } else if (c == ']' && f.a >= n.min_items) {
        finish(g, t, -1, out);
      }
      return;
    case kArrNeedItem:
      f.stage = kArrItem;
      f.ws = 0;
      ++f.a;
      begin(g, t, n.item, c, out);
      return;
    default:
      return;
  }
}

// The hot paths below update the copy in place in `out` (s never lives in out).
void advance_string(const Grammar& g, const Stack& s, uint8_t c, std::vector<Stack>& out) {
  const Node& n = g.nodes[s.top().id];
  out.push_back(s);
  Stack& t = out.back();
  switch (string_step(t.top(), n.min_length, n.max_length, c)) {
    case StringStep::kReject:
      out.pop_back();
      return;
    case StringStep::kContinue:
      return;
    case StringStep::kClose:
      t.pop();
      child_done(g, t, -1);
      return;
  }
}

// Numbers and literals may end without a closing byte: c may either extend them or be the
// parent's next byte.
void advance_number(const Grammar& g, const Stack& s, uint8_t c, std::vector<Stack>& out) {
  out.push_back(s);
  if (!number_step(out.back().top(), g.nodes[s.top().id].integer, c)) out.pop_back();
  if (number_can_end(s.top())) {
    Stack p = s;
    p.pop();
    child_done(g, p, -1);
    advance(g, p, c, out);
  }
}

void advance_literal(const Grammar& g, const Stack& s, uint8_t c, std::vector<Stack>& out) {
  const Frame& f = s.top();
  const std::vector<std::string>& strings = g.tables[f.id].strings;
  const auto pos = static_cast<size_t>(f.c);
  // [f.a, f.b) share their first pos bytes and are sorted, so those continuing with c are
  // contiguous (a string ending here sorts first).
  int32_t lo = f.a;
  while (lo < f.b && (strings[lo].size() <= pos || static_cast<uint8_t>(strings[lo][pos]) < c)) {
    ++lo;
  }
  int32_t hi = lo;
  while (hi < f.b && strings[hi].size() > pos && static_cast<uint8_t>(strings[hi][pos]) == c) {
    ++hi;
  }
  if (lo < hi) {
    out.push_back(s);
    Stack& t = out.back();
    t.top().a = lo;
    t.top().b = hi;
    t.top().c = f.c + 1;
  }
  if (literal_can_end(g, f)) {
    Stack p = s;
    p.pop();
    child_done(g, p, g.tables[f.id].payloads[f.a]);
    advance(g, p, c, out);
  }
}

}  // namespace

Frame frames::make_frame(FrameKind kind, uint8_t stage, int32_t id) {
  Frame f;
  f.kind = kind;
  f.stage = stage;
  f.ws = 0;
  f.unused = 0;
  f.id = id;
  f.a = 0;
  f.b = 0;
  f.c = 0;
  return f;
}

void frames::child_done(const Grammar& g, Stack& s, int32_t payload) {
  Frame& f = s.top();
  f.ws = 0;
  switch (f.kind) {
    case FrameKind::kRoot:
      f.stage = kRootDone;
      break;
    case FrameKind::kObject:
      if (f.stage == kObjKey) {
        if (g.nodes[f.id].free_value < 0) {
          f.b = payload;
          f.a = payload + 1;
        }
        f.stage = kObjColon;
      } else {
        f.stage = kObjAfterValue;
      }
      break;
    case FrameKind::kArray:
      f.stage = kArrAfterItem;
      break;
    default:
      generic_child_done(g, f);
      break;
  }
}

void frames::begin(const Grammar& g, const Stack& s, int32_t id, uint8_t c,
                   std::vector<Stack>& out) {
  const Node& n = g.nodes[id];
  switch (n.kind) {
    case NodeKind::kUnion:
      for (const int32_t alt : n.alts) begin(g, s, alt, c, out);
      return;
    case NodeKind::kSequence:
    case NodeKind::kRepeat:
    case NodeKind::kCharClass:
      begin_generic(g, s, id, c, out);
      return;
    default:
      break;
  }
  Stack t = s;
  switch (n.kind) {
    case NodeKind::kObject:
      if (c != '{' || !room_for_container(s)) return;
      t.push(make_frame(FrameKind::kObject, kObjOpen, id));
      out.push_back(t);
      return;
    case NodeKind::kArray:
      if (c != '[' || !room_for_container(s)) return;
      t.push(make_frame(FrameKind::kArray, kArrOpen, id));
      out.push_back(t);
      return;
    case NodeKind::kString:
      if (c != '"' || !t.push(make_frame(FrameKind::kString, kStrChars, id))) return;
      out.push_back(t);
      return;
    case NodeKind::kNumber:
      if (!t.push(make_frame(FrameKind::kNumber, kNumStart, id))) return;
      advance(g, t, c, out);
      return;
    case NodeKind::kLiteral: {
      Frame f = make_frame(FrameKind::kLiteral, 0, n.table);
      f.b = static_cast<int32_t>(g.tables[n.table].strings.size());
      if (!t.push(f)) return;
      advance(g, t, c, out);
      return;
    }
    default:
      return;
  }
}

void Stack::copy_frames(const Stack& o) {
  std::memcpy(frames_.data(), o.frames_.data(), sizeof(Frame) * depth_);
}

bool Stack::operator==(const Stack& o) const {
  return depth_ == o.depth_ &&
         std::equal(frames_.begin(), frames_.begin() + depth_, o.frames_.begin());
}

Stack initial_stack(const Grammar&) {
  Stack s;
  s.push(make_frame(FrameKind::kRoot, kRootBefore, -1));
  return s;
}

void advance(const Grammar& g, const Stack& s, uint8_t c, std::vector<Stack>& out) {
  switch (s.top().kind) {
    case FrameKind::kRoot:
      return advance_root(g, s, c, out);
    case FrameKind::kObject:
      return advance_object(g, s, c, out);
    case FrameKind::kArray:
      return advance_array(g, s, c, out);
    case FrameKind::kString:
      return advance_string(g, s, c, out);
    case FrameKind::kNumber:
      return advance_number(g, s, c, out);
    case FrameKind::kLiteral:
      return advance_literal(g, s, c, out);
    case FrameKind::kSequence:
    case FrameKind::kRepeat:
    case FrameKind::kClass:
      return frames::advance_generic(g, s, c, out);
  }
}

void dedupe(std::vector<Stack>& stacks) {
  if (stacks.size() < 2) return;
  size_t kept = 0;
  for (size_t i = 0; i < stacks.size(); ++i) {
    if (std::find(stacks.begin(), stacks.begin() + kept, stacks[i]) != stacks.begin() + kept) {
      continue;
    }
    if (kept != i) stacks[kept] = stacks[i];
    ++kept;
  }
  stacks.erase(stacks.begin() + std::min(kept, kMaxStacks), stacks.end());
}

bool can_finish(const Grammar& g, const Stack& s) {
  Stack t = s;
  while (true) {
    const Frame& f = t.top();
    if (f.kind == FrameKind::kRoot) {
      // A generic root may match the empty string.
      return f.stage == kRootDone || (f.stage == kRootBefore && g.nodes[g.root].nullable);
    }
    int32_t payload = -1;
    if (f.kind == FrameKind::kLiteral && literal_can_end(g, f)) {
      payload = g.tables[f.id].payloads[f.a];
    } else if (!(f.kind == FrameKind::kNumber && number_can_end(f)) &&
               !frames::generic_can_end(g, f)) {
      return false;
    }
    t.pop();
    child_done(g, t, payload);
  }
}

bool in_string_text(const Stack& s) {
  return s.top().kind == FrameKind::kString && s.top().stage == kStrChars;
}

std::optional<int32_t> plain_string_chars(std::string_view bytes) {
  Frame f = make_frame(FrameKind::kString, kStrChars, -1);
  for (const char ch : bytes) {
    if (string_step(f, 0, kUnbounded, static_cast<uint8_t>(ch)) != StringStep::kContinue) {
      return std::nullopt;
    }
  }
  if (f.stage != kStrChars) return std::nullopt;
  return f.a;
}

ByteMatcher::ByteMatcher(std::shared_ptr<const Grammar> grammar) : grammar_(std::move(grammar)) {
  stacks_.push_back(initial_stack(*grammar_));
}

bool ByteMatcher::feed(uint8_t c) {
  scratch_.clear();
  for (const Stack& s : stacks_) advance(*grammar_, s, c, scratch_);
  dedupe(scratch_);
  if (scratch_.empty()) return false;
  stacks_.swap(scratch_);
  return true;
}

bool ByteMatcher::feed(std::string_view bytes) {
  std::vector<Stack> saved = stacks_;
  for (const char ch : bytes) {
    if (!feed(static_cast<uint8_t>(ch))) {
      stacks_ = std::move(saved);
      return false;
    }
  }
  return true;
}

bool ByteMatcher::accepting() const {
  return std::any_of(stacks_.begin(), stacks_.end(),
                     [&](const Stack& s) { return can_finish(*grammar_, s); });
}

bool ByteMatcher::done() const {
  if (!accepting()) return false;
  // A number, or a literal that is a prefix of another, could still grow.
  std::vector<Stack> next;
  for (int c = 0; c < 256; ++c) {
    for (const Stack& s : stacks_) {
      advance(*grammar_, s, static_cast<uint8_t>(c), next);
      if (!next.empty()) return false;
    }
  }
  return true;
}

}  // namespace kestrel::structured
