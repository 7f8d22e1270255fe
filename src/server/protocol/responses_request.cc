#include "server/protocol/responses_request.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "server/protocol/field_reader.h"

namespace kestrel::server {

namespace {

using nlohmann::json;

// The request keys that mean what they mean in chat and completions requests.
constexpr const char* kSamplingKeys[] = {"temperature",
                                         "top_p",
                                         "top_k",
                                         "min_p",
                                         "presence_penalty",
                                         "frequency_penalty",
                                         "repetition_penalty",
                                         "seed",
                                         "stop",
                                         "stop_token_ids",
                                         "ignore_eos",
                                         "skip_special_tokens",
                                         "spaces_between_special_tokens",
                                         "include_stop_str_in_output",
                                         "logit_bias",
                                         "structured_outputs",
                                         "priority",
                                         "request_id",
                                         "cache_salt",
                                         "kv_transfer_params",
                                         "stream"};

// Echoed in the response exactly as sent; they change nothing else.
constexpr const char* kEchoKeys[] = {"metadata",
                                     "max_tool_calls",
                                     "prompt_cache_key",
                                     "prompt_cache_options",
                                     "prompt_cache_retention",
                                     "safety_identifier",
                                     "user"};

constexpr const char* kIncludable[] = {
    "code_interpreter_call.outputs",  "computer_call_output.output.image_url",
    "file_search_call.results",       "message.input_image.image_url",
    "message.output_text.logprobs",   "reasoning.encrypted_content",
    "web_search_call.action.sources", "web_search_call.results"};

template <typename Range>
bool contains(const Range& r, const std::string& s) {
  return std::find(std::begin(r), std::end(r), s) != std::end(r);
}

// Function tools in the chat-completions form the chat template and tool parsers take.
ParseResult<json> chat_tools(const json& tools) {
  if (!tools.is_array()) return bad_request("tools must be an array of tool objects", "tools");
  json out = json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const json& t = tools[i];
    const std::string where = fmt::format("tools[{}]", i);
    if (!t.is_object() || !t.contains("type") || !t["type"].is_string())
      return bad_request(where + " must be an object with a string type", "tools");
    const std::string type = t["type"].get<std::string>();
    if (type != "function")
      return bad_request(fmt::format("{}: tools of type '{}' are not supported (function tools "
                                     "only; Kestrel runs no hosted tools)",
                                     where, type),
                         "tools");
    if (!t.contains("name") || !t["name"].is_string())
      return bad_request(where + ".name must be a string", "tools");
    json fn = {{"name", t["name"]}};
    if (t.contains("description") && !t["description"].is_null())
      fn["description"] = t["description"];
    fn["parameters"] = t.contains("parameters") && !t["parameters"].is_null()
                           ? t["parameters"]
                           : json{{"type", "object"}, {"properties", json::object()}};
    out.push_back({{"type", "function"}, {"function", std::move(fn)}});
  }
  if (auto e = validate_tools(out)) return *e;
  return out;
}

// tool_choice as vLLM checks it; without tools "auto" and "none" both mean "none".
ParseResult<ToolChoice> read_tool_choice(const json* choice, const json* tools, json& echo) {
  const bool have_tools = tools != nullptr && !tools->empty();
  json value = choice != nullptr ? *choice : json("auto");
  ToolChoice out;
  if (value == "none" || (!have_tools && value == "auto")) {
    echo["tool_choice"] = "none";
    return out;
  }
  echo["tool_choice"] = value;
  if (value == "auto") {
    out.mode = ToolChoice::Mode::kAuto;
    return out;
  }
  if (value == "required") {
    if (!have_tools)
      return bad_request("Tool choice 'required' must be specified with 'tools' parameter.",
                         "tool_choice");
    out.mode = ToolChoice::Mode::kRequired;
    return out;
  }
  if (!value.is_object() || value.value("type", "") != "function")
    return bad_request(
        fmt::format("tool_choice {} is not supported (\"none\", \"auto\", \"required\" or "
                    "{{\"type\": \"function\", \"name\": ...}})",
                    value.dump()),
        "tool_choice");
  const std::string name = value.value("name", "");
  const bool found = have_tools && std::any_of(tools->begin(), tools->end(), [&](const json& t) {
                       return t["function"]["name"] == name;
                     });
  if (name.empty() || !found)
    return bad_request("Tool choice 'function' not found in 'tools' parameter.", "tool_choice");
  out.mode = ToolChoice::Mode::kNamed;
  out.function_name = name;
  return out;
}

// text.format as an output constraint (text: none).
ParseResult<std::optional<OutputConstraint>> read_text_format(const json& text) {
  if (!text.is_object()) return bad_request("text must be an object", "text");
  if (text.contains("verbosity") && !text["verbosity"].is_null())
    return bad_request(
        "text.verbosity is not supported by Kestrel: verbosity hints are not "
        "supported",
        "text");
  const auto format = text.find("format");
  if (format == text.end() || format->is_null()) return std::optional<OutputConstraint>();
  if (!format->is_object() || !format->contains("type") || !(*format)["type"].is_string())
    return bad_request("text.format must be an object with a string type", "text");
  const std::string type = (*format)["type"].get<std::string>();
  OutputConstraint c;
  c.param = "text";
  if (type == "text") return std::optional<OutputConstraint>();
  if (type == "json_object") {
    c.kind = OutputConstraint::Kind::kJsonObject;
    return std::optional(std::move(c));
  }
  if (type != "json_schema")
    return bad_request(fmt::format("text.format type '{}' is not supported (text, json_object, "
                                   "json_schema)",
                                   type),
                       "text");
  const auto schema = format->find("schema");
  if (schema == format->end() || !(schema->is_object() || schema->is_boolean()))
    return bad_request("text.format.schema must be a JSON Schema object", "text");
  if (!format->contains("name") || !(*format)["name"].is_string())
    return bad_request("text.format.name must be a string", "text");
  c.kind = OutputConstraint::Kind::kJsonSchema;
  c.schema = *schema;
  return std::optional(std::move(c));
}

std::optional<ProtocolError> read_include(const json* include, ResponsesRequest& req) {
  if (include == nullptr) return std::nullopt;
  if (!include->is_array()) return type_error("include", "an array of strings");
  for (const json& v : *include) {
    if (!v.is_string() || !contains(kIncludable, v.get<std::string>()))
      return bad_request(fmt::format("include: unknown value {}", v.dump()), "include");
    if (v == "message.output_text.logprobs") req.include_logprobs = true;
  }
  return std::nullopt;
}

std::optional<ProtocolError> read_reasoning(const json* reasoning, ResponsesRequest& req) {
  if (reasoning == nullptr) return std::nullopt;
  if (!reasoning->is_object()) return type_error("reasoning", "an object");
  // summary and generate_summary ask for summaries, which Kestrel's output never has; vLLM
  // ignores them too.
  const auto effort = reasoning->find("effort");
  if (effort == reasoning->end() || effort->is_null()) return std::nullopt;
  static constexpr const char* kEfforts[] = {"none", "minimal", "low", "medium",
                                             "high", "xhigh",   "max"};
  if (!effort->is_string() || !contains(kEfforts, effort->get<std::string>()))
    return bad_request(fmt::format("reasoning.effort {} is not one of none, minimal, low, "
                                   "medium, high, xhigh, max",
                                   effort->dump()),
                       "reasoning");
  req.reasoning_effort = effort->get<std::string>();
  return std::nullopt;
}

// The sampling fields, read with the chat/completions rules from the keys that have them here.
std::optional<ProtocolError> read_sampling(const json& body, FieldReader& reader,
                                           ResponsesRequest& req) {
  json picked = json::object();
  for (const char* key : kSamplingKeys) {
    reader.get(key);
    if (body.contains(key)) picked[key] = body[key];
  }
  std::optional<int64_t> max_output, top_logprobs;
  reader.read_int("max_output_tokens", max_output);
  reader.read_int("top_logprobs", top_logprobs);
  if (reader.failed()) return reader.error();
  FieldReader sampling(picked);
  read_sampling_fields(sampling, req.sampling);
  if (sampling.failed()) return sampling.error();
  if (max_output && *max_output < 1)
    return bad_request(fmt::format("max_output_tokens must be at least 1, got {}.", *max_output),
                       "max_output_tokens");
  req.sampling.max_tokens = max_output;
  if (top_logprobs) {
    if (auto e = check_logprobs_count("top_logprobs", *top_logprobs)) return e;
  }
  if (req.include_logprobs) req.sampling.logprobs = top_logprobs.value_or(0);
  return validate_sampling_fields(req.sampling);
}

}  // namespace

