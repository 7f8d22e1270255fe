// structured/frames.h — internals of the byte matcher shared by its JSON frames
// (byte_matcher.cc) and its generic frames (generic_frames.cc). Not for other callers.
#pragma once

#include <cstdint>
#include <vector>

#include "structured/byte_matcher.h"
#include "structured/grammar.h"

namespace kestrel::structured::frames {

Frame make_frame(FrameKind kind, uint8_t stage, int32_t id);
// Starts node `id` with its first byte c on top of s (the parent already expects it). Only
// non-empty matches: the caller handles a nullable node's empty match itself.
void begin(const Grammar& g, const Stack& s, int32_t id, uint8_t c, std::vector<Stack>& out);
// The parent's bookkeeping once its child is complete.
void child_done(const Grammar& g, Stack& s, int32_t payload);

// The same for kSequence, kRepeat and kCharClass nodes and their frames.
void begin_generic(const Grammar& g, const Stack& s, int32_t id, uint8_t c,
                   std::vector<Stack>& out);
void advance_generic(const Grammar& g, const Stack& s, uint8_t c, std::vector<Stack>& out);
void generic_child_done(const Grammar& g, Frame& f);
// Whether a generic frame may end here without another byte.
bool generic_can_end(const Grammar& g, const Frame& f);

}  // namespace kestrel::structured::frames
