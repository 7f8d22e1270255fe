// Fuzzes the regex, EBNF and choice front ends (untrusted request fields) and the matcher on
// whatever they compile. The first byte picks the front end; the source runs to the first NUL
// byte (choices are its lines); the bytes after it are fed to the matcher, skipping refused
// ones. After every byte taken the state must be complete or allow some byte: no dead ends.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "structured/byte_matcher.h"
#include "structured/choice.h"
#include "structured/ebnf.h"
#include "structured/regex.h"

namespace {

using kestrel::structured::ByteMatcher;

bool some_byte_allowed(const ByteMatcher& m) {
  for (int c = 0; c < 256; ++c) {
    ByteMatcher copy = m;
    if (copy.feed(static_cast<uint8_t>(c))) return true;
  }
  return false;
}

std::vector<std::string> lines(std::string_view s) {
  std::vector<std::string> out;
  for (size_t start = 0; start <= s.size();) {
    size_t end = s.find('\n', start);
    if (end == std::string_view::npos) end = s.size();
    out.emplace_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  const size_t split = std::min(in.find('\0'), in.size());
  const std::string_view source = in.substr(0, split);
  const std::string_view text = in.substr(std::min(split + 1, in.size()), 64);
  auto g = data[0] % 3 == 0   ? kestrel::structured::compile_regex(source)
           : data[0] % 3 == 1 ? kestrel::structured::compile_ebnf(source)
                              : kestrel::structured::choice_grammar(lines(source));
  if (!g.ok()) return 0;
  ByteMatcher m(*g);
  if (!m.accepting() && !some_byte_allowed(m)) __builtin_trap();
  for (const char ch : text) {
    if (!m.feed(static_cast<uint8_t>(ch))) continue;
    if (!m.accepting() && !some_byte_allowed(m)) __builtin_trap();
  }
  return 0;
}
