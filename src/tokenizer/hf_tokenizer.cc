// tokenizer/hf_tokenizer.cc — the tokenizer.json pipeline and load_hf_tokenizer.
#include "tokenizer/hf_tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tokenizer/hf_added_tokens.h"
#include "tokenizer/hf_bpe_model.h"
#include "tokenizer/hf_decoder.h"
#include "tokenizer/hf_normalizer.h"
#include "tokenizer/hf_pre_tokenizer.h"

namespace kestrel {
namespace {

using nlohmann::json;

// What the post-processor adds around a single sequence.
struct Template {
  std::vector<int32_t> prefix;
  std::vector<int32_t> suffix;
};

Expected<Template> parse_post_processor(const json& j) {
  Template t;
  if (j.is_null()) return t;
  const std::string type = j.value("type", std::string());
  if (type == "ByteLevel") return t;  // only adjusts offsets
  if (type == "TemplateProcessing") {
    bool seen_sequence = false;
    for (const json& item : j.at("single")) {
      if (item.contains("Sequence")) {
        seen_sequence = true;
        continue;
      }
      const std::string name = item.at("SpecialToken").at("id").get<std::string>();
      const json& special = j.at("special_tokens");
      if (!special.contains(name)) {
        return make_error("TemplateProcessing names special token '{}' it does not define", name);
      }
      auto& side = seen_sequence ? t.suffix : t.prefix;
      for (const json& id : special[name].at("ids")) side.push_back(id.get<int32_t>());
    }
    return t;
  }
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    t.prefix.push_back(j.at("cls").at(1).get<int32_t>());
    t.suffix.push_back(j.at("sep").at(1).get<int32_t>());
    return t;
  }
  if (type == "Sequence") {
    // Later processors wrap the output of earlier ones.
    for (const json& p : j.at("processors")) {
      KASSIGN(Template inner, parse_post_processor(p));
      t.prefix.insert(t.prefix.begin(), inner.prefix.begin(), inner.prefix.end());
      t.suffix.insert(t.suffix.end(), inner.suffix.begin(), inner.suffix.end());
    }
    return t;
  }
  return make_error("unsupported tokenizer.json post_processor type '{}'", type);
}

// "bos_token": "<s>" or {"content": "<s>", ...} or null.
std::optional<std::string> config_token(const json& config, const char* key) {
  if (!config.contains(key)) return std::nullopt;
  const json& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) {
    return v["content"].get<std::string>();
  }
  return std::nullopt;
}

class HfTokenizer final : public Tokenizer {
 public:
  static Expected<std::unique_ptr<HfTokenizer>> create(const json& j, const json& config);

  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const override;
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const override;
  std::string token_bytes(int32_t id) const override;
  int32_t vocab_size() const override { return static_cast<int32_t>(tokens_.size()); }
  std::optional<int32_t> bos_id() const override { return bos_id_; }
  const std::vector<int32_t>& eos_ids() const override { return eos_ids_; }
  bool is_special(int32_t id) const override { return valid_id(id) && special_[id]; }

 private:
  explicit HfTokenizer(const std::vector<HfAddedToken>& added)
      : raw_tokens_(filter(added, false)), normalized_tokens_(filter(added, true)) {}
  static std::vector<HfAddedToken> filter(const std::vector<HfAddedToken>& added, bool normalized);
  bool valid_id(int32_t id) const { return id >= 0 && static_cast<size_t>(id) < tokens_.size(); }
  std::optional<int32_t> token_id(const std::string& token) const;
  void encode_raw(std::string_view text, bool at_start, std::vector<int32_t>& out) const;
  void encode_normalized(std::string_view text, bool at_start, std::vector<int32_t>& out) const;
  void apply_config(const json& config);

  AddedTokenMatcher raw_tokens_;
  AddedTokenMatcher normalized_tokens_;
  std::unique_ptr<HfNormalizer> normalizer_;
  std::unique_ptr<HfPreTokenizer> pre_tokenizer_;
  std::unique_ptr<HfBpeModel> model_;
  std::unique_ptr<HfDecoder> decoder_;
  Template template_;
  std::vector<std::string> tokens_;  // per id: its token string (empty where no token has it)
  std::vector<bool> special_;
  std::unordered_map<std::string, int32_t> added_ids_;
  std::optional<int32_t> bos_id_;
  std::vector<int32_t> eos_ids_;
};

