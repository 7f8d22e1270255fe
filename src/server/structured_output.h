// server/structured_output.h — a request's output constraint (response_format or
// structured_outputs) as a token constraint: the grammar is compiled once per request, each
// choice gets its own matcher over the server's token trie.
#pragma once

#include <memory>

#include "base/status.h"
#include "engine/token_constraint.h"
#include "server/protocol/structured_outputs.h"
#include "structured/grammar.h"
#include "structured/token_trie.h"

namespace kestrel::server {

// The grammar of a JSON Schema, any JSON object, a regular expression, a list of choices or an
// EBNF grammar; the error (something Kestrel cannot enforce) is the message of a 400.
Expected<std::shared_ptr<const structured::Grammar>> output_constraint_grammar(
    const OutputConstraint& constraint);

// A fresh constraint (one per choice) that keeps sampling inside `grammar`.
std::shared_ptr<TokenConstraint> grammar_constraint(
    std::shared_ptr<const structured::Grammar> grammar,
    std::shared_ptr<const structured::TokenTrie> trie);

}  // namespace kestrel::server
