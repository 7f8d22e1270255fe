// The byte matcher's frames for generic nodes. Heights (Node::height, Node::tail) come from
// grammar_check.cc; entering a frame only when they fit keeps every state completable.
#include <algorithm>

#include "structured/frames.h"

namespace kestrel::structured::frames {
namespace {

bool fits(const Stack& s, int32_t need) {
  return s.depth() + need <= kMaxDepth;
}

// Starts sequence `id` on s: each item in turn while the ones before it may be empty. The last
// item runs in the sequence's place, so the sequence frame never outlives its last item.
void begin_sequence(const Grammar& g, const Stack& s, int32_t id, uint8_t c,
                    std::vector<Stack>& out) {
  const Node& n = g.nodes[id];
  const size_t size = n.items.size();
  for (size_t j = 0; j < size; ++j) {
    const int32_t item = n.items[j];
    if (j + 1 == size) {
      begin(g, s, item, c, out);
      return;
    }
    if (fits(s, std::max(1, n.tail[j + 1]))) {
      Stack t = s;
      Frame f = make_frame(FrameKind::kSequence, 0, id);
      f.a = static_cast<int32_t>(j);
      t.push(f);
      begin(g, t, item, c, out);
    }
    if (!g.nodes[item].nullable) return;
  }
}

// A sequence frame between items: start the next one (or a later one past empty items), or
// end when the rest may be empty.
void advance_sequence(const Grammar& g, const Stack& s, uint8_t c, std::vector<Stack>& out) {
  const Node& n = g.nodes[s.top().id];
  const size_t size = n.items.size();
  for (auto j = static_cast<size_t>(s.top().a); j < size; ++j) {
    const int32_t item = n.items[j];
    if (j + 1 == size) {
      Stack p = s;
      p.pop();
      begin(g, p, item, c, out);
      if (g.nodes[item].nullable) {
        child_done(g, p, -1);
        advance(g, p, c, out);
      }
      return;
    }
    Stack t = s;
    t.top().a = static_cast<int32_t>(j);
    begin(g, t, item, c, out);
    if (!g.nodes[item].nullable) return;
  }
}

// The item is never nullable (grammar_check rewrites such repetitions), so every round
// consumes a byte. The round that reaches max_items runs in the repetition's place. Only the
// frame itself is checked: every round sits at the same depth as the first, whose frames are
// checked as they are entered, so a round that fits once fits again.
void begin_repeat(const Grammar& g, const Stack& s, int32_t id, uint8_t c,
                  std::vector<Stack>& out) {
  const Node& n = g.nodes[id];
  if (n.max_items == 1) {
    begin(g, s, n.item, c, out);
    return;
  }
  if (!fits(s, 1)) return;
  Stack t = s;
  t.push(make_frame(FrameKind::kRepeat, 0, id));
  begin(g, t, n.item, c, out);
}

void advance_repeat(const Grammar& g, const Stack& s, uint8_t c, std::vector<Stack>& out) {
  const Frame& f = s.top();
  const Node& n = g.nodes[f.id];
  if (f.a < n.max_items) {
    if (f.a + 1 == n.max_items) {
      Stack p = s;
      p.pop();
      begin(g, p, n.item, c, out);
    } else {
      begin(g, s, n.item, c, out);
    }
  }
  if (f.a >= n.min_items) {
    Stack p = s;
    p.pop();
    child_done(g, p, -1);
    advance(g, p, c, out);
  }
}

// An ASCII character completes at once without a frame; a multi-byte one keeps a class frame
// until its last byte.
void begin_class(const Grammar& g, const Stack& s, int32_t id, uint8_t c, std::vector<Stack>& out) {
  const int32_t to = g.classes[g.nodes[id].char_class].next[c];
  if (to == kClassReject) return;
  if (to == kClassDone) {
    out.push_back(s);
    child_done(g, out.back(), -1);
    return;
  }
  if (!fits(s, 1)) return;
  Frame f = make_frame(FrameKind::kClass, 0, id);
  f.a = to;
  out.push_back(s);
  out.back().push(f);
}

void advance_class(const Grammar& g, const Stack& s, uint8_t c, std::vector<Stack>& out) {
  const Frame& f = s.top();
  const CharClass& cc = g.classes[g.nodes[f.id].char_class];
  const int32_t to = cc.next[static_cast<size_t>(f.a) * 256 + c];
  if (to == kClassReject) return;
  out.push_back(s);
  Stack& t = out.back();
  if (to == kClassDone) {
    t.pop();
    child_done(g, t, -1);
  } else {
    t.top().a = to;
  }
}

}  // namespace

void begin_generic(const Grammar& g, const Stack& s, int32_t id, uint8_t c,
                   std::vector<Stack>& out) {
  switch (g.nodes[id].kind) {
    case NodeKind::kSequence:
      return begin_sequence(g, s, id, c, out);
    case NodeKind::kRepeat:
      return begin_repeat(g, s, id, c, out);
    case NodeKind::kCharClass:
      return begin_class(g, s, id, c, out);
    default:
      return;
  }
}

void advance_generic(const Grammar& g, const Stack& s, uint8_t c, std::vector<Stack>& out) {
  switch (s.top().kind) {
    case FrameKind::kSequence:
      return advance_sequence(g, s, c, out);
    case FrameKind::kRepeat:
      return advance_repeat(g, s, c, out);
    case FrameKind::kClass:
      return advance_class(g, s, c, out);
    default:
      return;
  }
}

void generic_child_done(const Grammar& g, Frame& f) {
  if (f.kind == FrameKind::kSequence) {
    ++f.a;
  } else if (f.kind == FrameKind::kRepeat) {
    const Node& n = g.nodes[f.id];
    f.a = n.max_items == kUnbounded ? std::min(f.a + 1, n.min_items) : f.a + 1;
  }
}

bool generic_can_end(const Grammar& g, const Frame& f) {
  switch (f.kind) {
    case FrameKind::kSequence:
      return g.nodes[f.id].tail[f.a] == 0;
    case FrameKind::kRepeat:
      return f.a >= g.nodes[f.id].min_items;
    default:
      return false;
  }
}

}  // namespace kestrel::structured::frames
