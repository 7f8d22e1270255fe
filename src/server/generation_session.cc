#include "server/generation_session.h"

#include <algorithm>
#include <mutex>

#include "base/logging.h"
#include "server/forced_tool_calls.h"
#include "server/http/sse.h"
#include "server/protocol/kv_transfer_params.h"
#include "server/protocol/protocol_error.h"
#include "server/request_timing.h"

namespace kestrel::server {

namespace {

using Clock = std::chrono::steady_clock;

StopReason api_stop_reason(const kestrel::StopReason& r) {
  if (const auto* s = std::get_if<std::string>(&r)) return *s;
  if (const auto* t = std::get_if<int32_t>(&r)) return int64_t{*t};
  return std::monostate{};
}

std::string send_json(const nlohmann::ordered_json& j) {
  return sse_data(j.dump());
}

class GenerationSession : public std::enable_shared_from_this<GenerationSession> {
 public:
  GenerationSession(ServingContext& ctx, std::shared_ptr<Responder> responder, SessionSpec spec)
      : ctx_(ctx), responder_(std::move(responder)), spec_(std::move(spec)) {
    choices_.resize(spec_.choices.size());
  }

  void start() {
    arrival_ = Clock::now();
    for (size_t i = 0; i < spec_.choices.size(); ++i) {
      auto stream = ctx_.engine->add_request(spec_.choices[i].request);
      if (!stream.ok()) {
        for (size_t j = 0; j < i; ++j) ctx_.engine->abort(choices_[j].stream->id());
        const bool dead = ctx_.engine->stats().dead;
        ProtocolError e =
            dead ? internal_error("the engine has failed") : bad_request(stream.error().message);
        responder_->respond(e.code, "application/json", error_body(e).dump());
        return;
      }
      choices_[i].stream = *stream;
    }
    if (spec_.stream)
      responder_->start_stream(200, "text/event-stream",
                               {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}});
    // The session keeps itself alive until every choice has ended; callbacks hold it weakly.
    self_ = shared_from_this();
    std::weak_ptr<GenerationSession> weak = self_;
    responder_->on_disconnect([weak] {
      if (auto self = weak.lock()) self->abort_all();
    });
    for (size_t i = 0; i < choices_.size(); ++i)
      choices_[i].stream->set_notify([workers = ctx_.workers, weak, i] {
        // Called on the engine client's output thread, which must not wait on parsers or JSON.
        run_on_workers(workers, [weak, i] {
          if (auto self = weak.lock()) self->on_output(i);
        });
      });
  }

 private:
  struct Choice {
    std::shared_ptr<RequestStream> stream;
    RequestOutput meta;  // counts, finish and stop reason (text and logprobs live below)
    std::string text;    // the choice's text as reported (completions echo included; content only
                         // with a reasoning parser)
    std::string reasoning;                   // with a reasoning parser: the reasoning text so far
    bool streamed_tool_calls = false;        // a parsed tool call was streamed
    std::vector<TokenLogprobInfo> logprobs;  // as reported (prompt tokens first)
    std::vector<PromptPositionLogprobs> prompt_positions;  // the prompt_logprobs field
    bool finished = false;
    bool started = false;        // the echo and the first prompt token were reported
    int64_t streamed_bytes = 0;  // text already streamed (completions logprobs text_offset)
    TokenTimer timer;
  };

  void abort_all() {
    std::lock_guard lock(mu_);
    for (Choice& c : choices_)
      if (!c.finished) ctx_.engine->abort(c.stream->id());
  }

