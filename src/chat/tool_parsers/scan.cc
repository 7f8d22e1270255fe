// Scanning helpers shared by the tool-call formats.
#include <nlohmann/json.hpp>

#include <algorithm>

#include "chat/tool_parsers/format.h"

namespace kestrel::chat {

bool ToolSet::accepts(std::string_view name) const {
  // A function name never holds spaces or markup characters; rejecting them matters most when
  // there are no tools to check against.
  const bool plain = std::none_of(name.begin(), name.end(), [](char c) {
    return static_cast<unsigned char>(c) <= ' ' || c == '<' || c == '>' || c == '"';
  });
  if (name.empty() || !plain) return false;
  if (tools.empty()) return true;
  return std::any_of(tools.begin(), tools.end(), [&](const ToolSpec& t) { return t.name == name; });
}

const nlohmann::json* ToolSet::parameters(std::string_view name) const {
  for (const ToolSpec& t : tools) {
    if (t.name == name) return &t.parameters;
  }
  return nullptr;
}

bool is_json_space(char c) {
  return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

size_t leading_space(std::string_view s) {
  size_t i = 0;
  while (i < s.size() && is_json_space(s[i])) ++i;
  return i;
}

std::string_view trim_space(std::string_view s) {
  s.remove_prefix(leading_space(s));
  while (!s.empty() && is_json_space(s.back())) s.remove_suffix(1);
  return s;
}

namespace {

bool starts_with_any(std::string_view s, std::span<const std::string_view> markers) {
  return std::any_of(markers.begin(), markers.end(),
                     [&](std::string_view m) { return s.starts_with(m); });
}

// `s` is shorter than some marker and that marker begins with it.
bool proper_prefix_of_any(std::string_view s, std::span<const std::string_view> markers) {
  return std::any_of(markers.begin(), markers.end(),
                     [&](std::string_view m) { return s.size() < m.size() && m.starts_with(s); });
}

// Length of the longest tail of `s` that may begin a marker.
size_t held_tail(std::string_view s, std::span<const std::string_view> markers) {
  size_t longest = 0;
  for (std::string_view m : markers) {
    for (size_t n = std::min(s.size(), m.size() - 1); n > longest; --n) {
      if (m.starts_with(s.substr(s.size() - n))) {
        longest = n;
        break;
      }
    }
  }
  return longest;
}

}  // namespace

std::optional<Step> scan_content(std::string_view text, bool eof,
                                 std::span<const std::string_view> markers,
                                 bool drop_leading_space) {
  if (drop_leading_space) {
    const size_t w = leading_space(text);
    if (w > 0) {
      const std::string_view rest = text.substr(w);
      if (rest.empty()) return eof ? skip_step(w) : need_more();
      if (starts_with_any(rest, markers)) return skip_step(w);
      if (!eof && proper_prefix_of_any(rest, markers)) return need_more();
    }
  }
  if (starts_with_any(text, markers)) return std::nullopt;
  size_t first = std::string_view::npos;
  for (std::string_view m : markers) first = std::min(first, text.find(m));
  if (first != std::string_view::npos) return content_step(first);
  const size_t keep = text.size() - (eof ? 0 : held_tail(text, markers));
  return keep > 0 ? content_step(keep) : need_more();
}

std::optional<size_t> json_value_end(std::string_view text) {
  int depth = 0;
  bool in_string = false;
  bool escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return std::nullopt;
}

std::optional<std::string> peek_json_name(std::string_view s) {
  size_t i = leading_space(s);
  const auto expect = [&](std::string_view token) {
    i += leading_space(s.substr(i));
    if (!s.substr(i).starts_with(token)) return false;
    i += token.size();
    return true;
  };
  if (!expect("{") || !expect("\"name\"") || !expect(":") || !expect("\"")) return std::nullopt;
  const size_t open = i - 1;
  bool escaped = false;
  for (; i < s.size(); ++i) {
    if (escaped) {
      escaped = false;
    } else if (s[i] == '\\') {
      escaped = true;
    } else if (s[i] == '"') {
      const auto name = nlohmann::json::parse(s.substr(open, i + 1 - open), nullptr, false);
      if (!name.is_string()) return std::nullopt;
      return name.get<std::string>();
    }
  }
  return std::nullopt;
}

namespace {

std::string dump_compact(const nlohmann::ordered_json& j) {
  // Invalid UTF-8 cannot survive the parser, but the replace handler keeps dump() from throwing.
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace

std::optional<RawCall> call_from_json(std::string_view object_text,
                                      std::span<const std::string_view> args_keys,
                                      const ToolSet& tools) {
  const auto j = nlohmann::ordered_json::parse(object_text, nullptr, false);
  if (!j.is_object()) return std::nullopt;
  const auto name = j.find("name");
  if (name == j.end() || !name->is_string()) return std::nullopt;
  RawCall call{name->get<std::string>(), {}};
  if (!tools.accepts(call.name)) return std::nullopt;
  for (std::string_view key : args_keys) {
    const auto args = j.find(std::string(key));
    if (args == j.end()) continue;
    if (!args->is_object()) return std::nullopt;
    call.arguments = dump_compact(*args);
    return call;
  }
  return std::nullopt;
}

std::optional<std::string> arguments_object(std::string_view text) {
  const auto j = nlohmann::ordered_json::parse(text, nullptr, false);
  if (!j.is_object()) return std::nullopt;
  return dump_compact(j);
}

}  // namespace kestrel::chat
