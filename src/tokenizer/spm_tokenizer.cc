// tokenizer/spm_tokenizer.cc — score-driven SentencePiece BPE encoding and decoding.
#include "tokenizer/spm_tokenizer.h"

#include <algorithm>

#include "tokenizer/utf8_sequence.h"

namespace kestrel {
namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581 "▁", SentencePiece's space

std::string unescape_spaces(std::string_view piece) {
  std::string out;
  out.reserve(piece.size());
  for (size_t i = 0; i < piece.size();) {
    if (piece.substr(i).starts_with(kSpace)) {
      out.push_back(' ');
      i += kSpace.size();
    } else {
      out.push_back(piece[i++]);
    }
  }
  return out;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// The byte a "<0xXX>" token stands for, or -1.
int byte_token_value(std::string_view text) {
  if (text.size() != 6 || !text.starts_with("<0x") || text[5] != '>') return -1;
  const int hi = hex_digit(text[3]), lo = hex_digit(text[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

}  // namespace

Expected<std::unique_ptr<SpmTokenizer>> SpmTokenizer::create(SpmSpec spec) {
  std::unique_ptr<SpmTokenizer> spm(new SpmTokenizer());
  KTRY(spm->build(spec));
  return spm;
}

Status SpmTokenizer::build(SpmSpec& spec) {
  const size_t n = spec.tokens.size();
  if (n == 0) return make_error("tokenizer vocabulary is empty");
  if (n > static_cast<size_t>(INT32_MAX)) return make_error("tokenizer vocabulary is too large");
  if (!spec.kinds.empty() && spec.kinds.size() != n) {
    return make_error("tokenizer has {} tokens but {} token kinds", n, spec.kinds.size());
  }
  if (!spec.scores.empty() && spec.scores.size() != n) {
    return make_error("tokenizer has {} tokens but {} scores", n, spec.scores.size());
  }
  kinds_ = spec.kinds.empty() ? std::vector<SpmTokenKind>(n, SpmTokenKind::kNormal) : spec.kinds;
  scores_ = spec.scores.empty() ? std::vector<float>(n, 0.0f) : std::move(spec.scores);
  byte_ids_.fill(-1);
  bytes_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const auto id = static_cast<int32_t>(i);
    std::string& text = spec.tokens[i];
    switch (kinds_[i]) {
      case SpmTokenKind::kNormal:
        bytes_[i] = unescape_spaces(text);
        normal_ids_[text] = id;
        break;
      case SpmTokenKind::kUnused:
        bytes_[i] = unescape_spaces(text);
        break;
      case SpmTokenKind::kByte: {
        const int value = byte_token_value(text);
        if (value < 0) return make_error("byte token {} is '{}', not <0xXX>", i, text);
        bytes_[i] = std::string(1, static_cast<char>(value));
        if (byte_ids_[value] < 0) byte_ids_[value] = id;
        break;
      }
      case SpmTokenKind::kControl:
      case SpmTokenKind::kUserDefined:
        literals_.add(id, text);
        bytes_[i] = std::move(text);
        break;
    }
  }
  literals_.finish();
  for (const std::optional<int32_t> id : {spec.bos_id, spec.unknown_id}) {
    if (id && !valid_id(*id)) {
      return make_error("special token id {} is outside the vocabulary of {}", *id, n);
    }
  }
  for (int32_t id : spec.eos_ids) {
    if (!valid_id(id)) return make_error("EOS token id {} is outside the vocabulary of {}", id, n);
  }
  bos_id_ = spec.bos_id;
  eos_ids_ = std::move(spec.eos_ids);
  unknown_id_ = spec.unknown_id;
  add_bos_ = spec.add_bos && bos_id_.has_value();
  add_eos_ = spec.add_eos && !eos_ids_.empty();
  add_space_prefix_ = spec.add_space_prefix;
  return Status::Ok();
}

std::vector<int32_t> SpmTokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::vector<int32_t> out;
  if (add_special_tokens && add_bos_) out.push_back(*bos_id_);
  // SentencePiece sees the text between literal tokens as separate sentences, each with its
  // own space prefix (llama.cpp and the Hugging Face Llama normalizer agree on this).
  bool after_literal = true;
  size_t start = 0;
  for (size_t pos = 0; pos < text.size();) {
    int32_t id = 0;
    const size_t len = literals_.match(text, pos, &id);
    if (len == 0) {
      ++pos;
      continue;
    }
    if (pos > start) encode_fragment(text.substr(start, pos - start), after_literal, out);
    out.push_back(id);
    after_literal = true;
    pos += len;
    start = pos;
  }
  if (start < text.size()) encode_fragment(text.substr(start), after_literal, out);
  if (add_special_tokens && add_eos_) out.push_back(eos_ids_.front());
  return out;
}

// Starts from one symbol per character (per byte where the UTF-8 is invalid) and merges the
// adjacent pair whose concatenation is the highest-scoring token, leftmost among equal scores,
// until no adjacent pair forms a token. A heap with lazy invalidation keeps it O(n log n).
void SpmTokenizer::encode_fragment(std::string_view text, bool space_prefix,
                                   std::vector<int32_t>& out) const {
  std::string s;
  s.reserve(text.size() + kSpace.size());
  if (space_prefix && add_space_prefix_) s += kSpace;
  for (char c : text) {
    if (c == ' ') {
      s += kSpace;
    } else {
      s.push_back(c);
    }
  }

  struct Symbol {
    size_t start;
    size_t len;  // 0 once merged into its left neighbour
    int32_t prev;
    int32_t next;
  };
  struct Pair {
    float score;
    int32_t left;
    int32_t right;
    size_t len;  // of the merged text; a mismatch later means the pair is stale
  };
  std::vector<Symbol> syms;
  for (size_t pos = 0; pos < s.size();) {
    const Utf8Sequence seq = utf8_sequence(std::string_view(s).substr(pos));
    const size_t len = seq.kind == Utf8Sequence::kValid ? seq.length : 1;
    const auto i = static_cast<int32_t>(syms.size());
    syms.push_back({pos, len, i - 1, i + 1});
    pos += len;
  }
  if (syms.empty()) return;
  syms.back().next = -1;

  // std heaps put the greatest element first; "less" here means a worse pair.
  const auto worse = [](const Pair& a, const Pair& b) {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  };
  std::vector<Pair> heap;
  const auto consider = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const size_t len = syms[left].len + syms[right].len;
    const auto it = normal_ids_.find(std::string_view(s).substr(syms[left].start, len));
    if (it == normal_ids_.end()) return;
    heap.push_back({scores_[it->second], left, right, len});
    std::push_heap(heap.begin(), heap.end(), worse);
  };
  for (size_t i = 0; i + 1 < syms.size(); ++i) {
    consider(static_cast<int32_t>(i), static_cast<int32_t>(i + 1));
  }
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), worse);
    const Pair p = heap.back();
    heap.pop_back();
    Symbol& left = syms[p.left];
    Symbol& right = syms[p.right];
    if (left.len == 0 || right.len == 0 || left.next != p.right || left.len + right.len != p.len) {
      continue;
    }
    left.len = p.len;
    left.next = right.next;
    if (right.next >= 0) syms[right.next].prev = p.left;
    right.len = 0;
    consider(left.prev, p.left);
    consider(p.left, left.next);
  }
  for (int32_t i = 0; i >= 0; i = syms[i].next) {
    emit_symbol(std::string_view(s).substr(syms[i].start, syms[i].len), out);
  }
}

