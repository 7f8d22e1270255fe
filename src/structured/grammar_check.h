// structured/grammar_check.h — what GrammarBuilder::finish runs on a generic grammar (see
// grammar_builder.h for what it guarantees): nullability, left recursion, repetitions of
// nullable items, productivity and the stack height of every node.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "base/status.h"
#include "structured/grammar.h"

namespace kestrel::structured {

// Fills Node::nullable, height and tail, rewriting repetitions in place; rule_names names the
// rule slots for error messages.
Status check_generic_grammar(Grammar& g, const std::map<int32_t, std::string>& rule_names);

}  // namespace kestrel::structured
