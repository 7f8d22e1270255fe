// chat/py_str.cc — Python str operations over UTF-8.
#include "chat/py_str.h"

#include <locale.h>
#include <wctype.h>

#include <algorithm>

#include "chat/jinja_value.h"

namespace kestrel::chat {

std::u32string utf8_decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || i + len > s.size()) {
      out.push_back(0xFFFD);
      ++i;
      continue;
    }
    char32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    bool ok = true;
    for (int k = 1; k < len; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) ok = false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (!ok) {
      out.push_back(0xFFFD);
      ++i;
      continue;
    }
    out.push_back(cp);
    i += len;
  }
  return out;
}

std::string utf8_encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t cp : s) append_utf8(out, cp);
  return out;
}

size_t utf8_length(std::string_view s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

bool py_isspace(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

bool py_isprintable(char32_t cp) {
  if (cp == ' ') return true;
  if (cp < 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD) return false;
  if (py_isspace(cp)) return false;  // Zs/Zl/Zp separators other than ' '
  // Format characters (Cf) that chat text carries: joiners, marks, BOM, tags (flag emoji).
  if ((cp >= 0x200B && cp <= 0x200F) || (cp >= 0x202A && cp <= 0x202E) ||
      (cp >= 0x2060 && cp <= 0x2064) || (cp >= 0x2066 && cp <= 0x206F) || cp == 0xFEFF ||
      (cp >= 0xFFF9 && cp <= 0xFFFB) || cp == 0x061C || cp == 0x180E ||
      (cp >= 0x0600 && cp <= 0x0605) || cp == 0x06DD || cp == 0x070F || cp == 0x08E2 ||
      cp == 0xE0001 || (cp >= 0xE0020 && cp <= 0xE007F)) {
    return false;
  }
  // Surrogates, private use, noncharacters.
  if ((cp >= 0xD800 && cp <= 0xF8FF) || (cp >= 0xF0000) || (cp & 0xFFFE) == 0xFFFE) return false;
  return true;
}

std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left,
                     bool right) {
  const std::u32string cps = utf8_decode(s);
  const std::u32string set = chars ? utf8_decode(*chars) : std::u32string();
  auto strip_it = [&](char32_t c) {
    return chars ? set.find(c) != std::u32string::npos : py_isspace(c);
  };
  size_t b = 0, e = cps.size();
  if (left)
    while (b < e && strip_it(cps[b])) ++b;
  if (right)
    while (e > b && strip_it(cps[e - 1])) --e;
  return utf8_encode(std::u32string_view(cps).substr(b, e - b));
}

std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep,
                                  int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    if (sep->empty()) throw_error("ValueError: empty separator");
    size_t pos = 0;
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      const size_t hit = s.find(*sep, pos);
      if (hit == std::string_view::npos) break;
      out.emplace_back(s.substr(pos, hit - pos));
      pos = hit + sep->size();
    }
    out.emplace_back(s.substr(pos));
    return out;
  }
  const std::u32string cps = utf8_decode(s);
  size_t i = 0;
  const size_t n = cps.size();
  while (true) {
    while (i < n && py_isspace(cps[i])) ++i;
    if (i == n) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      out.push_back(utf8_encode(std::u32string_view(cps).substr(i)));
      break;
    }
    size_t j = i;
    while (j < n && !py_isspace(cps[j])) ++j;
    out.push_back(utf8_encode(std::u32string_view(cps).substr(i, j - i)));
    i = j;
  }
  return out;
}

namespace {

// glibc's C.UTF-8 locale carries the Unicode simple case mappings (Python's str.upper and
// lower also apply a few one-to-many special cases, such as ß → SS, that this does not).
locale_t unicode_locale() {
  static const locale_t loc = newlocale(LC_CTYPE_MASK, "C.UTF-8", static_cast<locale_t>(0));
  return loc;
}

char32_t to_upper(char32_t c) {
  if (c < 0x80) return c >= 'a' && c <= 'z' ? c - 32 : c;
  const locale_t loc = unicode_locale();
  return loc ? static_cast<char32_t>(towupper_l(static_cast<wint_t>(c), loc)) : c;
}

char32_t to_lower(char32_t c) {
  if (c < 0x80) return c >= 'A' && c <= 'Z' ? c + 32 : c;
  const locale_t loc = unicode_locale();
  return loc ? static_cast<char32_t>(towlower_l(static_cast<wint_t>(c), loc)) : c;
}

bool is_cased(char32_t c) {
  return to_upper(c) != c || to_lower(c) != c;
}

template <typename F>
std::string map_chars(std::string_view s, F f) {
  std::u32string cps = utf8_decode(s);
  for (char32_t& c : cps) c = f(c);
  return utf8_encode(cps);
}

}  // namespace

std::string py_upper(std::string_view s) {
  return map_chars(s, to_upper);
}

std::string py_lower(std::string_view s) {
  return map_chars(s, to_lower);
}

std::string py_title(std::string_view s) {
  bool prev_cased = false;
  return map_chars(s, [&](char32_t c) {
    const bool cased = is_cased(c);
    const char32_t r = cased ? (prev_cased ? to_lower(c) : to_upper(c)) : c;
    prev_cased = cased;
    return r;
  });
}

std::string py_capitalize(std::string_view s) {
  bool first = true;
  return map_chars(s, [&](char32_t c) {
    const char32_t r = first ? to_upper(c) : to_lower(c);
    first = false;
    return r;
  });
}

std::string py_replace(std::string_view s, std::string_view from, std::string_view to,
                       int64_t count) {
  std::string out;
  if (from.empty()) {
    // Python inserts `to` before every code point and at the end.
    const std::u32string cps = utf8_decode(s);
    int64_t done = 0;
    for (char32_t cp : cps) {
      if (count < 0 || done < count) {
        out += to;
        ++done;
      }
      append_utf8(out, cp);
    }
    if (count < 0 || done < count) out += to;
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t hit = s.find(from, pos);
    if (hit == std::string_view::npos) break;
    out += s.substr(pos, hit - pos);
    out += to;
    pos = hit + from.size();
    ++done;
  }
  out += s.substr(pos);
  return out;
}

std::vector<int64_t> slice_indices(int64_t len, std::optional<int64_t> start,
                                   std::optional<int64_t> stop, std::optional<int64_t> step) {
  const int64_t st = step.value_or(1);
  if (st == 0) throw_error("ValueError: slice step cannot be zero");
  auto clamp = [&](std::optional<int64_t> v, int64_t dflt) {
    if (!v) return dflt;
    int64_t x = *v;
    if (x < 0) x += len;
    if (st > 0) return std::clamp<int64_t>(x, 0, len);
    return std::clamp<int64_t>(x, -1, len - 1);
  };
  std::vector<int64_t> out;
  if (st > 0) {
    const int64_t b = clamp(start, 0), e = clamp(stop, len);
    for (int64_t k = b; k < e; k += st) out.push_back(k);
  } else {
    const int64_t b = clamp(start, len - 1), e = clamp(stop, -1);
    for (int64_t k = b; k > e; k += st) out.push_back(k);
  }
  return out;
}

std::string py_slice(std::string_view s, std::optional<int64_t> start, std::optional<int64_t> stop,
                     std::optional<int64_t> step) {
  const std::u32string cps = utf8_decode(s);
  std::string out;
  for (int64_t k : slice_indices(static_cast<int64_t>(cps.size()), start, stop, step))
    append_utf8(out, cps[static_cast<size_t>(k)]);
  return out;
}

}  // namespace kestrel::chat