std::vector<HfAddedToken> HfTokenizer::filter(const std::vector<HfAddedToken>& added,
                                              bool normalized) {
  std::vector<HfAddedToken> out;
  for (const HfAddedToken& t : added) {
    if (t.normalized == normalized) out.push_back(t);
  }
  return out;
}

Expected<std::unique_ptr<HfTokenizer>> HfTokenizer::create(const json& j, const json& config) {
  std::vector<HfAddedToken> added;
  if (j.contains("added_tokens")) {
    for (const json& a : j["added_tokens"]) {
      HfAddedToken t;
      t.content = a.at("content").get<std::string>();
      t.id = a.at("id").get<int32_t>();
      if (t.id < 0) return make_error("added token '{}' has a negative id", t.content);
      t.special = a.value("special", false);
      t.single_word = a.value("single_word", false);
      t.lstrip = a.value("lstrip", false);
      t.rstrip = a.value("rstrip", false);
      t.normalized = a.value("normalized", !t.special);
      added.push_back(std::move(t));
    }
  }
  // split_special_tokens (tokenizer_config.json): special tokens written in the text are
  // tokenized as plain text; they stay in the vocabulary.
  std::vector<HfAddedToken> matched;
  const bool split_special = config.contains("split_special_tokens") &&
                             config["split_special_tokens"].is_boolean() &&
                             config["split_special_tokens"].get<bool>();
  for (const HfAddedToken& t : added)
    if (!(split_special && t.special)) matched.push_back(t);
  std::unique_ptr<HfTokenizer> tok(new HfTokenizer(matched));
  KASSIGN(tok->normalizer_, parse_hf_normalizer(j.value("normalizer", json())));
  KASSIGN(tok->pre_tokenizer_, parse_hf_pre_tokenizer(j.value("pre_tokenizer", json())));
  KASSIGN(tok->model_, HfBpeModel::parse(j.at("model")));
  KASSIGN(tok->decoder_, parse_hf_decoder(j.value("decoder", json())));
  KASSIGN(tok->template_, parse_post_processor(j.value("post_processor", json())));

  size_t size = 0;
  tok->model_->for_each_token(
      [&](const std::string&, int32_t id) { size = std::max(size, static_cast<size_t>(id) + 1); });
  for (const HfAddedToken& t : added) size = std::max(size, static_cast<size_t>(t.id) + 1);
  tok->tokens_.resize(size);
  tok->special_.assign(size, false);
  tok->model_->for_each_token(
      [&](const std::string& token, int32_t id) { tok->tokens_[id] = token; });
  for (const HfAddedToken& t : added) {
    tok->tokens_[t.id] = t.content;
    tok->special_[t.id] = t.special;
    tok->added_ids_[t.content] = t.id;
  }
  for (int32_t id : tok->template_.prefix) {
    if (!tok->valid_id(id)) return make_error("post_processor token id {} is out of range", id);
  }
  for (int32_t id : tok->template_.suffix) {
    if (!tok->valid_id(id)) return make_error("post_processor token id {} is out of range", id);
  }
  tok->apply_config(config);
  return tok;
}

std::optional<int32_t> HfTokenizer::token_id(const std::string& token) const {
  const auto it = added_ids_.find(token);
  if (it != added_ids_.end()) return it->second;
  return model_->find(token);
}

// BOS/EOS come from tokenizer_config.json. transformers rebuilds the post-processor of
// tokenizers that declare add_bos_token / add_eos_token, so a declared flag overrides whether
// the template adds that token.
void HfTokenizer::apply_config(const json& config) {
  if (const auto bos = config_token(config, "bos_token")) bos_id_ = token_id(*bos);
  if (const auto eos = config_token(config, "eos_token")) {
    if (const auto id = token_id(*eos)) eos_ids_.push_back(*id);
  }
  if (!bos_id_ && !template_.prefix.empty()) bos_id_ = template_.prefix.front();
  if (config.contains("add_bos_token") && config["add_bos_token"].is_boolean()) {
    auto& p = template_.prefix;
    if (bos_id_) p.erase(std::remove(p.begin(), p.end(), *bos_id_), p.end());
    if (config["add_bos_token"].get<bool>() && bos_id_) p.insert(p.begin(), *bos_id_);
  }
  if (config.contains("add_eos_token") && config["add_eos_token"].is_boolean() &&
      !eos_ids_.empty()) {
    auto& s = template_.suffix;
    s.erase(std::remove(s.begin(), s.end(), eos_ids_.front()), s.end());
    if (config["add_eos_token"].get<bool>()) s.push_back(eos_ids_.front());
  }
}

