// structured/choice.h — the `choice` kind of structured outputs: the output is exactly one of
// the given strings (raw text, not JSON-quoted).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "structured/grammar.h"

namespace kestrel::structured {

// Refuses an empty list, an empty string among the choices and text that is not UTF-8.
Expected<std::shared_ptr<const Grammar>> choice_grammar(const std::vector<std::string>& choices);

}  // namespace kestrel::structured
