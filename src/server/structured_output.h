// server/structured_output.h — response_format json_object / json_schema as a token constraint:
// the grammar is compiled once per request, each choice gets its own matcher over the server's
// token trie.
#pragma once

#include <memory>

#include "base/status.h"
#include "runner/token_constraint.h"
#include "server/protocol/sampling_fields.h"
#include "structured/grammar.h"
#include "structured/token_trie.h"

namespace kestrel::server {

// The grammar of a json_object or json_schema response_format ({"type": "json_schema",
// "json_schema": {"name": ..., "schema": {...}}}); the error (a schema Kestrel cannot enforce)
// is the message of a 400.
Expected<std::shared_ptr<const structured::Grammar>> response_format_grammar(
    const ResponseFormat& format);

// A fresh constraint (one per choice) that keeps sampling inside `grammar`.
std::shared_ptr<TokenConstraint> grammar_constraint(
    std::shared_ptr<const structured::Grammar> grammar,
    std::shared_ptr<const structured::TokenTrie> trie);

}  // namespace kestrel::server
