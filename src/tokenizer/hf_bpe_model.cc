// tokenizer/hf_bpe_model.cc — tokenizer.json BPE: vocabulary, merges, unknown and byte-fallback
// handling, ignore_merges and a word cache.
#include "tokenizer/hf_bpe_model.h"

#include <fmt/format.h>

#include "base/logging.h"
#include "tokenizer/unicode.h"

namespace kestrel {
namespace {

constexpr size_t kMaxCachedWordBytes = 256;
constexpr size_t kMaxCacheEntries = 1 << 16;

// A merge is "left right" (older files) or ["left", "right"].
Expected<std::pair<std::string, std::string>> parse_merge(const nlohmann::json& m, size_t rank) {
  if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
    return std::pair(m[0].get<std::string>(), m[1].get<std::string>());
  }
  if (m.is_string()) {
    const std::string s = m.get<std::string>();
    const size_t space = s.find(' ');
    if (space != std::string::npos && s.find(' ', space + 1) == std::string::npos) {
      return std::pair(s.substr(0, space), s.substr(space + 1));
    }
  }
  return make_error("BPE merge {} is not a pair of tokens: {}", rank, m.dump());
}

}  // namespace

Expected<std::unique_ptr<HfBpeModel>> HfBpeModel::parse(const nlohmann::json& j) {
  try {
    const std::string type = j.value("type", std::string("BPE"));
    if (type != "BPE") return make_error("unsupported tokenizer.json model type '{}'", type);
    std::unique_ptr<HfBpeModel> model(new HfBpeModel());
    for (const auto& [token, id] : j.at("vocab").items()) {
      const int64_t v = id.get<int64_t>();
      if (v < 0 || v > INT32_MAX) return make_error("token '{}' has a bad id {}", token, v);
      model->vocab_.emplace(token, static_cast<int32_t>(v));
    }
    if (j.contains("unk_token") && j["unk_token"].is_string()) {
      const auto unk = model->find(j["unk_token"].get<std::string>());
      if (!unk) return make_error("unk_token {} is not in the vocabulary", j["unk_token"].dump());
      model->unk_id_ = unk;
    }
    model->fuse_unk_ = j.value("fuse_unk", false);
    model->byte_fallback_ = j.value("byte_fallback", false);
    model->ignore_merges_ = j.value("ignore_merges", false);
    if (j.contains("continuing_subword_prefix") && j["continuing_subword_prefix"].is_string()) {
      model->continuing_subword_prefix_ = j["continuing_subword_prefix"].get<std::string>();
    }
    if (j.contains("end_of_word_suffix") && j["end_of_word_suffix"].is_string()) {
      model->end_of_word_suffix_ = j["end_of_word_suffix"].get<std::string>();
    }
    const auto& merges = j.at("merges");
    model->merges_.reserve(merges.size());
    size_t skipped = 0;
    const size_t prefix_len = model->continuing_subword_prefix_.size();
    for (size_t rank = 0; rank < merges.size(); ++rank) {
      KASSIGN(auto pair, parse_merge(merges[rank], rank));
      const auto& [left, right] = pair;
      // The merged token drops the right side's continuation prefix.
      const std::string merged =
          left + (prefix_len > 0 && right.starts_with(model->continuing_subword_prefix_)
                      ? right.substr(prefix_len)
                      : right);
      const auto l = model->find(left);
      const auto r = model->find(right);
      const auto m = model->find(merged);
      if (!l || !r || !m) {
        ++skipped;
        continue;
      }
      model->merges_.try_emplace(bpe_pair_key(*l, *r), BpeMerge{static_cast<int32_t>(rank), *m});
    }
    if (skipped > 0) {
      KLOG_WARN("{} of {} BPE merges name tokens missing from the vocabulary; ignored", skipped,
                merges.size());
    }
    return model;
  } catch (const nlohmann::json::exception& e) {
    return make_error("tokenizer.json model: {}", e.what());
  }
}

std::optional<int32_t> HfBpeModel::find(std::string_view token) const {
  const auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

void HfBpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (const auto id = find(word)) {
      out.push_back(*id);
      return;
    }
  }
  const bool cacheable = word.size() <= kMaxCachedWordBytes;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mu_);
    const auto it = cache_.find(word);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t first = out.size();
  merge_word(word, out);
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mu_);
    if (cache_.size() >= kMaxCacheEntries) cache_.clear();
    cache_.try_emplace(std::string(word), out.begin() + static_cast<ptrdiff_t>(first), out.end());
  }
}

// Each character becomes a symbol: its token, else its bytes as <0xAB> tokens (byte fallback),
// else the unknown token (consecutive unknowns fused when fuse_unk). Characters with none of
// these are dropped.
void HfBpeModel::merge_word(std::string_view word, std::vector<int32_t>& out) const {
  std::vector<int32_t> symbols;
  bool pending_unk = false;
  std::string s;
  for (size_t i = 0; i < word.size();) {
    const Utf8Char c = next_utf8_char(word, i);
    s.clear();
    if (i > 0) s += continuing_subword_prefix_;
    s.append(word.substr(i, c.length));
    i += c.length;
    if (i == word.size()) s += end_of_word_suffix_;
    if (const auto id = find(s)) {
      if (pending_unk) symbols.push_back(*unk_id_);
      pending_unk = false;
      symbols.push_back(*id);
      continue;
    }
    if (byte_fallback_) {
      std::vector<int32_t> bytes;
      for (char b : s) {
        const auto id = find(fmt::format("<0x{:02X}>", static_cast<unsigned char>(b)));
        if (!id) break;
        bytes.push_back(*id);
      }
      if (bytes.size() == s.size()) {
        symbols.insert(symbols.end(), bytes.begin(), bytes.end());
        continue;
      }
    }
    if (!unk_id_) continue;
    if (pending_unk && !fuse_unk_) symbols.push_back(*unk_id_);
    pending_unk = true;
  }
  if (pending_unk) symbols.push_back(*unk_id_);
  bpe_merge(symbols, merges_, out);
}

}  // namespace kestrel