ParseResult<ResponsesRequest> parse_responses_request(const json& body) {
  if (!body.is_object()) return bad_request("request body must be a JSON object");
  FieldReader reader(body);
  ResponsesRequest req;
  reader.read_string("model", req.model);
  reader.read_string("instructions", req.instructions);
  reader.read_string("previous_response_id", req.previous_response_id);
  reader.read_bool("parallel_tool_calls", req.parallel_tool_calls);
  reader.read_bool("include_reasoning", req.include_reasoning);
  reader.read_bool("store", req.store);
  reader.read_bool("background", req.background);
  reader.read_object("chat_template_kwargs", req.chat_template_kwargs);
  std::optional<std::string> truncation, service_tier;
  reader.read_string("truncation", truncation);
  reader.read_string("service_tier", service_tier);
  if (reader.failed()) return reader.error();

  const json* input = reader.get("input");
  if (input == nullptr) return bad_request("input is required", "input");
  if (auto e = append_responses_input(*input, req.input)) return *e;
  if (reader.get("prompt") != nullptr)
    return bad_request("prompt template is not supported", "prompt");
  if (reader.get("conversation") != nullptr)
    return bad_request(
        "conversation is not supported by Kestrel: conversation state lives in "
        "the client (send the history as input, or use previous_response_id)",
        "conversation");
  if (req.background && !req.store)
    return bad_request("background can only be used when `store` is true", "background");
  if (truncation && *truncation != "auto" && *truncation != "disabled")
    return bad_request("truncation must be 'auto' or 'disabled'", "truncation");
  req.truncation_auto = truncation == "auto";

  const json* tools = reader.get("tools");
  if (tools != nullptr && !tools->empty()) {
    auto converted = chat_tools(*tools);
    if (!converted) return converted.error();
    req.tools = std::move(converted).value();
  }
  auto choice =
      read_tool_choice(reader.get("tool_choice"), req.tools ? &*req.tools : nullptr, req.echo);
  if (!choice) return choice.error();
  req.tool_choice = choice.value();

  if (auto e = read_include(reader.get("include"), req)) return *e;
  const json* reasoning = reader.get("reasoning");
  if (auto e = read_reasoning(reasoning, req)) return *e;
  if (auto e = read_sampling(body, reader, req)) return *e;
  const json* text = reader.get("text");
  if (text != nullptr) {
    auto format = read_text_format(*text);
    if (!format) return format.error();
    if (format.value()) {
      if (req.sampling.constraint)
        return bad_request("Cannot specify both structured_outputs and text.format",
                           "structured_outputs");
      req.sampling.constraint = std::move(format).value();
    }
  }

  for (const char* key : kEchoKeys) {
    reader.get(key);
    req.echo[key] = body.contains(key) ? body[key] : json(nullptr);
  }
  req.echo["instructions"] = req.instructions ? json(*req.instructions) : json(nullptr);
  req.echo["previous_response_id"] =
      req.previous_response_id ? json(*req.previous_response_id) : json(nullptr);
  req.echo["reasoning"] = reasoning != nullptr ? *reasoning : json(nullptr);
  req.echo["text"] = text != nullptr ? *text : json(nullptr);
  req.echo["tools"] = tools != nullptr ? *tools : json::array();
  req.echo["service_tier"] = service_tier.value_or("auto");
  req.echo["truncation"] = truncation.value_or("disabled");
  req.echo["parallel_tool_calls"] = req.parallel_tool_calls;
  req.echo["background"] = req.background;
  // Fields of the Responses API that change nothing for a chat model served here.
  for (const char* key : {"stream_options", "context_management"}) reader.get(key);
  if (auto e = check_unread_fields(body, reader.unknown_keys(), Endpoint::kResponses, req.unread))
    return *e;
  return req;
}

}  // namespace kestrel::server
