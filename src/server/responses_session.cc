#include "server/responses_session.h"

#include <mutex>
#include <utility>
#include <vector>

#include "base/logging.h"
#include "server/forced_tool_calls.h"
#include "server/generation_session.h"
#include "server/protocol/protocol_error.h"
#include "server/request_timing.h"
#include "server/responses_store.h"

namespace kestrel::server {

namespace {

using ojson = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

std::string item_id(const char* prefix) {
  return random_hex_id(std::string(prefix) + "_", 16);
}

class ResponsesSession : public std::enable_shared_from_this<ResponsesSession> {
 public:
  ResponsesSession(ServingContext& ctx, std::shared_ptr<Responder> responder, ResponsesSpec spec)
      : ctx_(ctx), responder_(std::move(responder)), spec_(std::move(spec)) {}

  void start() {
    arrival_ = Clock::now();
    auto stream = ctx_.engine->add_request(spec_.request);
    if (!stream.ok()) {
      const ProtocolError e = ctx_.engine->stats().dead ? internal_error("the engine has failed")
                                                        : bad_request(stream.error().message);
      responder_->respond(e.code, "application/json", error_body(e).dump());
      return;
    }
    stream_ = *stream;
    self_ = shared_from_this();
    std::weak_ptr<ResponsesSession> weak = self_;
    if (spec_.background) {
      ResponseHeader queued = spec_.header;
      queued.status = "queued";
      const ojson object = response_object(queued, ojson::array(), std::nullopt);
      EngineClient* engine = ctx_.engine;
      const std::string id = stream_->id();
      ctx_.responses_store->put(spec_.header.id, object, spec_.messages,
                                [engine, id] { engine->abort(id); });
      responder_->respond(200, "application/json", object.dump());
    } else {
      if (spec_.stream) {
        responder_->start_stream(200, "text/event-stream",
                                 {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}});
        const ojson object = response_object(spec_.header, ojson::array(), std::nullopt);
        emit("response.created", {{"response", object}});
        emit("response.in_progress", {{"response", object}});
      }
      responder_->on_disconnect([weak] {
        if (auto self = weak.lock()) self->ctx_.engine->abort(self->stream_->id());
      });
    }
    stream_->set_notify([workers = ctx_.workers, weak] {
      // Called on the engine client's output thread, which must not wait on parsers or JSON.
      run_on_workers(workers, [weak] {
        if (auto self = weak.lock()) self->on_output();
      });
    });
  }

 private:
  enum class Kind { kNone, kReasoning, kMessage, kCall };

  // The item being streamed; closed items are in output_.
  struct OpenItem {
    Kind kind = Kind::kNone;
    std::string id;
    std::string text;  // reasoning or message text
    ToolCallInfo call;
    std::vector<TokenLogprobInfo> logprobs;
  };

  void on_output() {
    std::lock_guard lock(mu_);
    while (!done_) {
      std::optional<RequestOutput> out = stream_->try_next();
      if (!out) break;
      handle(std::move(*out));
    }
  }

  void handle(RequestOutput out) {
    timer_.on_output(!out.token_ids.empty());
    std::string text = std::move(out.text);
    std::vector<TokenLogprobInfo> infos;
    if (spec_.logprobs)
      for (const TokenLogprobs& t : out.logprobs)
        infos.push_back(token_logprob_info(ctx_.tokenizer, t));
    {
      RequestOutput piece = out;
      piece.logprobs.clear();
      piece.prompt_logprobs.clear();
      meta_.merge(std::move(piece));
    }
    std::string reasoning;
    if (spec_.reasoning) {
      chat::ReasoningSplit split = chat::feed_reasoning(*spec_.reasoning, text, out.finished());
      text = std::move(split.content);
      if (spec_.include_reasoning) reasoning = std::move(split.reasoning);
    }
    reasoning_ += reasoning;
    content_ += text;
    logprobs_.insert(logprobs_.end(), infos.begin(), infos.end());
    if (out.finish_reason == FinishReason::kError) return fail(out.error, out.invalid_request);
    if (spec_.stream) stream_delta(reasoning, text, infos, out.finished());
    if (out.finished()) finish();
  }

  // --- streaming -------------------------------------------------------------------------------

  void emit(const std::string& type, ojson payload) {
    responder_->send_chunk(response_event(type, std::move(payload), sequence_++));
  }

  int64_t open_index() const { return int64_t(output_.size()); }

  void open(Kind kind, ToolCallInfo call = {}) {
    if (open_.kind == kind && kind != Kind::kCall) return;
    close("completed");
    open_ = OpenItem{kind, "", "", std::move(call), {}};
    ojson item;
    if (kind == Kind::kReasoning) {
      open_.id = item_id("rs");
      item = reasoning_item(open_.id, nullptr, "in_progress");
    } else if (kind == Kind::kMessage) {
      open_.id = item_id("msg");
      item = message_item(open_.id, ojson::array(), "in_progress");
    } else {
      open_.id = item_id("fc");
      item = function_call_item(open_.id, open_.call, "in_progress");
    }
    emit("response.output_item.added", {{"item", item}, {"output_index", open_index()}});
    if (kind == Kind::kCall) return;
    const ojson part =
        kind == Kind::kReasoning ? reasoning_text_part("") : output_text_part("", ojson::array());
    emit("response.content_part.added", {{"content_index", 0},
                                         {"item_id", open_.id},
                                         {"output_index", open_index()},
                                         {"part", part}});
  }

