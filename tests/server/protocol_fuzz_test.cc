// Robustness: randomly mutated request bodies never make a parser throw; every rejection is a
// 400 ProtocolError whose body serialises.
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "server/protocol/chat_request.h"
#include "server/protocol/completion_request.h"
#include "server/protocol/responses_request.h"
#include "server/protocol/tokenize_request.h"

namespace kestrel::server {
namespace {

using nlohmann::json;

// Field names the parsers know, so mutations often hit real code paths.
const std::vector<std::string> kKeys = {"model",
                                        "prompt",
                                        "messages",
                                        "role",
                                        "content",
                                        "type",
                                        "text",
                                        "tools",
                                        "tool_choice",
                                        "function",
                                        "name",
                                        "arguments",
                                        "tool_calls",
                                        "temperature",
                                        "top_p",
                                        "top_k",
                                        "min_p",
                                        "n",
                                        "max_tokens",
                                        "max_completion_tokens",
                                        "min_tokens",
                                        "stop",
                                        "stop_token_ids",
                                        "seed",
                                        "logprobs",
                                        "top_logprobs",
                                        "prompt_logprobs",
                                        "echo",
                                        "suffix",
                                        "best_of",
                                        "stream",
                                        "stream_options",
                                        "include_usage",
                                        "response_format",
                                        "json_schema",
                                        "chat_template_kwargs",
                                        "add_generation_prompt",
                                        "continue_final_message",
                                        "documents",
                                        "tokens",
                                        "kv_transfer_params",
                                        "presence_penalty",
                                        "repetition_penalty",
                                        "logit_bias",
                                        "allowed_token_ids",
                                        "bad_words",
                                        "structured_outputs",
                                        "regex",
                                        "choice",
                                        "grammar",
                                        "json",
                                        "input",
                                        "instructions",
                                        "call_id",
                                        "output",
                                        "function_call",
                                        "function_call_output",
                                        "reasoning",
                                        "max_output_tokens",
                                        "include",
                                        "store",
                                        "background",
                                        "truncation",
                                        "unknown_field"};

std::vector<json> seeds() {
  return {
      json::parse(R"({"model":"m","prompt":"Hello","max_tokens":8,"temperature":0.7,
                      "stop":["\n"],"logprobs":2,"stream":true,
                      "stream_options":{"include_usage":true}})"),
      json::parse(R"({"prompt":[[1,2,3],[4]],"echo":true,"max_tokens":0,"n":2,"best_of":2,
                      "seed":42,"top_k":-1})"),
      json::parse(R"({"model":"m","messages":[{"role":"system","content":"s"},
                      {"role":"user","content":[{"type":"text","text":"hi"}]},
                      {"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function",
                       "function":{"name":"f","arguments":"{}"}}]},
                      {"role":"tool","tool_call_id":"c","content":"ok"}],
                      "tools":[{"type":"function","function":{"name":"f","parameters":{}}}],
                      "tool_choice":{"type":"function","function":{"name":"f"}},
                      "logprobs":true,"top_logprobs":3,"max_completion_tokens":20,
                      "response_format":{"type":"json_schema","json_schema":{"name":"x"}},
                      "chat_template_kwargs":{"enable_thinking":false}})"),
      json::parse(R"({"messages":[{"role":"user","content":"x"}],"add_generation_prompt":false,
                      "continue_final_message":true,"tokens":[1,2,3]})"),
      json::parse(R"({"prompt":"x","logit_bias":{"7":-100},"allowed_token_ids":[1,2],
                      "bad_words":["a"],"structured_outputs":{"choice":["a","b"]}})"),
      json::parse(R"({"model":"m","instructions":"be brief","input":[
                      {"role":"user","content":[{"type":"input_text","text":"hi"}]},
                      {"type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":"r"}]},
                      {"type":"function_call","call_id":"c","name":"f","arguments":"{}"},
                      {"type":"function_call_output","call_id":"c","output":"ok"}],
                      "tools":[{"type":"function","name":"f","parameters":{}}],
                      "tool_choice":"auto","max_output_tokens":10,"stream":true,
                      "text":{"format":{"type":"json_schema","name":"x","schema":{}}},
                      "include":["message.output_text.logprobs"],"top_logprobs":2,
                      "reasoning":{"effort":"low"},"store":true,"truncation":"auto"})"),
  };
}

class Mutator {
 public:
  explicit Mutator(uint32_t seed) : rng_(seed) {}

  int below(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }

  json random_scalar() {
    switch (below(9)) {
      case 0:
        return nullptr;
      case 1:
        return below(2) == 0;
      case 2:
        return below(41) - 20;
      case 3:
        return static_cast<int64_t>(rng_());  // large, either sign
      case 4:
        return std::uniform_real_distribution<double>(-3.0, 3.0)(rng_);
      case 5:
        return below(2) ? 1e308 : -0.0;
      case 6:
        return std::string(static_cast<size_t>(below(4)), 'a' + below(26));
      case 7:
        return kKeys[below(static_cast<int>(kKeys.size()))];
      default:
        return "\xC3\xA9\xE4\xB8\xAD";
    }
  }