  // Chat streams open with every choice's role chunk (and its echo) when the first output
  // arrives, as vLLM sends them: a client that times the first chunk measures the first token.
  void send_role_chunks() {
    if (role_sent_ || !spec_.stream || spec_.kind != StreamKind::kChat) return;
    role_sent_ = true;
    for (size_t i = 0; i < choices_.size(); ++i) {
      ChatStreamChoice c;
      c.index = int64_t(i);
      c.delta.role = "assistant";
      c.delta.content = "";
      responder_->send_chunk(
          send_json(chat_stream_chunk(spec_.id, spec_.created, spec_.model, {c})));
    }
    for (size_t i = 0; i < choices_.size(); ++i) {
      if (spec_.choices[i].echo.empty()) continue;
      ChatStreamChoice c;
      c.index = int64_t(i);
      c.delta.content = spec_.choices[i].echo;
      responder_->send_chunk(
          send_json(chat_stream_chunk(spec_.id, spec_.created, spec_.model, {c})));
    }
  }

  void on_output(size_t i) {
    std::lock_guard lock(mu_);
    send_role_chunks();
    Choice& c = choices_[i];
    while (!c.finished) {
      std::optional<RequestOutput> out = c.stream->try_next();
      if (!out) break;
      handle(i, std::move(*out));
    }
  }

  // How logprob tokens are spelled: decoded, or "token_id:N" (return_tokens_as_token_ids).
  const Tokenizer* token_spelling() const { return spec_.tokens_as_ids ? nullptr : ctx_.tokenizer; }

  TokenLogprobInfo info(const TokenLogprobs& t) const {
    return token_logprob_info(token_spelling(), t);
  }

  // A scored prompt token for echo: its alternatives always include the token itself, as vLLM's.
  TokenLogprobInfo prompt_info(const TokenLogprobs& t) const {
    TokenLogprobInfo out = info(t);
    const bool listed = std::any_of(t.top.begin(), t.top.end(),
                                    [&](const TokenLogprob& a) { return a.token == t.token; });
    if (!listed) out.top.emplace_back(out.token, t.logprob);
    return out;
  }

  // vLLM's prompt_logprobs entry: the prompt token with its rank, then the top alternatives.
  PromptPositionLogprobs position(const TokenLogprobs& t) const {
    PromptPositionLogprobs out;
    out.push_back({t.token, t.logprob, t.rank, logprob_token_text(token_spelling(), t.token)});
    for (size_t k = 0; k < t.top.size(); ++k) {
      if (t.top[k].token == t.token) continue;
      out.push_back({t.top[k].token, t.top[k].logprob, int64_t(k) + 1,
                     logprob_token_text(token_spelling(), t.top[k].token)});
    }
    return out;
  }

  Usage usage() const {
    Usage u;
    std::vector<bool> counted;
    for (size_t i = 0; i < choices_.size(); ++i) {
      const RequestOutput& o = choices_[i].meta;
      if (!spec_.choices[i].drop_output) u.completion_tokens += o.num_output_tokens;
      const auto group = size_t(spec_.choices[i].prompt_index);
      if (counted.size() <= group) counted.resize(group + 1, false);
      if (counted[group]) continue;
      counted[group] = true;
      u.prompt_tokens += o.num_prompt_tokens;
      u.cached_tokens += o.num_cached_tokens;
    }
    return u;
  }