  void close(const std::string& status) {
    ojson item;
    switch (open_.kind) {
      case Kind::kNone:
        return;
      case Kind::kReasoning: {
        emit("response.reasoning_text.done", {{"content_index", 0},
                                              {"item_id", open_.id},
                                              {"output_index", open_index()},
                                              {"text", sanitize_utf8(open_.text)}});
        emit("response.content_part.done", {{"content_index", 0},
                                            {"item_id", open_.id},
                                            {"output_index", open_index()},
                                            {"part", reasoning_text_part(open_.text)}});
        item = reasoning_item(open_.id, &open_.text, status);
        break;
      }
      case Kind::kMessage: {
        const ojson part = output_text_part(
            open_.text, spec_.logprobs ? output_text_logprobs(open_.logprobs) : ojson(nullptr));
        emit("response.output_text.done", {{"content_index", 0},
                                           {"item_id", open_.id},
                                           {"logprobs", ojson::array()},
                                           {"output_index", open_index()},
                                           {"text", sanitize_utf8(open_.text)}});
        emit("response.content_part.done", {{"content_index", 0},
                                            {"item_id", open_.id},
                                            {"output_index", open_index()},
                                            {"part", part}});
        item = message_item(open_.id, ojson::array({part}), status);
        break;
      }
      case Kind::kCall: {
        emit("response.function_call_arguments.done",
             {{"arguments", sanitize_utf8(open_.call.arguments)},
              {"item_id", open_.id},
              {"output_index", open_index()},
              {"name", open_.call.name}});
        item = function_call_item(open_.id, open_.call, status);
        break;
      }
    }
    emit("response.output_item.done", {{"item", item}, {"output_index", open_index()}});
    output_.push_back(std::move(item));
    open_ = OpenItem{};
  }

  void stream_text(const std::string& text, const std::vector<TokenLogprobInfo>& infos) {
    if (text.empty()) return;
    open(Kind::kMessage);
    open_.text += text;
    open_.logprobs.insert(open_.logprobs.end(), infos.begin(), infos.end());
    emit("response.output_text.delta",
         {{"content_index", 0},
          {"delta", sanitize_utf8(text)},
          {"item_id", open_.id},
          {"logprobs", spec_.logprobs ? output_text_logprobs(infos) : ojson::array()},
          {"output_index", open_index()}});
  }

  void stream_calls(const std::vector<chat::ToolCallDelta>& calls) {
    for (const chat::ToolCallDelta& d : calls) {
      if (!spec_.parallel_tool_calls && d.index > 0) continue;
      if (d.id || d.name)
        open(Kind::kCall, ToolCallInfo{d.id.value_or(""), d.name.value_or(""), ""});
      if (open_.kind != Kind::kCall || d.arguments.empty()) continue;
      open_.call.arguments += d.arguments;
      emit("response.function_call_arguments.delta", {{"delta", sanitize_utf8(d.arguments)},
                                                      {"item_id", open_.id},
                                                      {"output_index", open_index()}});
    }
  }

  void stream_delta(const std::string& reasoning, const std::string& text,
                    const std::vector<TokenLogprobInfo>& infos, bool finished) {
    if (!reasoning.empty()) {
      open(Kind::kReasoning);
      open_.text += reasoning;
      emit("response.reasoning_text.delta", {{"content_index", 0},
                                             {"delta", sanitize_utf8(reasoning)},
                                             {"item_id", open_.id},
                                             {"output_index", open_index()}});
    }
    // Forced calls are JSON until the end: nothing is streamed before they are complete.
    if (spec_.forced_tools) {
      if (finished) {
        const std::vector<ToolCallInfo> calls = final_calls();
        if (calls.empty()) stream_text(content_, logprobs_);
        for (const ToolCallInfo& c : calls) {
          open(Kind::kCall, c);
          emit("response.function_call_arguments.delta", {{"delta", sanitize_utf8(c.arguments)},
                                                          {"item_id", open_.id},
                                                          {"output_index", open_index()}});
        }
      }
      return;
    }
    if (spec_.tool_parser) {
      chat::ToolStreamDelta d = chat::feed_tool_calls(*spec_.tool_parser, text, finished);
      stream_text(d.content, infos);
      stream_calls(d.tool_calls);
      return;
    }
    stream_text(text, infos);
  }

  // --- the final object ------------------------------------------------------------------------

  bool truncated() const { return meta_.finish_reason == FinishReason::kLength; }

  // The forced calls once their JSON is complete (none when max_output_tokens cut it).
  std::vector<ToolCallInfo> final_calls() const {
    if (meta_.finish_reason != FinishReason::kStop) return {};
    auto calls = forced_tool_calls(*spec_.forced_tools, content_);
    if (!calls) return {};
    if (!spec_.parallel_tool_calls && calls->size() > 1) calls->resize(1);
    return *calls;
  }