  json random_value(int depth) {
    if (depth > 2 || below(3) != 0) return random_scalar();
    if (below(2) == 0) {
      json array = json::array();
      for (int i = below(4); i > 0; --i) array.push_back(random_value(depth + 1));
      return array;
    }
    json object = json::object();
    for (int i = below(4); i > 0; --i) {
      object[kKeys[below(static_cast<int>(kKeys.size()))]] = random_value(depth + 1);
    }
    return object;
  }

  // Applies one random edit somewhere inside `node`.
  void mutate(json& node, int depth = 0) {
    const bool container = node.is_object() || node.is_array();
    if (container && !node.empty() && depth < 6 && below(3) != 0) {
      auto it = node.begin();
      std::advance(it, below(static_cast<int>(node.size())));
      mutate(*it, depth + 1);
      return;
    }
    switch (below(5)) {
      case 0:
        node = random_value(0);
        break;
      case 1:
        if (node.is_object() && !node.empty()) {
          auto it = node.begin();
          std::advance(it, below(static_cast<int>(node.size())));
          node.erase(it);
        } else if (node.is_array() && !node.empty()) {
          node.erase(node.begin() + below(static_cast<int>(node.size())));
        }
        break;
      case 2:
        if (node.is_object()) node[kKeys[below(static_cast<int>(kKeys.size()))]] = random_value(0);
        if (node.is_array()) node.push_back(random_value(0));
        break;
      case 3:
        node = json::array({node});
        break;
      default:
        node = random_scalar();
        break;
    }
  }

  // Flips, inserts or deletes a few bytes of the serialised body.
  std::string mutate_text(std::string text) {
    for (int edits = 1 + below(3); edits > 0 && !text.empty(); --edits) {
      const size_t pos = static_cast<size_t>(below(static_cast<int>(text.size())));
      switch (below(3)) {
        case 0:
          text[pos] = static_cast<char>(below(256));
          break;
        case 1:
          text.insert(pos, 1, "{}[],:\"0-e."[below(11)]);
          break;
        default:
          text.erase(pos, 1);
          break;
      }
    }
    return text;
  }

 private:
  std::mt19937 rng_;
};

struct Tally {
  int accepted = 0;
  int rejected = 0;
};

template <typename T>
void check(const ParseResult<T>& result, Tally& tally) {
  if (result.ok()) {
    ++tally.accepted;
    return;
  }
  ++tally.rejected;
  const ProtocolError& e = result.error();
  EXPECT_EQ(e.code, 400);
  EXPECT_FALSE(e.message.empty());
  EXPECT_NO_THROW((void)error_body(e).dump());
}

void run_all_parsers(const json& body, Tally& tally) {
  EXPECT_NO_THROW({
    const auto completion = parse_completion_request(body);
    check(completion, tally);
    if (completion.ok()) {
      EXPECT_FALSE(completion.value().prompts.empty());
      // Unset only for an explicit null (the rest of the context).
      const auto mt = body.is_object() ? body.find("max_tokens") : body.end();
      EXPECT_EQ(completion.value().sampling.max_tokens.has_value(),
                !(body.is_object() && mt != body.end() && mt->is_null()));
    }
    const auto chat = parse_chat_request(body);
    check(chat, tally);
    if (chat.ok()) {
      EXPECT_TRUE(chat.value().messages.is_array());
    }
    check(parse_tokenize_request(body), tally);
    check(parse_detokenize_request(body), tally);
    check(parse_responses_request(body), tally);
  }) << body.dump(-1, ' ', false, json::error_handler_t::replace);
}

TEST(ProtocolFuzz, MutatedBodiesNeverThrow) {
  Mutator mutator(20261130);
  const std::vector<json> bases = seeds();
  Tally tally;
  int bodies = 0;
  while (bodies < 2000) {
    json body = bases[static_cast<size_t>(mutator.below(static_cast<int>(bases.size())))];
    if (mutator.below(4) == 0) {
      // Byte-level damage, kept only when it still parses (the HTTP layer answers the rest).
      const json parsed = json::parse(mutator.mutate_text(body.dump()), nullptr,
                                      /*allow_exceptions=*/false);
      if (parsed.is_discarded()) continue;
      body = parsed;
    } else {
      for (int edits = 1 + mutator.below(3); edits > 0; --edits) mutator.mutate(body);
    }
    run_all_parsers(body, tally);
    ++bodies;
  }
  // Both paths must have been exercised for the test to mean anything.
  EXPECT_GT(tally.accepted, 200);
  EXPECT_GT(tally.rejected, 200);
}

}  // namespace
}  // namespace kestrel::server