std::vector<int32_t> HfTokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::vector<int32_t> out;
  if (add_special_tokens) out = template_.prefix;
  std::vector<AddedTokenMatcher::Match> matches;
  raw_tokens_.find_all(text, matches);
  size_t pos = 0;
  for (const auto& m : matches) {
    encode_raw(text.substr(pos, m.begin - pos), pos == 0, out);
    out.push_back(m.id);
    pos = m.end;
  }
  encode_raw(text.substr(pos), pos == 0, out);
  if (add_special_tokens) out.insert(out.end(), template_.suffix.begin(), template_.suffix.end());
  return out;
}

void HfTokenizer::encode_raw(std::string_view text, bool at_start,
                             std::vector<int32_t>& out) const {
  if (text.empty()) return;
  const std::string normalized = normalizer_ ? normalizer_->normalize(text) : std::string(text);
  std::vector<AddedTokenMatcher::Match> matches;
  normalized_tokens_.find_all(normalized, matches);
  const std::string_view n = normalized;
  size_t pos = 0;
  for (const auto& m : matches) {
    encode_normalized(n.substr(pos, m.begin - pos), at_start && pos == 0, out);
    out.push_back(m.id);
    pos = m.end;
  }
  encode_normalized(n.substr(pos), at_start && pos == 0, out);
}

void HfTokenizer::encode_normalized(std::string_view text, bool at_start,
                                    std::vector<int32_t>& out) const {
  if (text.empty()) return;
  for (const HfPiece& piece :
       hf_pre_tokenize(pre_tokenizer_.get(), {std::string(text), at_start})) {
    model_->encode_word(piece.text, out);
  }
}

std::string HfTokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (!valid_id(id) || (skip_special_tokens && special_[id])) continue;
    tokens.push_back(tokens_[id]);
  }
  if (decoder_) decoder_->decode(tokens, false);
  std::string text;
  for (const std::string& t : tokens) text += t;
  return text;
}

std::string HfTokenizer::token_bytes(int32_t id) const {
  if (!valid_id(id)) return std::string();
  std::vector<std::string> tokens = {tokens_[id]};
  if (decoder_) decoder_->decode(tokens, true);
  std::string text;
  for (const std::string& t : tokens) text += t;
  return text;
}

Expected<std::string> read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error("cannot open {}", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (!in.good() && !in.eof()) return make_error("cannot read {}", path);
  return ss.str();
}

}  // namespace

Expected<std::unique_ptr<Tokenizer>> parse_hf_tokenizer(std::string_view tokenizer_json,
                                                        std::string_view config_json) {
  json j = json::parse(tokenizer_json, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return make_error("tokenizer.json is not a JSON object");
  json config = json::object();
  if (!config_json.empty()) {
    config = json::parse(config_json, nullptr, false);
    if (config.is_discarded() || !config.is_object()) {
      return make_error("tokenizer_config.json is not a JSON object");
    }
  }
  try {
    KASSIGN(auto tok, HfTokenizer::create(j, config));
    return std::unique_ptr<Tokenizer>(std::move(tok));
  } catch (const json::exception& e) {
    return make_error("tokenizer.json: {}", e.what());
  }
}

Expected<std::unique_ptr<Tokenizer>> load_hf_tokenizer(const std::string& dir) {
  KASSIGN(std::string text, read_text(dir + "/tokenizer.json"));
  std::string config;
  const std::string config_path = dir + "/tokenizer_config.json";
  if (std::filesystem::exists(config_path)) {
    KASSIGN(config, read_text(config_path));
  }
  auto tok = parse_hf_tokenizer(text, config);
  if (!tok.ok()) return make_error("{}: {}", dir, tok.error().message);
  return tok;
}

}  // namespace kestrel
