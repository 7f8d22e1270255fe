// JSON Schema → Grammar. Supported: type (one or a list), properties / required /
// additionalProperties, items / minItems / maxItems, minLength / maxLength, enum, const, anyOf,
// oneOf (treated as anyOf), allOf with one member, $ref to a JSON pointer inside the document
// (recursion allowed; the matcher bounds its depth), true / {} for any value. Annotations are
// ignored; any other keyword is an error, so a request never silently loses a constraint.
#include "structured/grammar.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

namespace kestrel::structured {
namespace {

using ojson = nlohmann::ordered_json;

const std::set<std::string>& annotation_keywords() {
  static const std::set<std::string> k = {
      "title",     "description", "default",     "examples",         "$schema",
      "$id",       "$comment",    "format",      "deprecated",       "readOnly",
      "writeOnly", "$defs",       "definitions", "contentMediaType", "contentEncoding"};
  return k;
}

const std::set<std::string>& supported_keywords() {
  static const std::set<std::string> k = {
      "type",      "properties", "required", "additionalProperties",
      "items",     "minItems",   "maxItems", "minLength",
      "maxLength", "enum",       "const",    "anyOf",
      "oneOf",     "allOf",      "$ref"};
  return k;
}

class Compiler {
 public:
  explicit Compiler(const ojson& document) : document_(document) {
    Node key;
    key.kind = NodeKind::kString;
    grammar_.key_string = add(std::move(key));
  }

  Expected<std::shared_ptr<const Grammar>> run() {
    KASSIGN(grammar_.root, compile_ref("#"));
    KTRY(check_union_cycles());
    return std::make_shared<const Grammar>(std::move(grammar_));
  }

 private:
  int32_t add(Node node) {
    grammar_.nodes.push_back(std::move(node));
    return static_cast<int32_t>(grammar_.nodes.size() - 1);
  }

  int32_t add_table(std::vector<std::pair<std::string, int32_t>> entries) {
    std::sort(entries.begin(), entries.end());
    LiteralTable table;
    for (auto& [s, payload] : entries) {
      if (!table.strings.empty() && table.strings.back() == s) continue;
      table.strings.push_back(std::move(s));
      table.payloads.push_back(payload);
    }
    grammar_.tables.push_back(std::move(table));
    return static_cast<int32_t>(grammar_.tables.size() - 1);
  }

  int32_t literal_node(const std::vector<std::string>& values) {
    std::vector<std::pair<std::string, int32_t>> entries;
    for (const std::string& v : values) entries.emplace_back(v, -1);
    Node node;
    node.kind = NodeKind::kLiteral;
    node.table = add_table(std::move(entries));
    return add(std::move(node));
  }

  // Any JSON value: one shared union whose containers nest it again.
  int32_t any() {
    if (any_ >= 0) return any_;
    any_ = add(Node{});
    Node object;
    object.kind = NodeKind::kObject;
    object.free_value = any_;
    Node array;
    array.kind = NodeKind::kArray;
    array.item = any_;
    Node string;
    string.kind = NodeKind::kString;
    Node number;
    number.kind = NodeKind::kNumber;
    std::vector<int32_t> alts = {add(std::move(object)), add(std::move(array)),
                                 add(std::move(string)), add(std::move(number)),
                                 literal_node({"false", "null", "true"})};
    grammar_.nodes[any_].alts = std::move(alts);
    return any_;
  }

  Expected<int32_t> compile_ref(const std::string& ref) {
    if (auto it = refs_.find(ref); it != refs_.end()) return it->second;
    if (ref.empty() || ref[0] != '#') {
      return make_error("$ref '{}': only references inside the schema ('#...') are supported", ref);
    }
    const ojson* target = nullptr;
    try {
      const ojson::json_pointer pointer(ref.substr(1));
      if (document_.contains(pointer)) target = &document_.at(pointer);
    } catch (const ojson::exception&) {
      target = nullptr;
    }
    if (target == nullptr) return make_error("$ref '{}' does not resolve", ref);
    // Reserve the node first so that recursive references find it.
    const int32_t slot = add(Node{});
    refs_[ref] = slot;
    KASSIGN(const int32_t body, compile(*target, ref));
    grammar_.nodes[slot].alts = {body};
    return slot;
  }

  static Expected<int32_t> count_keyword(const ojson& schema, const char* key,
                                         const std::string& where) {
    const ojson& v = schema.at(key);
    if (!v.is_number_unsigned() || v.get<uint64_t>() > static_cast<uint64_t>(kUnbounded)) {
      return make_error("{}: '{}' must be a non-negative integer", where, key);
    }
    return static_cast<int32_t>(v.get<uint64_t>());
  }