  void handle(size_t i, RequestOutput out) {
    Choice& c = choices_[i];
    c.timer.on_output(!out.token_ids.empty());
    const SessionChoice& sc = spec_.choices[i];
    std::string text;
    std::vector<TokenLogprobInfo> infos;
    if (!c.started) {
      c.started = true;
      // Chat's echo is content that no parser sees; it is sent on its own (see start()).
      if (spec_.kind == StreamKind::kCompletion) text = sc.echo;
      // The first prompt token has nothing before it to be scored against.
      if (sc.echo_logprobs && !sc.prompt_ids.empty())
        infos.push_back(TokenLogprobInfo{
            logprob_token_text(token_spelling(), sc.prompt_ids[0]), std::nullopt, {}});
      if (sc.prompt_logprobs >= 0) c.prompt_positions.emplace_back();
    }
    for (const TokenLogprobs& t : out.prompt_logprobs) {
      if (sc.echo_logprobs) infos.push_back(prompt_info(t));
      if (sc.prompt_logprobs >= 0) c.prompt_positions.push_back(position(t));
    }
    if (!sc.drop_output) {
      text += out.text;
      for (const TokenLogprobs& t : out.logprobs) infos.push_back(info(t));
    }
    std::string reasoning;
    if (sc.reasoning) {
      chat::ReasoningSplit split = chat::feed_reasoning(*sc.reasoning, text, out.finished());
      text = std::move(split.content);
      if (spec_.include_reasoning) reasoning = std::move(split.reasoning);
      c.reasoning += reasoning;
    }
    c.text += text;
    if (spec_.logprobs) c.logprobs.insert(c.logprobs.end(), infos.begin(), infos.end());
    {
      RequestOutput piece = out;
      piece.text.clear();
      piece.logprobs.clear();
      piece.prompt_logprobs.clear();
      c.meta.merge(std::move(piece));
      // Echo only (max_tokens 0): the one token generated to run the prompt is not reported.
      if (sc.drop_output && c.meta.finish_reason) {
        c.meta.finish_reason = FinishReason::kLength;
        c.meta.stop_reason = {};
      }
    }
    if (out.finished()) {
      c.finished = true;
      ++num_finished_;
      record_metrics(i);
    }
    if (out.finish_reason == FinishReason::kError) {
      fail(out.error.empty() ? "the engine failed" : out.error, out.invalid_request);
      return;
    }
    if (spec_.stream && sc.forced_tools) {
      // The calls are known once their JSON is complete: nothing is streamed before.
      if (out.finished()) send_forced_tools(i, infos);
    } else if (spec_.stream) {
      std::vector<chat::ToolCallDelta> calls;
      if (sc.tool_parser) {
        chat::ToolStreamDelta d = chat::feed_tool_calls(*sc.tool_parser, text, out.finished());
        text = std::move(d.content);
        calls = std::move(d.tool_calls);
        if (!calls.empty()) c.streamed_tool_calls = true;
      }
      send_delta(i, text, reasoning, calls, infos, out.finished());
    }
    if (num_finished_ == choices_.size()) finish();
  }

  void send_delta(size_t i, const std::string& text, const std::string& reasoning,
                  const std::vector<chat::ToolCallDelta>& calls,
                  const std::vector<TokenLogprobInfo>& infos, bool finished) {
    Choice& c = choices_[i];
    if (text.empty() && reasoning.empty() && calls.empty() && infos.empty() && !finished) return;
    std::optional<std::string> reason;
    if (finished) reason = finish_reason_name(*c.meta.finish_reason);
    if (finished && c.streamed_tool_calls && c.meta.finish_reason == FinishReason::kStop)
      reason = "tool_calls";
    std::optional<Usage> running;
    if (spec_.continuous_usage) running = usage();
    if (spec_.kind == StreamKind::kCompletion) {
      CompletionChoice ch;
      ch.index = int64_t(i);
      ch.text = text;
      if (spec_.logprobs) {
        ch.logprobs = infos;
        ch.text_offset_start = c.streamed_bytes;
      }
      ch.finish_reason = reason;
      if (reason) ch.stop_reason = api_stop_reason(c.meta.stop_reason);
      if (finished && spec_.choices[i].prompt_logprobs >= 0)
        ch.prompt_logprobs = c.prompt_positions;
      responder_->send_chunk(
          send_json(completion_stream_chunk(spec_.id, spec_.created, spec_.model, {ch}, running)));
    } else {
      ChatStreamChoice ch;
      ch.index = int64_t(i);
      // With a reasoning or tool parser only the parts that have something are sent, as vLLM
      // does.
      if (!text.empty() || (reasoning.empty() && calls.empty())) ch.delta.content = text;
      if (!reasoning.empty()) ch.delta.reasoning = reasoning;
      for (const chat::ToolCallDelta& d : calls)
        ch.delta.tool_calls.push_back(
            {d.index, d.id, d.name,
             d.arguments.empty() && d.id ? std::nullopt : std::optional(d.arguments)});
      if (spec_.logprobs) ch.logprobs = infos;
      ch.finish_reason = reason;
      if (reason) ch.stop_reason = api_stop_reason(c.meta.stop_reason);
      responder_->send_chunk(
          send_json(chat_stream_chunk(spec_.id, spec_.created, spec_.model, {ch}, running)));
    }
    c.streamed_bytes += int64_t(text.size());
  }

