#include "structured/choice.h"

#include "structured/char_class.h"
#include "structured/grammar_builder.h"

namespace kestrel::structured {

Expected<std::shared_ptr<const Grammar>> choice_grammar(const std::vector<std::string>& choices) {
  if (choices.empty()) return make_error("choice: the list of choices is empty");
  for (size_t i = 0; i < choices.size(); ++i) {
    if (choices[i].empty()) return make_error("choice: choice {} is an empty string", i);
    uint32_t cp = 0;
    for (size_t pos = 0; pos < choices[i].size();) {
      if (!decode_utf8(choices[i], pos, cp)) {
        return make_error("choice: choice {} is not valid UTF-8", i);
      }
    }
  }
  // One literal table: the matcher follows all choices sharing a prefix in one frame.
  GrammarBuilder b;
  return b.finish(b.literals(choices));
}

}  // namespace kestrel::structured