  ojson whole_output() const {
    ojson output = ojson::array();
    if (!reasoning_.empty())
      output.push_back(reasoning_item(item_id("rs"), &reasoning_, ojson(nullptr)));
    std::string content = content_;
    std::vector<ToolCallInfo> calls;
    if (spec_.forced_tools) {
      calls = final_calls();
      if (!calls.empty()) content.clear();
    } else if (spec_.tool_parser) {
      chat::ParsedMessage m = spec_.tool_parser->parse(content_);
      content = std::move(m.content);
      for (chat::ToolCall& t : m.tool_calls)
        calls.push_back({std::move(t.id), std::move(t.name), std::move(t.arguments)});
      if (!spec_.parallel_tool_calls && calls.size() > 1) calls.resize(1);
    }
    // Without any parser the answer is always one message, even an empty one (as vLLM).
    const bool parsers = spec_.reasoning || spec_.tool_parser || spec_.forced_tools;
    if (!content.empty() || !parsers) {
      const ojson logprobs = spec_.logprobs ? output_text_logprobs(logprobs_) : ojson(nullptr);
      const ojson parts =
          content.empty() ? ojson::array() : ojson::array({output_text_part(content, logprobs)});
      output.push_back(message_item(item_id("msg"), parts,
                                    truncated() && calls.empty() ? "incomplete" : "completed"));
    }
    for (size_t i = 0; i < calls.size(); ++i)
      output.push_back(
          function_call_item(item_id("fc"), calls[i],
                             truncated() && i + 1 == calls.size() ? "incomplete" : "completed"));
    return output;
  }

  ResponsesUsage usage() const {
    ResponsesUsage u;
    u.input_tokens = meta_.num_prompt_tokens;
    u.cached_tokens = meta_.num_cached_tokens;
    u.output_tokens = meta_.num_output_tokens;
    // The reasoning parser splits text, not tokens: the reasoning text re-encoded counts them.
    if (!reasoning_.empty() && ctx_.tokenizer != nullptr)
      u.reasoning_tokens = int64_t(ctx_.tokenizer->encode(reasoning_, false).size());
    return u;
  }

  void finish() {
    if (done_) return;
    done_ = true;
    self_.reset();
    record_metrics();
    ResponseHeader header = spec_.header;
    header.status = meta_.finish_reason == FinishReason::kAbort ? "cancelled"
                    : truncated()                               ? "incomplete"
                                                                : "completed";
    ojson object;
    if (spec_.stream) {
      close(truncated() ? "incomplete" : "completed");
      object = response_object(header, output_, usage());
      // Always response.completed (its status says incomplete): the openai SDK's
      // responses.stream() accepts no other final event.
      emit("response.completed", {{"response", object}});
      responder_->end_stream();
    } else {
      object = response_object(header, whole_output(), usage());
      if (!spec_.background) responder_->respond(200, "application/json", object.dump());
    }
    if (spec_.background) {
      ctx_.responses_store->finish(spec_.header.id, std::move(object));
    } else if (spec_.store) {
      ctx_.responses_store->put(spec_.header.id, std::move(object), spec_.messages);
    }
  }

  void fail(const std::string& message, bool invalid_request) {
    if (done_) return;
    done_ = true;
    self_.reset();
    record_metrics();
    KLOG_ERROR("response {} failed: {}", spec_.header.id, message);
    const ProtocolError e = invalid_request ? bad_request(message) : failure_error(message);
    if (spec_.background) {
      ResponseHeader header = spec_.header;
      header.status = "failed";
      ctx_.responses_store->finish(spec_.header.id,
                                   response_object(header, ojson::array(), std::nullopt));
    } else if (spec_.stream) {
      emit("error", {{"code", "server_error"}, {"message", e.message}, {"param", nullptr}});
      responder_->end_stream();
    } else {
      responder_->respond(e.code, "application/json", error_body(e).dump());
    }
  }

  void record_metrics() {
    if (ctx_.metrics != nullptr)
      ctx_.metrics->record_request(timer_.sample(meta_, arrival_, spec_.max_tokens_param, 1));
  }

  ServingContext& ctx_;
  std::shared_ptr<Responder> responder_;
  ResponsesSpec spec_;
  std::shared_ptr<RequestStream> stream_;
  std::mutex mu_;  // the stream's reads (the output thread) and their answers
  RequestOutput meta_;
  std::string reasoning_, content_;
  std::vector<TokenLogprobInfo> logprobs_;
  TokenTimer timer_;
  Clock::time_point arrival_;
  // Streaming.
  int64_t sequence_ = 0;
  OpenItem open_;
  ojson output_ = ojson::array();
  bool done_ = false;
  std::shared_ptr<ResponsesSession> self_;
};

}  // namespace

void start_response(ServingContext& ctx, std::shared_ptr<Responder> responder, ResponsesSpec spec) {
  std::make_shared<ResponsesSession>(ctx, std::move(responder), std::move(spec))->start();
}

}  // namespace kestrel::server
