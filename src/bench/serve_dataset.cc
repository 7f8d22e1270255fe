#include "bench/serve_dataset.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <random>
#include <sstream>
#include <string_view>

#include <nlohmann/json.hpp>

namespace kestrel::bench {

namespace {

// Random prompts whose text does not re-encode to the wanted length are reworked this many times
// before giving up; a handful of rounds is normally enough.
constexpr int kMaxFitRounds = 200;

// vLLM's ShareGPT filter (is_valid_sequence).
constexpr int64_t kMinSequenceLen = 4;
constexpr int64_t kMaxPromptLen = 1024;
constexpr int64_t kMaxTotalLen = 2048;

bool is_continuation(unsigned char c) {
  return (c & 0xC0) == 0x80;
}

// Replaces each maximal ill-formed UTF-8 subsequence by U+FFFD, as Python's
// decode(errors="replace") does, so prompts can travel in JSON.
std::string to_valid_utf8(std::string_view in) {
  std::string out;
  out.reserve(in.size());
  size_t i = 0;
  while (i < in.size()) {
    const auto c = static_cast<unsigned char>(in[i]);
    size_t len = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c < 0x80) {
      len = 1;
    } else if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;  // no overlong forms
      if (c == 0xED) hi = 0x9F;  // no surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
    }
    size_t good = len == 0 ? 0 : 1;
    while (good > 0 && good < len && i + good < in.size()) {
      const auto b = static_cast<unsigned char>(in[i + good]);
      const bool ok = good == 1 ? (b >= lo && b <= hi) : is_continuation(b);
      if (!ok) break;
      ++good;
    }
    if (len > 0 && good == len) {
      out.append(in.substr(i, len));
      i += len;
    } else {
      out.append("\xEF\xBF\xBD");
      i += std::max<size_t>(good, 1);
    }
  }
  return out;
}

struct FittedText {
  std::string text;
  std::vector<int32_t> ids;
};

class PromptFitter {
 public:
  PromptFitter(TokenCodec& tokenizer, const std::vector<int32_t>& allowed, std::mt19937_64& rng)
      : tok_(tokenizer), allowed_(allowed), rng_(rng), pick_(0, allowed.size() - 1) {}

  int32_t random_id() { return allowed_[pick_(rng_)]; }

  // Finds text T such that encode(head.text + T) is head.ids followed by exactly `tail_len` ids,
  // starting from the ids `tail`. Text and ids do not round-trip (decoded neighbours may merge
  // or split when re-encoded), so each round decodes, re-encodes and then trims the surplus or
  // extends with fresh random ids; if the join changed the head's ids, the first tail id is
  // redrawn. Exactness holds because the returned ids ARE the re-encoding of the returned text.
  Expected<FittedText> fit(const FittedText& head, std::vector<int32_t> tail, size_t tail_len) {
    const size_t head_len = head.ids.size();
    for (int round = 0; round < kMaxFitRounds; ++round) {
      KASSIGN(const std::string decoded, tok_.decode(tail));
      std::string text = head.text + to_valid_utf8(decoded);
      KASSIGN(std::vector<int32_t> ids, tok_.encode(text, false));
      if (ids.size() < head_len || !std::equal(head.ids.begin(), head.ids.end(), ids.begin())) {
        if (tail.empty()) tail.push_back(random_id());
        tail[0] = random_id();
        continue;
      }
      if (ids.size() == head_len + tail_len) return FittedText{std::move(text), std::move(ids)};
      tail.assign(ids.begin() + static_cast<ptrdiff_t>(head_len), ids.end());
      if (tail.size() > tail_len) tail.resize(tail_len);
      while (tail.size() < tail_len) tail.push_back(random_id());
    }
    return make_error("could not build a prompt that encodes to exactly {} tokens in {} tries",
                      head_len + tail_len, kMaxFitRounds);
  }

 private:
  TokenCodec& tok_;
  const std::vector<int32_t>& allowed_;
  std::mt19937_64& rng_;
  std::uniform_int_distribution<size_t> pick_;
};

// Number of special tokens encode(..., add_special_tokens=true) adds (vLLM's
// num_special_tokens_to_add).
Expected<int64_t> num_added_special_tokens(TokenCodec& tokenizer) {
  KASSIGN(const std::vector<int32_t> ids, tokenizer.encode("", true));
  return static_cast<int64_t>(ids.size());
}

}  // namespace