  Expected<std::vector<int32_t>> compile_list(const ojson& list, const char* key,
                                              const std::string& where) {
    if (!list.is_array() || list.empty()) {
      return make_error("{}: '{}' must be a non-empty array of schemas", where, key);
    }
    std::vector<int32_t> out;
    for (size_t i = 0; i < list.size(); ++i) {
      KASSIGN(const int32_t n, compile(list[i], fmt::format("{}/{}/{}", where, key, i)));
      out.push_back(n);
    }
    return out;
  }

  int32_t union_of(std::vector<int32_t> alts) {
    if (alts.size() == 1) return alts[0];
    Node node;
    node.alts = std::move(alts);
    return add(std::move(node));
  }

  Expected<int32_t> compile(const ojson& schema, const std::string& where) {
    if (schema.is_boolean()) {
      if (schema.get<bool>()) return any();
      return make_error("{}: schema 'false' matches nothing", where);
    }
    if (!schema.is_object())
      return make_error("{}: a schema must be an object or a boolean", where);
    int constraints = 0;
    for (const auto& [key, value] : schema.items()) {
      if (annotation_keywords().count(key)) continue;
      if (!supported_keywords().count(key)) {
        return make_error("{}: unsupported JSON Schema keyword '{}'", where, key);
      }
      ++constraints;
    }
    if (schema.contains("$ref")) {
      if (constraints != 1 || !schema["$ref"].is_string()) {
        return make_error("{}: '$ref' must be a string and stand alone", where);
      }
      return compile_ref(schema["$ref"].get<std::string>());
    }
    for (const char* key : {"anyOf", "oneOf", "allOf"}) {
      if (!schema.contains(key)) continue;
      if (constraints != 1) {
        return make_error("{}: '{}' combined with other keywords is not supported", where, key);
      }
      KASSIGN(std::vector<int32_t> alts, compile_list(schema[key], key, where));
      if (std::string(key) == "allOf" && alts.size() != 1) {
        return make_error("{}: 'allOf' with more than one schema is not supported", where);
      }
      return union_of(std::move(alts));
    }
    if (schema.contains("const") || schema.contains("enum")) {
      std::vector<std::string> values;
      if (schema.contains("const")) values.push_back(schema["const"].dump());
      if (schema.contains("enum")) {
        if (schema.contains("const")) return make_error("{}: both 'const' and 'enum'", where);
        const ojson& e = schema["enum"];
        if (!e.is_array() || e.empty())
          return make_error("{}: 'enum' must be a non-empty array", where);
        for (const ojson& v : e) values.push_back(v.dump());
      }
      return literal_node(values);
    }
    std::vector<std::string> types;
    if (schema.contains("type")) {
      const ojson& t = schema["type"];
      if (t.is_string()) {
        types.push_back(t.get<std::string>());
      } else if (t.is_array() && !t.empty()) {
        for (const ojson& x : t) {
          if (!x.is_string()) return make_error("{}: 'type' entries must be strings", where);
          types.push_back(x.get<std::string>());
        }
      } else {
        return make_error("{}: 'type' must be a string or a non-empty array", where);
      }
    } else if (schema.contains("properties") || schema.contains("additionalProperties") ||
               schema.contains("required")) {
      types.push_back("object");
    } else if (schema.contains("items") || schema.contains("minItems") ||
               schema.contains("maxItems")) {
      types.push_back("array");
    } else if (schema.contains("minLength") || schema.contains("maxLength")) {
      types.push_back("string");
    } else {
      return any();
    }
    std::vector<int32_t> alts;
    for (const std::string& type : types) {
      KASSIGN(const int32_t n, compile_type(schema, type, where));
      alts.push_back(n);
    }
    return union_of(std::move(alts));
  }

  Expected<int32_t> compile_type(const ojson& schema, const std::string& type,
                                 const std::string& where) {
    if (type == "object") return compile_object(schema, where);
    if (type == "array") return compile_array(schema, where);
    if (type == "string") return compile_string(schema, where);
    if (type == "number" || type == "integer") {
      Node node;
      node.kind = NodeKind::kNumber;
      node.integer = type == "integer";
      return add(std::move(node));
    }
    if (type == "boolean") return literal_node({"false", "true"});
    if (type == "null") return literal_node({"null"});
    return make_error("{}: unknown type '{}'", where, type);
  }