// A symbol that is no token is spelled with byte tokens; without them it becomes the unknown
// token (or nothing, when the vocabulary has none).
void SpmTokenizer::emit_symbol(std::string_view symbol, std::vector<int32_t>& out) const {
  const auto it = normal_ids_.find(symbol);
  if (it != normal_ids_.end()) {
    out.push_back(it->second);
    return;
  }
  const bool all_bytes = std::all_of(symbol.begin(), symbol.end(), [&](char c) {
    return byte_ids_[static_cast<unsigned char>(c)] >= 0;
  });
  if (!all_bytes) {
    if (unknown_id_) out.push_back(*unknown_id_);
    return;
  }
  for (char c : symbol) out.push_back(byte_ids_[static_cast<unsigned char>(c)]);
}

std::string SpmTokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::string text;
  for (int32_t id : ids) {
    if (!valid_id(id)) continue;
    if (skip_special_tokens && kinds_[id] == SpmTokenKind::kControl) continue;
    text += bytes_[id];
  }
  if (add_space_prefix_ && !text.empty() && text[0] == ' ') text.erase(0, 1);
  return text;
}

std::string SpmTokenizer::token_bytes(int32_t id) const {
  return valid_id(id) ? bytes_[id] : std::string();
}

bool SpmTokenizer::is_special(int32_t id) const {
  return valid_id(id) && kinds_[id] == SpmTokenKind::kControl;
}

}  // namespace kestrel
