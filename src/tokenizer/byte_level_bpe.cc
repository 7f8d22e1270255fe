// tokenizer/byte_level_bpe.cc — byte-level BPE encoding and decoding.
#include "tokenizer/byte_level_bpe.h"

#include <algorithm>

#include "base/logging.h"

namespace kestrel {
namespace {

constexpr size_t kMaxCachedPieceBytes = 256;
constexpr size_t kMaxCacheEntries = 1 << 16;
// The byte alphabet uses code points below this (bytes map to themselves or to 256 + n).
constexpr size_t kAlphabetEnd = 512;

// GPT-2 spells printable Latin-1 bytes as themselves and every other byte, in order, as 256 + n,
// so that every byte has a visible, non-space character.
struct ByteAlphabet {
  std::array<char32_t, 256> to_unicode{};
  std::array<int16_t, kAlphabetEnd> to_byte{};
};

constexpr ByteAlphabet make_byte_alphabet() {
  ByteAlphabet a;
  a.to_byte.fill(-1);
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    a.to_unicode[b] = printable ? static_cast<char32_t>(b) : next++;
    a.to_byte[a.to_unicode[b]] = static_cast<int16_t>(b);
  }
  return a;
}

constexpr ByteAlphabet kAlphabet = make_byte_alphabet();

// The bytes a normal token stands for. A token using characters outside the alphabet was stored
// literally by its converter, so it stands for its own UTF-8 text.
std::string unspell(std::string_view spelled) {
  std::string bytes;
  bytes.reserve(spelled.size());
  for (size_t i = 0; i < spelled.size();) {
    const auto c = static_cast<unsigned char>(spelled[i]);
    char32_t cp = 0;
    if (c < 0x80) {
      cp = c;
      i += 1;
    } else if ((c & 0xE0) == 0xC0 && i + 1 < spelled.size() &&
               (static_cast<unsigned char>(spelled[i + 1]) & 0xC0) == 0x80) {
      cp = ((c & 0x1F) << 6) | (static_cast<unsigned char>(spelled[i + 1]) & 0x3F);
      i += 2;
    } else {
      return std::string(spelled);
    }
    if (cp >= kAlphabetEnd || kAlphabet.to_byte[cp] < 0) return std::string(spelled);
    bytes.push_back(static_cast<char>(kAlphabet.to_byte[cp]));
  }
  return bytes;
}

}  // namespace

char32_t byte_to_unicode(uint8_t byte) {
  return kAlphabet.to_unicode[byte];
}

Expected<std::unique_ptr<ByteLevelBpe>> ByteLevelBpe::create(ByteLevelBpeSpec spec) {
  KASSIGN(RegexSplitter splitter, RegexSplitter::create(spec.split_patterns));
  std::unique_ptr<ByteLevelBpe> bpe(new ByteLevelBpe(std::move(splitter)));
  KTRY(bpe->build(spec));
  return bpe;
}

Status ByteLevelBpe::build(ByteLevelBpeSpec& spec) {
  const size_t n = spec.tokens.size();
  if (n == 0) return make_error("tokenizer vocabulary is empty");
  if (n > static_cast<size_t>(INT32_MAX)) return make_error("tokenizer vocabulary is too large");
  if (!spec.kinds.empty() && spec.kinds.size() != n) {
    return make_error("tokenizer has {} tokens but {} token kinds", n, spec.kinds.size());
  }
  kinds_ = spec.kinds.empty() ? std::vector<TokenKind>(n, TokenKind::kNormal) : spec.kinds;
  bytes_.resize(n);
  for (size_t id = 0; id < n; ++id) {
    if (kinds_[id] == TokenKind::kNormal) {
      bytes_[id] = unspell(spec.tokens[id]);
      normal_ids_[bytes_[id]] = static_cast<int32_t>(id);
    } else {
      bytes_[id] = std::move(spec.tokens[id]);
      literals_.add(static_cast<int32_t>(id), bytes_[id]);
    }
  }
  literals_.finish();
  for (int b = 0; b < 256; ++b) {
    const auto it = normal_ids_.find(std::string(1, static_cast<char>(b)));
    byte_ids_[b] = it == normal_ids_.end() ? -1 : it->second;
  }

  if (spec.bos_id && !valid_id(*spec.bos_id)) {
    return make_error("BOS token id {} is outside the vocabulary of {}", *spec.bos_id, n);
  }
  for (int32_t id : spec.eos_ids) {
    if (!valid_id(id)) return make_error("EOS token id {} is outside the vocabulary of {}", id, n);
  }
  bos_id_ = spec.bos_id;
  eos_ids_ = std::move(spec.eos_ids);
  add_bos_ = spec.add_bos && bos_id_.has_value();
  add_eos_ = spec.add_eos && !eos_ids_.empty();
  ignore_merges_ = spec.ignore_merges;
  return build_merges(spec.merges);
}

