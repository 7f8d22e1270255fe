// tokenizer/incremental_detokenizer.cc — windowed decode deltas with UTF-8 hold-back.
#include "tokenizer/incremental_detokenizer.h"

#include <algorithm>

#include "tokenizer/utf8_sequence.h"

namespace kestrel {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

}  // namespace

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens,
                                               std::span<const int32_t> prompt)
    : tokenizer_(&tokenizer), skip_special_tokens_(skip_special_tokens) {
  for (int32_t id : prompt) {
    if (!ignored(id)) window_.push_back(id);
  }
  const std::string text = tokenizer_->decode(window_, skip_special_tokens_);
  consumed_ = text.size();
  advance(text);
}

bool IncrementalDetokenizer::ignored(int32_t id) const {
  return id < 0 || id >= tokenizer_->vocab_size() ||
         (skip_special_tokens_ && tokenizer_->is_special(id));
}

std::string IncrementalDetokenizer::push(int32_t id) {
  if (ignored(id)) return {};
  window_.push_back(id);
  const std::string text = tokenizer_->decode(window_, skip_special_tokens_);
  std::string delta = take(text, /*final=*/false);
  advance(text);
  return delta;
}

std::string IncrementalDetokenizer::finish() {
  const std::string text = tokenizer_->decode(window_, skip_special_tokens_);
  std::string delta = take(text, /*final=*/true);
  advance(text);
  return delta;
}

std::string IncrementalDetokenizer::take(const std::string& text, bool final) {
  std::string out;
  size_t pos = consumed_;
  while (pos < text.size()) {
    const Utf8Sequence seq = utf8_sequence(std::string_view(text).substr(pos));
    if (seq.kind == Utf8Sequence::kTruncated && !final) break;
    if (seq.kind == Utf8Sequence::kValid) {
      out.append(text, pos, seq.length);
    } else {
      out += kReplacement;
    }
    pos += seq.length;
  }
  consumed_ = std::max(consumed_, pos);
  return out;
}

void IncrementalDetokenizer::advance(const std::string& text) {
  if (consumed_ < text.size() || window_.size() < 2) return;
  for (size_t k = window_.size() - 1; k > 0; --k) {
    const int32_t id = window_[k];
    if (tokenizer_->decode(std::span<const int32_t>(&id, 1), skip_special_tokens_).empty()) {
      continue;
    }
    window_.erase(window_.begin(), window_.begin() + static_cast<ptrdiff_t>(k));
    consumed_ = tokenizer_->decode(window_, skip_special_tokens_).size();
    return;
  }
}

}  // namespace kestrel