Expected<std::vector<SampleRequest>> random_dataset(TokenCodec& tokenizer,
                                                    const RandomDatasetSpec& spec) {
  if (spec.num_prompts < 1) return make_error("--num-prompts must be at least 1");
  if (spec.input_len < 0) return make_error("--random-input-len must not be negative");
  if (spec.output_len < 0) return make_error("--random-output-len must not be negative");
  if (spec.prefix_len < 0) return make_error("--random-prefix-len must not be negative");
  if (!(spec.range_ratio >= 0.0 && spec.range_ratio < 1.0))
    return make_error("--random-range-ratio must be in [0, 1), got {}", spec.range_ratio);

  const double r = spec.range_ratio;
  KASSIGN(const int64_t added, num_added_special_tokens(tokenizer));
  const int64_t real_input_len = std::max<int64_t>(0, spec.input_len - added);
  const auto in_lo = static_cast<int64_t>(std::floor(double(real_input_len) * (1.0 - r)));
  const auto in_hi = static_cast<int64_t>(std::ceil(double(real_input_len) * (1.0 + r)));
  const auto out_lo =
      std::max<int64_t>(1, static_cast<int64_t>(std::floor(double(spec.output_len) * (1.0 - r))));
  const auto out_hi =
      std::max<int64_t>(1, static_cast<int64_t>(std::ceil(double(spec.output_len) * (1.0 + r))));
  if (spec.prefix_len + in_lo < 1)
    return make_error(
        "--random-input-len {} is too small: less the special tokens the tokenizer adds and with "
        "range ratio {}, a prompt could have no tokens at all",
        spec.input_len, r);

  KASSIGN(const std::vector<int32_t> allowed, tokenizer.ordinary_ids());
  if (allowed.empty()) return make_error("the tokenizer has no ordinary tokens to draw from");

  std::mt19937_64 rng(spec.seed);
  const size_t n = static_cast<size_t>(spec.num_prompts);
  std::vector<int64_t> input_lens(n), output_lens(n);
  std::vector<size_t> offsets(n);
  std::uniform_int_distribution<int64_t> in_dist(in_lo, in_hi), out_dist(out_lo, out_hi);
  std::uniform_int_distribution<size_t> offset_dist(0, allowed.size() - 1);
  for (int64_t& len : input_lens) len = in_dist(rng);
  for (int64_t& len : output_lens) len = out_dist(rng);
  for (size_t& off : offsets) off = offset_dist(rng);

  PromptFitter fitter(tokenizer, allowed, rng);
  const auto prefix_len = static_cast<size_t>(spec.prefix_len);
  std::vector<int32_t> prefix_draw(prefix_len);
  for (int32_t& id : prefix_draw) id = fitter.random_id();
  KASSIGN(const FittedText prefix, fitter.fit(FittedText{}, std::move(prefix_draw), prefix_len));

  std::vector<SampleRequest> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    // As vLLM: a run of consecutive vocabulary entries from a random offset.
    const auto len = static_cast<size_t>(input_lens[i]);
    std::vector<int32_t> tail(len);
    for (size_t j = 0; j < len; ++j) tail[j] = allowed[(offsets[i] + i + j) % allowed.size()];
    KASSIGN(FittedText fitted, fitter.fit(prefix, std::move(tail), len));
    SampleRequest req;
    req.prompt = std::move(fitted.text);
    req.prompt_ids = std::move(fitted.ids);
    req.prompt_len = static_cast<int64_t>(req.prompt_ids.size());
    req.expected_output_len = output_lens[i];
    out.push_back(std::move(req));
  }
  return out;
}

namespace {

Expected<nlohmann::json> read_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error("cannot open dataset file '{}'", path);
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) return make_error("cannot read dataset file '{}'", path);
  nlohmann::json doc = nlohmann::json::parse(buf.str(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return make_error("dataset file '{}' is not valid JSON", path);
  return doc;
}

// The text of conversation turn `turn`, or an error naming the entry.
Expected<std::string> turn_text(const nlohmann::json& conversations, size_t entry, size_t turn) {
  const nlohmann::json& t = conversations[turn];
  if (!t.is_object() || !t.contains("value") || !t["value"].is_string())
    return make_error("ShareGPT entry {}: turn {} has no string \"value\"", entry, turn);
  return t["value"].get<std::string>();
}

}  // namespace

Expected<std::vector<SampleRequest>> sharegpt_dataset(TokenCodec& tokenizer,
                                                      const std::string& path, int64_t num_prompts,
                                                      uint64_t seed,
                                                      std::optional<int64_t> output_len_override) {
  if (num_prompts < 1) return make_error("--num-prompts must be at least 1");
  if (output_len_override && *output_len_override < 1)
    return make_error("the output length override must be at least 1");
  KASSIGN(const nlohmann::json doc, read_json_file(path));
  if (!doc.is_array()) return make_error("ShareGPT file '{}' must hold a JSON list", path);

  std::vector<size_t> usable;  // entries with at least two turns
  for (size_t i = 0; i < doc.size(); ++i) {
    const nlohmann::json& e = doc[i];
    if (e.is_object() && e.contains("conversations") && e["conversations"].is_array() &&
        e["conversations"].size() >= 2)
      usable.push_back(i);
  }
  std::mt19937_64 rng(seed);
  std::shuffle(usable.begin(), usable.end(), rng);

  std::vector<SampleRequest> out;
  for (size_t idx : usable) {
    if (static_cast<int64_t>(out.size()) >= num_prompts) break;
    const nlohmann::json& conv = doc[idx]["conversations"];
    KASSIGN(std::string prompt, turn_text(conv, idx, 0));
    KASSIGN(const std::string completion, turn_text(conv, idx, 1));
    KASSIGN(std::vector<int32_t> ids, tokenizer.encode(prompt, true));
    const auto prompt_len = static_cast<int64_t>(ids.size());
    int64_t output_len = 0;
    if (output_len_override) {
      output_len = *output_len_override;
    } else {
      KASSIGN(const std::vector<int32_t> out_ids, tokenizer.encode(completion, true));
      output_len = static_cast<int64_t>(out_ids.size());
    }
    if (prompt_len < kMinSequenceLen || (!output_len_override && output_len < kMinSequenceLen) ||
        prompt_len > kMaxPromptLen || prompt_len + output_len > kMaxTotalLen)
      continue;
    out.push_back(SampleRequest{std::move(prompt), std::move(ids), prompt_len, output_len});
  }
  if (out.empty())
    return make_error("ShareGPT file '{}' has no conversation that passes the length filters",
                      path);
  std::uniform_int_distribution<size_t> pick(0, out.size() - 1);
  while (static_cast<int64_t>(out.size()) < num_prompts) {
    SampleRequest copy = out[pick(rng)];
    out.push_back(std::move(copy));
  }
  return out;
}

}  // namespace kestrel::bench
