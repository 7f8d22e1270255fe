#include "structured/grammar_builder.h"

#include <algorithm>
#include <utility>

#include "structured/grammar_check.h"

namespace kestrel::structured {

int32_t GrammarBuilder::add(Node node) {
  grammar_.nodes.push_back(std::move(node));
  return static_cast<int32_t>(grammar_.nodes.size() - 1);
}

const std::string* GrammarBuilder::single_string(int32_t id) const {
  const Node& n = grammar_.nodes[id];
  if (n.kind != NodeKind::kLiteral || is_rule(id)) return nullptr;
  const LiteralTable& t = grammar_.tables[n.table];
  return t.strings.size() == 1 ? &t.strings[0] : nullptr;
}

int32_t GrammarBuilder::empty() {
  Node node;
  node.kind = NodeKind::kSequence;
  return add(std::move(node));
}

int32_t GrammarBuilder::literal(std::string bytes) {
  if (bytes.empty()) return empty();
  return literals({std::move(bytes)});
}

int32_t GrammarBuilder::literals(const std::vector<std::string>& strings) {
  LiteralTable table;
  table.strings = strings;
  std::sort(table.strings.begin(), table.strings.end());
  table.strings.erase(std::unique(table.strings.begin(), table.strings.end()), table.strings.end());
  KCHECK(!table.strings.empty() && !table.strings[0].empty(), "literal strings must not be empty");
  table.payloads.assign(table.strings.size(), -1);
  grammar_.tables.push_back(std::move(table));
  Node node;
  node.kind = NodeKind::kLiteral;
  node.table = static_cast<int32_t>(grammar_.tables.size() - 1);
  return add(std::move(node));
}

int32_t GrammarBuilder::char_class(CodeRanges ranges) {
  ranges = normalize_ranges(std::move(ranges));
  KCHECK(!ranges.empty(), "a character class needs at least one character");
  if (auto it = class_nodes_.find(ranges); it != class_nodes_.end()) return it->second;
  grammar_.classes.push_back(compile_char_class(ranges));
  Node node;
  node.kind = NodeKind::kCharClass;
  node.char_class = static_cast<int32_t>(grammar_.classes.size() - 1);
  const int32_t id = add(std::move(node));
  class_nodes_.emplace(std::move(ranges), id);
  return id;
}

int32_t GrammarBuilder::sequence(std::vector<int32_t> items) {
  // Nested sequences are spliced and adjacent strings joined: fewer frames, fewer stacks.
  std::vector<int32_t> flat;
  for (const int32_t item : items) {
    const Node& n = grammar_.nodes[item];
    if (n.kind == NodeKind::kSequence && !is_rule(item)) {
      flat.insert(flat.end(), n.items.begin(), n.items.end());
    } else {
      flat.push_back(item);
    }
  }
  std::vector<int32_t> joined;
  for (size_t i = 0; i < flat.size();) {
    size_t end = i;
    std::string run;
    for (; end < flat.size(); ++end) {
      const std::string* s = single_string(flat[end]);
      if (s == nullptr) break;
      run += *s;
    }
    if (end > i + 1) {
      joined.push_back(literal(std::move(run)));
      i = end;
    } else {
      joined.push_back(flat[i++]);
    }
  }
  if (joined.empty()) return empty();
  if (joined.size() == 1) return joined[0];
  Node node;
  node.kind = NodeKind::kSequence;
  node.items = std::move(joined);
  return add(std::move(node));
}

int32_t GrammarBuilder::repeat(int32_t item, int32_t min, int32_t max) {
  KCHECK(min >= 0 && min <= max);
  const Node& n = grammar_.nodes[item];
  if (max == 0 || (n.kind == NodeKind::kSequence && n.items.empty() && !is_rule(item))) {
    return empty();
  }
  if (min == 1 && max == 1) return item;
  Node node;
  node.kind = NodeKind::kRepeat;
  node.item = item;
  node.min_items = min;
  node.max_items = max;
  return add(std::move(node));
}

int32_t GrammarBuilder::alternatives(std::vector<int32_t> alts) {
  // Nested unions are spliced and plain strings gathered into one table, which the matcher
  // follows as one frame however many strings share a prefix.
  std::vector<int32_t> flat;
  std::vector<std::string> strings;
  for (const int32_t alt : alts) {
    const Node& n = grammar_.nodes[alt];
    if (n.kind == NodeKind::kUnion && !is_rule(alt)) {
      flat.insert(flat.end(), n.alts.begin(), n.alts.end());
    } else if (n.kind == NodeKind::kLiteral && !is_rule(alt)) {
      const LiteralTable& t = grammar_.tables[n.table];
      strings.insert(strings.end(), t.strings.begin(), t.strings.end());
    } else {
      flat.push_back(alt);
    }
  }
  if (!strings.empty()) flat.push_back(literals(strings));
  if (flat.size() == 1) return flat[0];
  Node node;
  node.alts = std::move(flat);
  return add(std::move(node));
}

int32_t GrammarBuilder::rule(std::string name) {
  const int32_t id = add(Node{});
  names_.emplace(id, std::move(name));
  return id;
}

void GrammarBuilder::define(int32_t rule, int32_t body) {
  grammar_.nodes[rule].alts = {body};
}

Expected<std::shared_ptr<const Grammar>> GrammarBuilder::finish(int32_t root) {
  grammar_.root = root;
  grammar_.json_whitespace = false;
  grammar_.generic = true;
  KTRY(check_generic_grammar(grammar_, names_));
  return std::make_shared<const Grammar>(std::move(grammar_));
}

}  // namespace kestrel::structured