// Merges whose tokens are missing from the vocabulary could never apply; they are skipped (as
// llama.cpp does) with a warning rather than failing the whole model.
Status ByteLevelBpe::build_merges(const std::vector<std::string>& merges) {
  if (merges.size() > static_cast<size_t>(INT32_MAX)) return make_error("too many BPE merges");
  size_t skipped = 0;
  merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string_view m = merges[rank];
    const size_t space = m.find(' ');
    if (space == std::string_view::npos || space == 0 || space + 1 == m.size() ||
        m.find(' ', space + 1) != std::string_view::npos) {
      return make_error("BPE merge {} is not two tokens separated by a space: '{}'", rank, m);
    }
    const std::string left = unspell(m.substr(0, space));
    const std::string right = unspell(m.substr(space + 1));
    const auto l = normal_ids_.find(left);
    const auto r = normal_ids_.find(right);
    const auto result = normal_ids_.find(left + right);
    if (l == normal_ids_.end() || r == normal_ids_.end() || result == normal_ids_.end()) {
      ++skipped;
      continue;
    }
    merges_.try_emplace(bpe_pair_key(l->second, r->second),
                        BpeMerge{static_cast<int32_t>(rank), result->second});
  }
  if (skipped > 0) {
    KLOG_WARN("{} of {} BPE merges name tokens missing from the vocabulary; ignored", skipped,
              merges.size());
  }
  return Status::Ok();
}

std::vector<int32_t> ByteLevelBpe::encode(std::string_view text, bool add_special_tokens) const {
  std::vector<int32_t> out;
  if (add_special_tokens && add_bos_) out.push_back(*bos_id_);
  size_t start = 0;  // first byte not yet encoded
  for (size_t pos = 0; pos < text.size();) {
    int32_t id = 0;
    const size_t len = literals_.match(text, pos, &id);
    if (len == 0) {
      ++pos;
      continue;
    }
    encode_ordinary(text.substr(start, pos - start), out);
    out.push_back(id);
    pos += len;
    start = pos;
  }
  encode_ordinary(text.substr(start), out);
  if (add_special_tokens && add_eos_) out.push_back(eos_ids_.front());
  return out;
}

void ByteLevelBpe::encode_ordinary(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  std::vector<std::string_view> pieces;
  splitter_.split(text, pieces);
  for (std::string_view piece : pieces) encode_piece(piece, out);
}

void ByteLevelBpe::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.size() == 1) {
    const int32_t id = byte_ids_[static_cast<unsigned char>(piece[0])];
    if (id >= 0) out.push_back(id);
    return;
  }
  if (ignore_merges_) {
    const auto it = normal_ids_.find(piece);
    if (it != normal_ids_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  const bool cacheable = piece.size() <= kMaxCachedPieceBytes;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mu_);
    const auto it = cache_.find(piece);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t first = out.size();
  apply_merges(piece, out);
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mu_);
    if (cache_.size() >= kMaxCacheEntries) cache_.clear();
    cache_.try_emplace(std::string(piece), out.begin() + static_cast<ptrdiff_t>(first), out.end());
  }
}

void ByteLevelBpe::apply_merges(std::string_view piece, std::vector<int32_t>& out) const {
  std::vector<int32_t> symbols;
  symbols.reserve(piece.size());
  for (char c : piece) {
    const int32_t id = byte_ids_[static_cast<unsigned char>(c)];
    if (id >= 0) symbols.push_back(id);  // no token for this byte: dropped, neighbours meet
  }
  bpe_merge(symbols, merges_, out);
}

std::string ByteLevelBpe::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::string text;
  for (int32_t id : ids) {
    if (!valid_id(id)) continue;
    if (skip_special_tokens && kinds_[id] == TokenKind::kControl) continue;
    text += bytes_[id];
  }
  return text;
}

std::string ByteLevelBpe::token_bytes(int32_t id) const {
  return valid_id(id) ? bytes_[id] : std::string();
}

bool ByteLevelBpe::is_special(int32_t id) const {
  return valid_id(id) && kinds_[id] == TokenKind::kControl;
}

}  // namespace kestrel
