// structured/grammar_builder.h — builds the generic nodes of a Grammar (sequences, repetitions,
// character classes, literals, alternatives, named rules) for the regex, EBNF and choice front
// ends, and checks the result so that the matcher can never reach a dead end:
//   * a rule that reaches itself without consuming a byte (left recursion) is refused, since
//     the matcher expands alternatives eagerly and would never stop;
//   * a rule that can never finish is refused;
//   * a repetition of something that may be empty repeats only its non-empty matches, so a
//     repetition always consumes a byte per round;
//   * every node records the fewest stack frames finishing it needs (Node::height), which the
//     matcher checks before entering it; a grammar whose shortest text needs more than the
//     matcher's depth is refused;
//   * more than 1000 rules or groups opened before the first byte are refused, since the
//     matcher opens them recursively.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "structured/char_class.h"
#include "structured/grammar.h"

namespace kestrel::structured {

// The front ends refuse groups nested deeper than this: their parsers recurse once per group.
inline constexpr int kMaxGroupNesting = 200;

class GrammarBuilder {
 public:
  // The empty string.
  int32_t empty();
  // Exactly these bytes (empty: the empty string).
  int32_t literal(std::string bytes);
  // Any one of these strings, none of them empty.
  int32_t literals(const std::vector<std::string>& strings);
  // One character of a set that holds at least one (see normalize_ranges).
  int32_t char_class(CodeRanges ranges);
  int32_t sequence(std::vector<int32_t> items);
  // item repeated min to max times (max may be kUnbounded).
  int32_t repeat(int32_t item, int32_t min, int32_t max);
  int32_t alternatives(std::vector<int32_t> alts);
  // A named rule that may be referenced before define() gives it its body (recursion).
  int32_t rule(std::string name);
  void define(int32_t rule, int32_t body);

  // Checks the grammar rooted at `root` and hands it over; the builder is spent.
  Expected<std::shared_ptr<const Grammar>> finish(int32_t root);

 private:
  int32_t add(Node node);
  bool is_rule(int32_t id) const { return names_.count(id) != 0; }
  // The single string of a literal node with one string, or nullptr.
  const std::string* single_string(int32_t id) const;

  Grammar grammar_;
  std::map<int32_t, std::string> names_;  // rule slots and their names
  std::map<CodeRanges, int32_t> class_nodes_;
};

}  // namespace kestrel::structured
