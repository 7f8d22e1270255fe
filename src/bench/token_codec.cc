#include "bench/token_codec.h"

#include <algorithm>
#include <random>
#include <set>

#include <nlohmann/json.hpp>

#include "bench/sync_http.h"

namespace kestrel::bench {

namespace {

class LocalCodec final : public TokenCodec {
 public:
  explicit LocalCodec(const Tokenizer& tokenizer) : tok_(tokenizer) {}

  Expected<std::vector<int32_t>> encode(const std::string& text, bool add_special) override {
    return tok_.encode(text, add_special);
  }
  Expected<std::string> decode(const std::vector<int32_t>& ids) override {
    return tok_.decode(ids, /*skip_special_tokens=*/false);
  }
  Expected<std::vector<int32_t>> ordinary_ids() override {
    std::vector<int32_t> ids;
    for (int32_t id = 0; id < tok_.vocab_size(); ++id)
      if (!tok_.is_special(id) && !tok_.token_bytes(id).empty()) ids.push_back(id);
    return ids;
  }

 private:
  const Tokenizer& tok_;
};

// Pieces the synthetic text is built from: Latin syllables, accented and non-Latin letters,
// digits and punctuation, so byte-level and SentencePiece vocabularies alike yield many tokens.
constexpr const char* kOnsets[] = {
    "b", "c", "d",  "f",  "g",  "h",  "j",  "k",  "l",  "m",  "n",  "p",  "r",  "s",  "t",   "v",
    "w", "z", "br", "ch", "cl", "dr", "gr", "pl", "sh", "st", "th", "tr", "qu", "sp", "str", ""};
constexpr const char* kNuclei[] = {"a",  "e",  "i",  "o",  "u",  "ai",
                                   "ea", "ee", "ie", "oo", "ou", "y"};
constexpr const char* kCodas[] = {"", "", "n", "r", "s", "t", "l", "ng", "nd", "st", "ck", "rt"};
constexpr const char* kOther[] = {"é",     "ü",    "ñ",    "ç",    "ø",  "да", "нет",
                                  "мир",   "日本", "中文", "한국", "αβ", "γλ", "שלום",
                                  "مرحبا", "नमस्",  "🙂", "…",    "—"};
constexpr const char* kPunct[] = {",", ".", ";", ":", "!", "?", "(", ")", "\"", "'", "-", "\n"};

std::string synthetic_text(size_t words, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto pick = [&rng](const auto& list) {
    return std::string(list[std::uniform_int_distribution<size_t>(0, std::size(list) - 1)(rng)]);
  };
  std::uniform_int_distribution<int> percent(0, 99), syllables(1, 4), number(0, 99999);
  std::string text;
  for (size_t w = 0; w < words; ++w) {
    const int kind = percent(rng);
    std::string word;
    if (kind < 6) {
      word = pick(kOther);
    } else if (kind < 10) {
      word = std::to_string(number(rng));
    } else {
      for (int s = syllables(rng); s > 0; --s) word += pick(kOnsets) + pick(kNuclei) + pick(kCodas);
      if (kind < 22) word[0] = static_cast<char>(word[0] - 'a' + 'A');
    }
    text += word;
    text += percent(rng) < 12 ? pick(kPunct) + " " : " ";
  }
  return text;
}

class RemoteCodec final : public TokenCodec {
 public:
  explicit RemoteCodec(const RemoteTokenizerOptions& o)
      : http_(o.host, o.port, o.api_key), model_(o.model) {}

  Expected<std::vector<int32_t>> encode(const std::string& text, bool add_special) override {
    const nlohmann::json body = {{"model", model_},
                                 {"prompt", text},
                                 {"content", text},
                                 {"add_special_tokens", add_special},
                                 {"add_special", add_special}};
    KASSIGN(const nlohmann::json reply, call("/tokenize", body));
    if (!reply.contains("tokens") || !reply["tokens"].is_array())
      return make_error("/tokenize answered without a \"tokens\" list");
    std::vector<int32_t> ids;
    for (const nlohmann::json& t : reply["tokens"]) {
      if (!t.is_number_integer()) return make_error("/tokenize answered a non-integer token");
      ids.push_back(t.get<int32_t>());
    }
    return ids;
  }

  Expected<std::string> decode(const std::vector<int32_t>& ids) override {
    KASSIGN(const nlohmann::json reply, call("/detokenize", {{"model", model_}, {"tokens", ids}}));
    for (const char* key : {"prompt", "content"})
      if (reply.contains(key) && reply[key].is_string()) return reply[key].get<std::string>();
    return make_error("/detokenize answered without a \"prompt\" or \"content\" string");
  }

  Expected<std::vector<int32_t>> ordinary_ids() override {
    // In pieces, to stay under servers' body limits.
    constexpr int kPieces = 8;
    constexpr size_t kWordsPerPiece = 4000;
    std::set<int32_t> seen;
    for (int piece = 0; piece < kPieces; ++piece) {
      KASSIGN(const std::vector<int32_t> ids,
              encode(synthetic_text(kWordsPerPiece, static_cast<uint64_t>(piece)), false));
      seen.insert(ids.begin(), ids.end());
    }
    if (seen.size() < 2) return make_error("the server's tokenizer yields too few distinct tokens");
    return std::vector<int32_t>(seen.begin(), seen.end());
  }

 private:
  Expected<nlohmann::json> call(const std::string& path, const nlohmann::json& body) {
    KASSIGN(const HttpReply reply, http_.post_json(path, body.dump()));
    if (reply.status != 200)
      return make_error("POST {} answered {}: {}", path, reply.status, reply.body.substr(0, 200));
    nlohmann::json j = nlohmann::json::parse(reply.body, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object())
      return make_error("POST {} answered something that is not a JSON object", path);
    return j;
  }

  SyncHttpClient http_;
  std::string model_;
};

}  // namespace

std::unique_ptr<TokenCodec> local_token_codec(const Tokenizer& tokenizer) {
  return std::make_unique<LocalCodec>(tokenizer);
}

Expected<std::unique_ptr<TokenCodec>> remote_token_codec(const RemoteTokenizerOptions& options) {
  auto codec = std::make_unique<RemoteCodec>(options);
  KASSIGN(const std::vector<int32_t> probe, codec->encode("Hello world", false));
  if (probe.empty()) return make_error("/tokenize gave no tokens for \"Hello world\"");
  return std::unique_ptr<TokenCodec>(std::move(codec));
}

}  // namespace kestrel::bench