  // The forced calls of a finished choice, or nullopt when its JSON is incomplete (cut by
  // max_tokens); then the text is reported as content.
  std::optional<std::vector<ToolCallInfo>> forced_calls(size_t i) const {
    const Choice& c = choices_[i];
    if (c.meta.finish_reason != FinishReason::kStop) return std::nullopt;
    return forced_tool_calls(*spec_.choices[i].forced_tools, c.text);
  }

  // vLLM reports "tool_calls" for tool_choice "required" and "stop" for a named function.
  std::string forced_finish_reason(size_t i) const {
    return spec_.choices[i].forced_tools->mode == ToolChoice::Mode::kRequired ? "tool_calls"
                                                                              : "stop";
  }

  void send_forced_tools(size_t i, const std::vector<TokenLogprobInfo>& infos) {
    const Choice& c = choices_[i];
    const auto calls = forced_calls(i);
    if (!calls) return send_delta(i, c.text, "", {}, infos, true);
    ChatStreamChoice ch;
    ch.index = int64_t(i);
    for (size_t k = 0; k < calls->size(); ++k)
      ch.delta.tool_calls.push_back(
          {int64_t(k), (*calls)[k].id, (*calls)[k].name, (*calls)[k].arguments});
    if (spec_.logprobs) ch.logprobs = infos;
    ch.finish_reason = forced_finish_reason(i);
    std::optional<Usage> running;
    if (spec_.continuous_usage) running = usage();
    responder_->send_chunk(
        send_json(chat_stream_chunk(spec_.id, spec_.created, spec_.model, {ch}, running)));
  }

  // A prefill for a remote decode: where the prompt's KV waits (one choice asks for it).
  std::optional<nlohmann::json> kv_transfer_params() const {
    for (const Choice& c : choices_)
      if (c.meta.kv_transfer) return kv_transfer_params_json(*c.meta.kv_transfer);
    return std::nullopt;
  }

  void finish() {
    if (done_) return;
    done_ = true;
    self_.reset();  // the caller's callback still holds a reference
    if (spec_.stream) {
      if (spec_.include_usage)
        responder_->send_chunk(
            send_json(usage_chunk(spec_.kind, spec_.id, spec_.created, spec_.model, usage())));
      responder_->send_chunk(std::string(kSseDone));
      responder_->end_stream();
      return;
    }
    nlohmann::ordered_json body;
    if (spec_.kind == StreamKind::kCompletion) {
      CompletionResponseInfo r{spec_.id, spec_.created, spec_.model,
                               {},       usage(),       kv_transfer_params()};
      for (size_t i = 0; i < choices_.size(); ++i) {
        const Choice& c = choices_[i];
        CompletionChoice ch;
        ch.index = int64_t(i);
        ch.text = c.text;
        if (spec_.logprobs) ch.logprobs = c.logprobs;
        ch.finish_reason = finish_reason_name(*c.meta.finish_reason);
        ch.stop_reason = api_stop_reason(c.meta.stop_reason);
        if (spec_.choices[i].prompt_logprobs >= 0) ch.prompt_logprobs = c.prompt_positions;
        r.choices.push_back(std::move(ch));
      }
      body = completion_response(r);
    } else {
      ChatResponseInfo r;
      r.id = spec_.id;
      r.created = spec_.created;
      r.model = spec_.model;
      r.usage = usage();
      r.kv_transfer_params = kv_transfer_params();
      for (size_t i = 0; i < choices_.size(); ++i) {
        const Choice& c = choices_[i];
        ChatChoice ch;
        ch.index = int64_t(i);
        ch.message.content = c.text;
        if (!c.reasoning.empty()) {
          ch.message.reasoning = c.reasoning;
          // Only reasoning so far (e.g. cut by max_tokens): no content, as vLLM reports it.
          if (c.text.empty()) ch.message.content.reset();
        }
        if (spec_.logprobs) ch.logprobs = c.logprobs;
        ch.finish_reason = finish_reason_name(*c.meta.finish_reason);
        ch.stop_reason = api_stop_reason(c.meta.stop_reason);
        if (spec_.choices[i].tool_parser) {
          chat::ParsedMessage m = spec_.choices[i].tool_parser->parse(c.text);
          if (!m.tool_calls.empty()) {
            ch.message.content = m.content;
            if (m.content.empty()) ch.message.content.reset();
            for (chat::ToolCall& t : m.tool_calls)
              ch.message.tool_calls.push_back(
                  {std::move(t.id), std::move(t.name), std::move(t.arguments)});
            if (c.meta.finish_reason == FinishReason::kStop) ch.finish_reason = "tool_calls";
          }
        }
        if (spec_.choices[i].forced_tools) {
          if (auto calls = forced_calls(i)) {
            ch.message.content.reset();
            ch.message.tool_calls = std::move(*calls);
            ch.finish_reason = forced_finish_reason(i);
          }
        }
        if (const std::string& echo = spec_.choices[i].echo; !echo.empty())
          ch.message.content = echo + ch.message.content.value_or("");
        r.choices.push_back(std::move(ch));
      }
      body = chat_response(r);
    }
    responder_->respond(200, "application/json", body.dump());
  }

