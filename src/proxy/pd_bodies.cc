#include "proxy/pd_bodies.h"

#include <algorithm>

namespace kestrel::proxy {

Json prefill_body(const Json& client) {
  Json body = client;
  body["stream"] = false;
  body["max_tokens"] = 1;
  body["min_tokens"] = 1;
  if (body.contains("max_completion_tokens")) body["max_completion_tokens"] = 1;
  body.erase("stream_options");
  body["kv_transfer_params"] = Json{{"do_remote_decode", true},    {"do_remote_prefill", false},
                                    {"remote_engine_id", nullptr}, {"remote_block_ids", nullptr},
                                    {"remote_host", nullptr},      {"remote_port", nullptr}};
  return body;
}

Json decode_body(const Json& client, const Json& kv_transfer_params, bool* usage_forced) {
  Json body = client;
  body["kv_transfer_params"] = kv_transfer_params;
  *usage_forced = false;
  if (body.value("stream", false)) {
    Json& options = body["stream_options"];
    if (!options.is_object()) options = Json::object();
    if (!options.value("include_usage", false)) {
      options["include_usage"] = true;
      *usage_forced = true;
    }
  }
  return body;
}

namespace {

int64_t text_tokens(const Json& v) {
  if (v.is_string()) return int64_t(v.get_ref<const std::string&>().size() + 3) / 4;
  if (v.is_array()) {
    int64_t n = 0;
    for (const Json& e : v) n += e.is_number_integer() ? 1 : text_tokens(e);
    return n;
  }
  if (v.is_object()) {
    int64_t n = 0;
    for (const char* key : {"content", "text"})
      if (v.contains(key)) n += text_tokens(v[key]);
    return n;
  }
  return 0;
}

}  // namespace

int64_t estimate_prompt_tokens(const Json& body) {
  if (body.contains("prompt")) return std::max<int64_t>(1, text_tokens(body["prompt"]));
  if (body.contains("messages")) return std::max<int64_t>(1, text_tokens(body["messages"]));
  return 1;
}

int64_t max_output_tokens(const Json& body, int64_t fallback) {
  for (const char* key : {"max_completion_tokens", "max_tokens"})
    if (body.contains(key) && body[key].is_number_integer()) return body[key].get<int64_t>();
  return fallback;
}

std::optional<Json> continuation_body(const Json& client, ApiKind kind,
                                      const std::string& generated, int64_t generated_tokens) {
  Json body = client;
  if (kind == ApiKind::kCompletion) {
    Json& prompt = body["prompt"];
    if (prompt.is_array() && prompt.size() == 1 && prompt[0].is_string()) prompt = prompt[0];
    if (!prompt.is_string()) return std::nullopt;
    prompt = prompt.get<std::string>() + generated;
  } else {
    Json& messages = body["messages"];
    if (!messages.is_array()) return std::nullopt;
    const bool continuing =
        body.value("continue_final_message", false) && !messages.empty() &&
        messages.back().is_object() && messages.back().value("role", "") == "assistant" &&
        messages.back().contains("content") && messages.back()["content"].is_string();
    if (continuing) {
      messages.back()["content"] = messages.back()["content"].get<std::string>() + generated;
    } else {
      messages.push_back(Json{{"role", "assistant"}, {"content", generated}});
    }
    body["continue_final_message"] = true;
    body["add_generation_prompt"] = false;
  }
  for (const char* key : {"max_completion_tokens", "max_tokens"})
    if (body.contains(key) && body[key].is_number_integer())
      body[key] = std::max<int64_t>(1, body[key].get<int64_t>() - generated_tokens);
  if (body.contains("min_tokens") && body["min_tokens"].is_number_integer())
    body["min_tokens"] = std::max<int64_t>(0, body["min_tokens"].get<int64_t>() - generated_tokens);
  return body;
}

std::string choice_text(const Json& choice, ApiKind kind) {
  if (!choice.is_object()) return "";
  const Json* holder = &choice;
  if (kind == ApiKind::kChat) {
    const char* key = choice.contains("delta") ? "delta" : "message";
    if (!choice.contains(key) || !choice[key].is_object()) return "";
    holder = &choice[key];
  }
  const char* field = kind == ApiKind::kChat ? "content" : "text";
  if (!holder->contains(field) || !(*holder)[field].is_string()) return "";
  return (*holder)[field].get<std::string>();
}

bool is_recomputed(const Json& response) {
  if (!response.is_object() || !response.contains("choices")) return false;
  const Json& choices = response["choices"];
  if (!choices.is_array() || choices.empty() || !choices[0].is_object()) return false;
  const Json& choice = choices[0];
  return choice.contains("stop_reason") && choice["stop_reason"].is_string() &&
         choice["stop_reason"].get<std::string>() == "recomputed";
}

void patch_cached_tokens(Json& response, int64_t cached) {
  if (!response.is_object() || !response.contains("usage") || !response["usage"].is_object())
    return;
  Json& usage = response["usage"];
  Json& details = usage["prompt_tokens_details"];
  if (!details.is_object()) details = Json::object();
  details["cached_tokens"] = cached;
}

int64_t cached_tokens(const Json& response) {
  if (!response.is_object() || !response.contains("usage")) return 0;
  const Json& usage = response["usage"];
  if (!usage.is_object() || !usage.contains("prompt_tokens_details")) return 0;
  const Json& details = usage["prompt_tokens_details"];
  if (!details.is_object() || !details.contains("cached_tokens") ||
      !details["cached_tokens"].is_number_integer())
    return 0;
  return details["cached_tokens"].get<int64_t>();
}

}  // namespace kestrel::proxy
