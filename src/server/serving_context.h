// server/serving_context.h — what the OpenAI routes share: the engine, the tokenizer and chat
// template, the served model names and the request defaults. Built once at start-up; read-only
// afterwards except `ready`.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/task_pool.h"
#include "chat/chat_template.h"
#include "chat/deepseek_encoding.h"
#include "engine/engine_client.h"
#include "server/metrics.h"
#include "server/protocol/sampling_fields.h"
#include "server/responses_store.h"
#include "structured/token_trie.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::server {

struct ServingContext {
  EngineClient* engine = nullptr;
  const Tokenizer* tokenizer = nullptr;  // null: token-id prompts only, no text out
  std::optional<chat::ChatTemplate> chat_template;
  std::string chat_template_missing;  // why there is none, for the 400 of chat requests
  // --tokenizer-mode deepseek_v32 / deepseek_v4: chat prompts come from the model's native
  // encoder instead of any chat template (the request's too), as under vLLM.
  std::optional<chat::DeepSeekEncoding> deepseek_encoding;
  nlohmann::json default_chat_template_kwargs = nlohmann::json::object();
  std::vector<std::string> served_model_names;  // the first is the default
  std::string model_root;                       // the --model path, /v1/models "root"
  int64_t max_model_len = 0;
  int64_t vocab_size = 0;
  SamplingValues sampling_defaults;  // generation_config.json, as vLLM's --generation-config auto
  int64_t max_logprobs = 20;
  std::optional<std::string> api_key;
  std::string reasoning_parser;  // --reasoning-parser; empty: reasoning stays in the content
  std::string tool_call_parser;  // --tool-call-parser; empty: no tool-call parsing
  bool enable_auto_tool_choice = false;
  // Every token's bytes, for structured-output grammars; null without a tokenizer.
  std::shared_ptr<const structured::TokenTrie> token_trie;
  ServerMetrics* metrics = nullptr;
  // The Responses API's store (null: off, as vLLM without VLLM_ENABLE_RESPONSES_API_STORE=1).
  ResponsesStore* responses_store = nullptr;
  // Request workers: route handlers (parsing, chat templates, tokenizing, grammar compilation)
  // and sessions' answers (detokenized text through the reasoning and tool parsers into JSON)
  // run here, off the HTTP I/O threads and the engine client's output thread. Null: inline.
  TaskPool* workers = nullptr;
  int64_t created = 0;  // start-up time, /v1/models "created"
  std::atomic<bool> ready{false};
};

// Runs `task` on `workers`, or at once on this thread when there are none.
inline void run_on_workers(TaskPool* workers, std::function<void()> task) {
  if (workers != nullptr) return workers->post(std::move(task));
  task();
}

}  // namespace kestrel::server