  Expected<int32_t> compile_object(const ojson& schema, const std::string& where) {
    Node node;
    node.kind = NodeKind::kObject;
    if (schema.contains("properties")) {
      const ojson& props = schema["properties"];
      if (!props.is_object()) return make_error("{}: 'properties' must be an object", where);
      for (const auto& [name, sub] : props.items()) {
        KASSIGN(const int32_t n, compile(sub, fmt::format("{}/properties/{}", where, name)));
        node.props.push_back(Property{name, n, false});
      }
    }
    if (schema.contains("required")) {
      const ojson& req = schema["required"];
      if (!req.is_array()) return make_error("{}: 'required' must be an array", where);
      for (const ojson& r : req) {
        if (!r.is_string()) return make_error("{}: 'required' entries must be strings", where);
        auto it = std::find_if(node.props.begin(), node.props.end(),
                               [&](const Property& p) { return p.name == r.get<std::string>(); });
        if (it == node.props.end()) {
          return make_error("{}: required property '{}' is not in 'properties'", where,
                            r.get<std::string>());
        }
        it->required = true;
      }
    }
    // Only listed properties are generated. Without any, the object is a map whose values
    // follow additionalProperties (any value when it is absent or true).
    const ojson* extra =
        schema.contains("additionalProperties") ? &schema["additionalProperties"] : nullptr;
    if (extra != nullptr && !extra->is_boolean() && !extra->is_object()) {
      return make_error("{}: 'additionalProperties' must be a boolean or a schema", where);
    }
    if (node.props.empty() && !(extra != nullptr && extra->is_boolean() && !extra->get<bool>())) {
      if (extra != nullptr && extra->is_object()) {
        KASSIGN(node.free_value, compile(*extra, where + "/additionalProperties"));
      } else {
        node.free_value = any();
      }
      return add(std::move(node));
    }
    const size_t n = node.props.size();
    for (size_t i = 0; i <= n; ++i) {
      std::vector<std::pair<std::string, int32_t>> keys;
      bool closable = true;
      for (size_t j = i; j < n; ++j) {
        keys.emplace_back(ojson(node.props[j].name).dump(), static_cast<int32_t>(j));
        if (node.props[j].required) {
          closable = false;
          break;
        }
      }
      node.key_tables.push_back(add_table(std::move(keys)));
      node.closable.push_back(closable);
    }
    return add(std::move(node));
  }

  Expected<int32_t> compile_array(const ojson& schema, const std::string& where) {
    Node node;
    node.kind = NodeKind::kArray;
    if (schema.contains("items")) {
      if (schema["items"].is_array()) {
        return make_error("{}: tuple 'items' (an array of schemas) is not supported", where);
      }
      KASSIGN(node.item, compile(schema["items"], where + "/items"));
    } else {
      node.item = any();
    }
    if (schema.contains("minItems")) {
      KASSIGN(node.min_items, count_keyword(schema, "minItems", where));
    }
    if (schema.contains("maxItems")) {
      KASSIGN(node.max_items, count_keyword(schema, "maxItems", where));
    }
    if (node.min_items > node.max_items) return make_error("{}: minItems > maxItems", where);
    return add(std::move(node));
  }

  Expected<int32_t> compile_string(const ojson& schema, const std::string& where) {
    Node node;
    node.kind = NodeKind::kString;
    if (schema.contains("minLength")) {
      KASSIGN(node.min_length, count_keyword(schema, "minLength", where));
    }
    if (schema.contains("maxLength")) {
      KASSIGN(node.max_length, count_keyword(schema, "maxLength", where));
    }
    if (node.min_length > node.max_length) return make_error("{}: minLength > maxLength", where);
    return add(std::move(node));
  }

  // A union reaching itself through unions only would make the matcher loop without consuming
  // a byte (e.g. {"$ref": "#"} at the root).
  Status check_union_cycles() const {
    const auto& nodes = grammar_.nodes;
    std::vector<int8_t> color(nodes.size(), 0);  // 0 new, 1 on the path, 2 done
    std::vector<std::pair<int32_t, size_t>> path;
    for (size_t start = 0; start < nodes.size(); ++start) {
      if (color[start] != 0 || nodes[start].kind != NodeKind::kUnion) continue;
      path.emplace_back(static_cast<int32_t>(start), 0);
      color[start] = 1;
      while (!path.empty()) {
        auto& [u, next] = path.back();
        if (next == nodes[u].alts.size()) {
          color[u] = 2;
          path.pop_back();
          continue;
        }
        const int32_t v = nodes[u].alts[next++];
        if (nodes[v].kind != NodeKind::kUnion || color[v] == 2) continue;
        if (color[v] == 1) {
          return make_error("schema recursion must pass through an object or an array");
        }
        color[v] = 1;
        path.emplace_back(v, 0);
      }
    }
    return Status::Ok();
  }

  const ojson& document_;
  Grammar grammar_;
  std::map<std::string, int32_t> refs_;
  int32_t any_ = -1;
};

}  // namespace

Expected<std::shared_ptr<const Grammar>> compile_json_schema(const nlohmann::ordered_json& schema) {
  return Compiler(schema).run();
}

Expected<std::shared_ptr<const Grammar>> compile_json_schema(const nlohmann::json& schema) {
  return compile_json_schema(nlohmann::ordered_json::parse(schema.dump()));
}

std::shared_ptr<const Grammar> json_object_grammar() {
  static const std::shared_ptr<const Grammar> grammar =
      compile_json_schema(nlohmann::ordered_json{{"type", "object"}}).value();
  return grammar;
}

}  // namespace kestrel::structured