  // An engine failure, or a request whose own rules left nothing to sample (a 400): the other
  // choices are dropped and the client told.
  void fail(const std::string& message, bool invalid_request) {
    if (done_) return;
    done_ = true;
    self_.reset();
    for (Choice& c : choices_)
      if (!c.finished) ctx_.engine->abort(c.stream->id());
    KLOG_ERROR("request {} failed: {}", spec_.id, message);
    const ProtocolError e = invalid_request ? bad_request(message) : failure_error(message);
    if (spec_.stream) {
      responder_->send_chunk(send_json(error_body(e)));
      responder_->send_chunk(std::string(kSseDone));
      responder_->end_stream();
    } else {
      responder_->respond(e.code, "application/json", error_body(e).dump());
    }
  }

  void record_metrics(size_t i) {
    if (ctx_.metrics == nullptr) return;
    const Choice& c = choices_[i];
    ctx_.metrics->record_request(
        c.timer.sample(c.meta, arrival_, spec_.max_tokens_param, i == 0 ? spec_.n : 0));
  }

  ServingContext& ctx_;
  std::shared_ptr<Responder> responder_;
  SessionSpec spec_;
  std::mutex mu_;
  std::vector<Choice> choices_;
  size_t num_finished_ = 0;
  bool role_sent_ = false;
  bool done_ = false;
  Clock::time_point arrival_;
  std::shared_ptr<GenerationSession> self_;
};

}  // namespace

std::string logprob_token_text(const Tokenizer* tokenizer, int32_t id) {
  if (tokenizer == nullptr) return "token_id:" + std::to_string(id);
  const int32_t one[1] = {id};
  return tokenizer->decode(one, /*skip_special_tokens=*/false);
}

TokenLogprobInfo token_logprob_info(const Tokenizer* tokenizer, const TokenLogprobs& t) {
  TokenLogprobInfo out;
  out.token = logprob_token_text(tokenizer, t.token);
  out.logprob = t.logprob;
  for (const auto& alt : t.top)
    out.top.emplace_back(logprob_token_text(tokenizer, alt.token), alt.logprob);
  return out;
}

void start_generation(ServingContext& ctx, std::shared_ptr<Responder> responder, SessionSpec spec) {
  auto session = std::make_shared<GenerationSession>(ctx, std::move(responder), std::move(spec));
  session->start();
}

}  // namespace kestrel::server
