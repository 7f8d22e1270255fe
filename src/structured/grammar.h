// structured/grammar.h — a JSON Schema compiled into a graph of value nodes that the byte
// matcher (byte_matcher.h) walks. Immutable once built; one Grammar serves many requests.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
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

enum class NodeKind : uint8_t { kUnion, kObject, kArray, kString, kNumber, kLiteral };

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
};

struct Grammar {
  std::vector<Node> nodes;
  std::vector<LiteralTable> tables;
  int32_t root = -1;
  int32_t key_string = -1;  // unconstrained string node for the keys of free objects
};

// Compiles a JSON Schema (the subset listed at the top of grammar.cc); anything else is an error.
// Object properties are generated in the order the schema lists them: pass an ordered_json to
// keep the document's order (nlohmann::json sorts keys).
Expected<std::shared_ptr<const Grammar>> compile_json_schema(const nlohmann::ordered_json& schema);
Expected<std::shared_ptr<const Grammar>> compile_json_schema(const nlohmann::json& schema);

// response_format {"type": "json_object"}: any JSON object.
std::shared_ptr<const Grammar> json_object_grammar();

}  // namespace kestrel::structured
