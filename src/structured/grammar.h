// structured/grammar.h — a graph of nodes that the byte matcher (byte_matcher.h) walks, compiled
// from a JSON Schema (here), a regular expression (regex.h), an EBNF grammar (ebnf.h) or a list
// of choices (choice.h). Immutable once built; one Grammar serves many requests.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace kestrel::structured {

inline constexpr int32_t kUnbounded = std::numeric_limits<int32_t>::max();

// Byte strings matched exactly (enum/const values, object keys), sorted so that the strings
// sharing a prefix form one contiguous range. payloads[i] belongs to strings[i].
struct LiteralTable {
  std::vector<std::string> strings;
  std::vector<int32_t> payloads;
};

// JSON value kinds (kObject .. kNumber) and the generic ones the other front ends build from
// (kSequence, kRepeat, kCharClass, kLiteral, kUnion); the two families never mix in a grammar.
enum class NodeKind : uint8_t {
  kUnion,
  kObject,
  kArray,
  kString,
  kNumber,
  kLiteral,
  kSequence,
  kRepeat,
  kCharClass,
};

// One character of a set of code points (sorted, disjoint ranges; no surrogates), compiled to a
// byte automaton over its well-formed UTF-8 encodings: next[state * 256 + byte] is the next
// state, kClassReject, or kClassDone when the character is complete. State 0 is the start.
inline constexpr int32_t kClassReject = -1;
inline constexpr int32_t kClassDone = -2;
struct CharClass {
  std::vector<std::pair<uint32_t, uint32_t>> ranges;
  std::vector<int32_t> next;
};

struct Property {
  std::string name;
  int32_t node = -1;
  bool required = false;
};

struct Node {
  NodeKind kind = NodeKind::kUnion;
  std::vector<int32_t> alts;  // kUnion: any one of these
  // kObject. With free_value >= 0 keys are arbitrary strings and every value is free_value;
  // otherwise only props are written, in their order, required ones always.
  std::vector<Property> props;
  std::vector<int32_t> key_tables;  // [i]: keys that may follow when props[i..] remain
  std::vector<bool> closable;       // [i]: no required property among props[i..]
  int32_t free_value = -1;
  // kArray.
  int32_t item = -1;
  int32_t min_items = 0;
  int32_t max_items = kUnbounded;
  // kString, lengths in code points.
  int32_t min_length = 0;
  int32_t max_length = kUnbounded;
  bool integer = false;  // kNumber
  int32_t table = -1;    // kLiteral
  // Generic nodes. kSequence: items in order (none: the empty string). kRepeat: item, between
  // min_items and max_items times. kCharClass: char_class indexes Grammar::classes.
  std::vector<int32_t> items;
  int32_t char_class = -1;
  // Filled by the generic grammar builder (grammar_builder.h); JSON nodes keep the defaults.
  bool nullable = false;  // matches the empty string
  // Fewest stack frames (above its parent's) that finishing this node needs; 0 when nullable.
  int32_t height = 0;
  // kSequence: frames a sequence frame needs once items[0, i) are done (tail[i], i <= size).
  std::vector<int32_t> tail;
};

struct Grammar {
  std::vector<Node> nodes;
  std::vector<LiteralTable> tables;
  std::vector<CharClass> classes;
  int32_t root = -1;
  int32_t key_string = -1;  // unconstrained string node for the keys of free objects
  // JSON texts may have whitespace before the value and between tokens; false: compact JSON
  // (vLLM's disable_any_whitespace), and the generic front ends, which match exactly.
  bool json_whitespace = true;
  // Built from generic nodes (grammar_builder.h) rather than JSON ones.
  bool generic = false;
};

// Compiles a JSON Schema (the subset listed at the top of grammar.cc); anything else is an error.
// Object properties are generated in the order the schema lists them: pass an ordered_json to
// keep the document's order (nlohmann::json sorts keys).
Expected<std::shared_ptr<const Grammar>> compile_json_schema(const nlohmann::ordered_json& schema);
Expected<std::shared_ptr<const Grammar>> compile_json_schema(const nlohmann::json& schema);

// response_format {"type": "json_object"}: any JSON object.
std::shared_ptr<const Grammar> json_object_grammar();

}  // namespace kestrel::structured
