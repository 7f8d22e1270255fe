#include "server/generation_requests.h"

#include <algorithm>
#include <atomic>
#include <random>

#include <fmt/format.h>
#include <xxhash.h>

#include "base/logging.h"
#include "server/forced_tool_calls.h"
#include "server/protocol/kv_transfer_params.h"
#include "server/structured_output.h"

namespace kestrel::server {

namespace {

uint64_t fresh_seed() {
  static std::atomic<uint64_t> counter{std::random_device{}()};
  return counter.fetch_add(0x9E3779B97F4A7C15ull);
}

std::optional<ProtocolError> check_logprob_limits(const ServingContext& ctx,
                                                  const SamplingFields& s) {
  if (s.logprobs && *s.logprobs > ctx.max_logprobs)
    return bad_request(
        fmt::format("Requested logprobs of {}, which is greater than max allowed: {}", *s.logprobs,
                    ctx.max_logprobs),
        "logprobs");
  if (s.prompt_logprobs && *s.prompt_logprobs > ctx.max_logprobs)
    return bad_request(
        fmt::format("Requested prompt logprobs of {}, which is greater than max allowed: {}",
                    *s.prompt_logprobs, ctx.max_logprobs),
        "prompt_logprobs");
  return std::nullopt;
}

bool in_vocab(const ServingContext& ctx, int64_t id) {
  return id >= 0 && id < ctx.vocab_size;
}

// vLLM's bad_words: each word is encoded alone and after a space (a word inside the text), the
// second kept when it is a different token sequence of the same length.
ParseResult<std::vector<std::vector<int32_t>>> bad_word_sequences(const Tokenizer& tok,
                                                                  const SamplingFields& s) {
  std::vector<std::vector<int32_t>> out;
  for (const std::string& word : s.bad_words) {
    const size_t start = word.find_first_not_of(" \t\n\r\f\v");
    const std::string bare = start == std::string::npos ? "" : word.substr(start);
    std::vector<int32_t> alone = tok.encode(bare, /*add_special_tokens=*/false);
    if (alone.empty())
      return bad_request(fmt::format("bad_words: '{}' encodes to no tokens", word), "bad_words");
    std::vector<int32_t> spaced = tok.encode(" " + bare, /*add_special_tokens=*/false);
    const bool distinct =
        !spaced.empty() && spaced.size() == alone.size() && spaced.front() != alone.front();
    out.push_back(std::move(alone));
    if (distinct) out.push_back(std::move(spaced));
  }
  return out;
}

}  // namespace

ParseResult<LogitsRules> check_sampling(const ServingContext& ctx, const SamplingFields& s) {
  if (auto e = check_logprob_limits(ctx, s)) return *e;
  if (!s.stop.empty() && ctx.tokenizer == nullptr)
    return bad_request("stop strings need a tokenizer, which this model lacks", "stop");
  if (s.priority != 0)
    return bad_request(
        fmt::format("Got priority {} but Priority scheduling is not enabled.", s.priority),
        "priority");
  if (s.kv_transfer_params) {
    auto p = parse_kv_transfer_params(*s.kv_transfer_params);
    if (!p.ok()) return bad_request(p.error().message, "kv_transfer_params");
    if (p->remote_prefill && ctx.engine != nullptr && ctx.engine->kv_backlog_full())
      return ProtocolError{503, "ServiceUnavailableError",
                           "too many requests are waiting for their prompt's KV on this decode "
                           "instance; try another",
                           std::nullopt};
  }
  LogitsRules rules;
  std::vector<int64_t> outside;
  for (const auto& [id, bias] : s.logit_bias) {
    if (!in_vocab(ctx, id)) {
      outside.push_back(id);
      continue;
    }
    rules.logit_bias.push_back({int32_t(id), float(bias)});
  }
  if (!outside.empty())
    return bad_request(fmt::format("token_id(s) [{}] in logit_bias contain out-of-vocab token "
                                   "ids. Vocabulary size: {}",
                                   fmt::join(outside, ", "), ctx.vocab_size),
                       "logit_bias");
  if (s.allowed_token_ids) {
    for (const int64_t id : *s.allowed_token_ids) {
      if (!in_vocab(ctx, id))
        return bad_request("allowed_token_ids contains out-of-vocab token id!",
                           "allowed_token_ids");
      rules.allowed_token_ids.push_back(int32_t(id));
    }
  }
  if (!s.bad_words.empty()) {
    if (ctx.tokenizer == nullptr)
      return bad_request("bad_words need a tokenizer, which this model lacks", "bad_words");
    auto words = bad_word_sequences(*ctx.tokenizer, s);
    if (!words) return words.error();
    rules.bad_words = std::move(words).value();
  }
  return rules;
}

ParseResult<FittedPrompt> fit_prompt(const ServingContext& ctx, const SamplingFields& s,
                                     std::vector<int32_t> ids, std::optional<int64_t> max_tokens) {
  if (s.truncate_prompt_tokens) {
    // -1: as many tokens as leave room for the requested output (at least one).
    int64_t keep = *s.truncate_prompt_tokens;
    if (keep < 0) keep = std::max<int64_t>(ctx.max_model_len - max_tokens.value_or(1), 0);
    if (keep == 0) return bad_request("truncate_prompt_tokens leaves no prompt", "prompt");
    if (keep < int64_t(ids.size())) {
      if (s.truncate_left) {
        ids.erase(ids.begin(), ids.end() - keep);
      } else {
        ids.resize(size_t(keep));
      }
    }
  }
  const auto len = int64_t(ids.size());
  const int64_t out = max_tokens.value_or(std::max<int64_t>(ctx.max_model_len - len, 1));
  if (!fits_context(len, out, ctx.max_model_len))
    return prompt_too_long(len, out, ctx.max_model_len);
  return FittedPrompt{std::move(ids), out};
}

GenerateRequest engine_request(const ServingContext& ctx, const SamplingFields& s,
                               const LogitsRules& rules, std::vector<int32_t> prompt,
                               int64_t max_tokens) {
  GenerateRequest g;
  const SamplingValues v = resolve_sampling_values(s, ctx.sampling_defaults);
  g.engine.prompt_token_ids = std::move(prompt);
  g.engine.sampling.temperature = float(v.temperature);
  g.engine.sampling.top_p = float(v.top_p);
  g.engine.sampling.top_k = int(v.top_k);
  g.engine.sampling.min_p = float(v.min_p);
  g.engine.sampling.presence_penalty = float(v.presence_penalty);
  g.engine.sampling.frequency_penalty = float(v.frequency_penalty);
  g.engine.sampling.repetition_penalty = float(v.repetition_penalty);
  g.engine.sampling.logprobs = s.logprobs ? int(*s.logprobs) : -1;
  g.engine.max_tokens = max_tokens;
  g.engine.min_tokens = std::min(s.min_tokens, max_tokens);
  g.engine.stop_token_ids = s.stop_token_ids;
  g.engine.ignore_eos = s.ignore_eos;
  g.engine.seed = s.seed ? uint64_t(*s.seed) : fresh_seed();
  g.engine.logits_rules = rules;
  if (s.cache_salt) g.engine.cache_keys = {XXH3_64bits(s.cache_salt->data(), s.cache_salt->size())};
  // Checked by check_sampling(); the engine ignores it without a KV connector.
  if (s.kv_transfer_params)
    if (auto p = parse_kv_transfer_params(*s.kv_transfer_params); p.ok()) g.engine.kv_transfer = *p;
  g.output.stop = s.stop;
  g.output.include_stop_str_in_output = s.include_stop_str_in_output;
  g.output.skip_special_tokens = s.skip_special_tokens;
  g.output.detokenize = ctx.tokenizer != nullptr;
  return g;
}

ParseResult<std::shared_ptr<const structured::Grammar>> constraint_grammar(
    const ServingContext& ctx, const OutputConstraint& constraint) {
  if (!ctx.token_trie)
    return bad_request(constraint.param + " needs a tokenizer, which this model lacks",
                       constraint.param);
  auto grammar = output_constraint_grammar(constraint);
  if (!grammar.ok()) return bad_request(grammar.error().message, constraint.param);
  return std::move(grammar).value();
}

std::optional<ProtocolError> constrain_choices(const ServingContext& ctx,
                                               const std::optional<OutputConstraint>& constraint,
                                               SessionSpec& spec) {
  if (!constraint) return std::nullopt;
  auto grammar = constraint_grammar(ctx, *constraint);
  if (!grammar) return grammar.error();
  for (SessionChoice& c : spec.choices)
    c.request.engine.constraint = grammar_constraint(grammar.value(), ctx.token_trie);
  return std::nullopt;
}

ParseResult<std::shared_ptr<const structured::Grammar>> forced_tools_grammar(
    const ServingContext& ctx, const ToolChoice& choice, const nlohmann::json& tools,
    bool parallel) {
  if (!ctx.token_trie) return bad_request("tool calls need a tokenizer", "tools");
  auto grammar = structured::compile_json_schema(forced_tool_schema(choice, tools, parallel));
  if (!grammar.ok())
    return bad_request("the tools' parameters cannot be enforced: " + grammar.error().message,
                       "tools");
  return std::move(grammar).value();
}

SessionSpec session_spec(StreamKind kind, const std::string& model, const SamplingFields& s) {
  SessionSpec spec;
  spec.kind = kind;
  spec.id =
      s.request_id.value_or(make_request_id(kind == StreamKind::kCompletion ? "cmpl" : "chatcmpl"));
  spec.created = unix_time_now();
  spec.model = model;
  spec.stream = s.stream;
  spec.include_usage = s.stream_options && s.stream_options->include_usage;
  spec.continuous_usage = s.stream_options && s.stream_options->continuous_usage_stats;
  spec.logprobs = s.logprobs.has_value();
  spec.tokens_as_ids = s.return_tokens_as_token_ids;
  spec.max_tokens_param = s.max_tokens.value_or(0);
  spec.n = s.n;
  return spec;
}

void log_unread(const UnreadFields& fields, const std::string& request_id) {
  if (!fields.ignored.empty())
    KLOG_INFO("request {}: ignoring fields that change nothing here: {}", request_id,
              fmt::join(fields.ignored, ", "));
  if (!fields.unknown.empty())
    KLOG_WARN("request {}: ignoring unknown fields: {}", request_id,
              fmt::join(fields.unknown, ", "));
}

}  // namespace kestrel::server
