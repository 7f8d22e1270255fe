#include "proxy/pd_request.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <random>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include "base/logging.h"
#include "proxy/upstream.h"
#include "server/http/json_error.h"
#include "server/http/sse.h"
#include "server/http/sse_decoder.h"

namespace kestrel::proxy {

namespace {

namespace asio = boost::asio;
using server::HeaderList;

// A decode's output tokens for its load when the request names no limit.
constexpr int64_t kDefaultOutputEstimate = 256;

std::string fresh_request_id() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{:016x}{:016x}", rng(), rng());
}

bool retryable(int status) {
  return status >= 500 || status == 429 || status == 408;
}

// The message of an OpenAI error body, else the body's start.
std::string error_text(const std::string& body) {
  const Json j = Json::parse(body, nullptr, false);
  if (j.is_object() && j.contains("error")) {
    const Json& e = j["error"];
    if (e.is_object() && e.contains("message") && e["message"].is_string())
      return e["message"].get<std::string>();
    if (e.is_string()) return e.get<std::string>();
  }
  return body.substr(0, 200);
}

int64_t usage_field(const Json& response, const char* key) {
  if (!response.is_object() || !response.contains("usage") || !response["usage"].is_object())
    return 0;
  const Json& usage = response["usage"];
  return usage.contains(key) && usage[key].is_number_integer() ? usage[key].get<int64_t>() : 0;
}

class PdRequest : public std::enable_shared_from_this<PdRequest> {
 public:
  PdRequest(const ProxyContext& ctx, ApiKind kind, std::string target, Json body,
            std::string request_id, std::string authorization,
            std::shared_ptr<server::Responder> responder)
      : ctx_(ctx),
        kind_(kind),
        target_(std::move(target)),
        client_body_(std::move(body)),
        request_id_(std::move(request_id)),
        authorization_(std::move(authorization)),
        responder_(std::move(responder)),
        strand_(asio::make_strand(ctx.executor)),
        timer_(strand_),
        in_flight_(ctx.in_flight) {
    pass_body_ = client_body_;
    stream_ = client_body_.value("stream", false);
    n_ = client_body_.contains("n") && client_body_["n"].is_number_integer()
             ? client_body_["n"].get<int64_t>()
             : 1;
    ++*in_flight_;
  }
  ~PdRequest() { --*in_flight_; }

  void start() {
    std::weak_ptr<PdRequest> weak = weak_from_this();
    Strand strand = strand_;
    responder_->on_disconnect([weak, strand] {
      asio::post(strand, [weak] {
        if (auto self = weak.lock()) self->on_client_gone();
      });
    });
    asio::post(strand_, [self = shared_from_this()] { self->prefill(); });
  }

 private:
  UpstreamRequest upstream(const Instance& to, std::string body) const {
    UpstreamRequest r;
    r.host = to.host;
    r.port = to.port;
    r.target = target_;
    r.body = std::move(body);
    r.connect_timeout = ctx_.settings.connect_timeout;
    r.idle_timeout = ctx_.settings.idle_timeout;
    // The same id to the prefill and the decode of a pass; a continuation is a new request.
    r.headers.emplace_back("X-Request-Id",
                           pass_ == 0 ? request_id_ : fmt::format("{}-r{}", request_id_, pass_));
    if (!authorization_.empty()) r.headers.emplace_back("Authorization", authorization_);
    return r;
  }

  // --- prefill ---
  void prefill() {
    if (finished_) return;
    p_tokens_ = estimate_prompt_tokens(pass_body_);
    auto p = ctx_.pool->pick(Role::kPrefill, p_tokens_);
    if (!p) {
      fail(503, "ServiceUnavailableError", "no prefill instance is available");
      return;
    }
    p_ = *p;
    call_ = fetch(
        strand_, upstream(*p_, prefill_body(pass_body_).dump()),
        [self = shared_from_this()](UpstreamReply reply) { self->on_prefill(std::move(reply)); });
  }

  void on_prefill(UpstreamReply reply) {
    call_.reset();
    const InstancePool::Handle p = std::exchange(p_, nullptr);
    ctx_.pool->release(p, std::exchange(p_tokens_, 0));
    if (finished_) return;
    if (!reply.error.empty()) {
      if (!reply.connected) ctx_.pool->mark_down(p);
      retry(fmt::format("prefill instance {}: {}", p->address(), reply.error));
      return;
    }
    if (retryable(reply.status)) {
      retry(fmt::format("prefill instance {}: HTTP {}: {}", p->address(), reply.status,
                        error_text(reply.body)));
      return;
    }
    if (reply.status != 200) {
      respond_as(reply.status, reply.headers, std::move(reply.body));
      return;
    }
    const Json answer = Json::parse(reply.body, nullptr, false);
    if (!answer.is_object() || !answer.contains("kv_transfer_params") ||
        !answer["kv_transfer_params"].is_object()) {
      fail(502, "BadGatewayError",
           fmt::format("prefill instance {} answered without kv_transfer_params (is it started "
                       "with --kv-transfer-config kv_role kv_producer?)",
                       p->address()));
      return;
    }
    params_ = answer["kv_transfer_params"];
    pass_prompt_tokens_ = usage_field(answer, "prompt_tokens");
    if (pass_ == 0) {
      first_prompt_tokens_ = pass_prompt_tokens_;
      cached_ = cached_tokens(answer);
    }
    decode();
  }

  // --- decode ---
  void decode() {
    d_tokens_ = pass_prompt_tokens_ + max_output_tokens(pass_body_, kDefaultOutputEstimate);
    auto d = ctx_.pool->pick(Role::kDecode, d_tokens_);
    if (!d) {
      release_lease();
      fail(503, "ServiceUnavailableError", "no decode instance is available");
      return;
    }
    d_ = *d;
    d_status_ = 0;
    d_body_.clear();
    d_headers_.clear();
    sse_ = server::SseDecoder();
    recomputed_pass_ = false;
    pass_text_.clear();
    pass_tokens_ = 0;
    const Json body = decode_body(pass_body_, params_, &usage_forced_);
    UpstreamHandlers h;
    auto self = shared_from_this();
    h.on_head = [self](int status, const HeaderList& headers) {
      self->on_decode_head(status, headers);
    };
    h.on_data = [self](std::string_view bytes) { self->on_decode_data(bytes); };
    h.on_end = [self](const std::string& error, bool connected) {
      self->on_decode_end(error, connected);
    };
    call_ = UpstreamCall::start(strand_, upstream(*d_, body.dump()), std::move(h));
  }

  void on_decode_head(int status, const HeaderList& headers) {
    if (finished_) return;
    d_status_ = status;
    d_headers_ = headers;
    if (status != 200) return;
    params_ = nullptr;  // the decode instance has the lease now, and releases it
    if (stream_ && !started_) {
      started_ = true;
      responder_->start_stream(200, "text/event-stream");
    }
  }

  void on_decode_data(std::string_view bytes) {
    if (finished_) return;
    if (!(stream_ && d_status_ == 200)) {
      d_body_.append(bytes);
      return;
    }
    if (!sse_.feed(bytes, [this](const std::string& e) {
          on_event(e);
          return true;
        }))
      stream_error("the decode instance's stream is malformed");
  }

  void send_event(const std::string& payload) { responder_->send_chunk(server::sse_data(payload)); }

  // usage as the client should see it: the first prompt, every pass's output, the prefill's
  // cached tokens.
  void patch_usage(Json& event) const {
    Json& usage = event["usage"];
    const int64_t completion = usage.value("completion_tokens", int64_t{0}) + generated_tokens_;
    const int64_t prompt =
        first_prompt_tokens_ > 0 ? first_prompt_tokens_ : usage.value("prompt_tokens", int64_t{0});
    usage["prompt_tokens"] = prompt;
    usage["completion_tokens"] = completion;
    usage["total_tokens"] = prompt + completion;
    patch_cached_tokens(event, cached_);
  }

  void on_event(const std::string& payload) {
    if (finished_) return;
    if (payload == "[DONE]") {
      if (!recomputed_pass_ && !done_sent_) {
        responder_->send_chunk(std::string(server::kSseDone));
        done_sent_ = true;
      }
      return;
    }
    Json event = Json::parse(payload, nullptr, false);
    if (!event.is_object() || event.contains("error")) {
      send_event(payload);
      return;
    }
    const bool has_choices =
        event.contains("choices") && event["choices"].is_array() && !event["choices"].empty();
    const bool has_usage = event.contains("usage") && event["usage"].is_object();
    bool modified = false;
    if (event.contains("id") && event["id"].is_string()) {
      if (first_id_.empty()) {
        first_id_ = event["id"].get<std::string>();
      } else if (event["id"] != first_id_) {
        event["id"] = first_id_;  // a continuation's chunks belong to the client's response
        modified = true;
      }
    }
    if (!has_choices && has_usage) {  // the final usage chunk
      pass_tokens_ = usage_field(event, "completion_tokens");
      if (recomputed_pass_ || usage_forced_) return;
      patch_usage(event);
      send_event(event.dump());
      return;
    }
    if (has_choices) {
      Json& choice = event["choices"][0];
      const std::string text = choice_text(choice, kind_);
      pass_text_ += text;
      if (n_ == 1 && is_recomputed(event)) {
        recomputed_pass_ = true;
        choice["finish_reason"] = nullptr;
        choice["stop_reason"] = nullptr;
        if (text.empty()) return;
        modified = true;
      }
    }
    if (has_usage) {  // continuous usage stats
      patch_usage(event);
      modified = true;
    }
    send_event(modified ? event.dump() : payload);
  }

  void on_decode_end(const std::string& error, bool connected) {
    call_.reset();
    const InstancePool::Handle d = std::exchange(d_, nullptr);
    ctx_.pool->release(d, std::exchange(d_tokens_, 0));
    if (finished_) return;
    if (stream_ && d_status_ == 200) {
      if (auto last = sse_.flush()) on_event(*last);
      if (!error.empty()) {
        stream_error(fmt::format("decode instance {}: {}", d->address(), error));
        return;
      }
      if (recomputed_pass_) {
        generated_text_ += pass_text_;
        generated_tokens_ += pass_tokens_;
        continue_recomputed(pass_tokens_);
        return;
      }
      if (!done_sent_) responder_->send_chunk(std::string(server::kSseDone));
      responder_->end_stream();
      finished_ = true;
      return;
    }
    if (!error.empty()) {
      if (!connected) ctx_.pool->mark_down(d);
      release_lease();
      retry(fmt::format("decode instance {}: {}", d->address(), error));
      return;
    }
    if (retryable(d_status_)) {
      release_lease();
      retry(fmt::format("decode instance {}: HTTP {}: {}", d->address(), d_status_,
                        error_text(d_body_)));
      return;
    }
    if (d_status_ != 200) {
      release_lease();
      respond_as(d_status_, d_headers_, std::move(d_body_));
      return;
    }
    Json answer = Json::parse(d_body_, nullptr, false);
    if (!answer.is_object() || !answer.contains("choices") || !answer["choices"].is_array() ||
        answer["choices"].empty()) {
      respond_as(d_status_, d_headers_, std::move(d_body_));
      return;
    }
    Json& choice = answer["choices"][0];
    if (n_ == 1 && is_recomputed(answer)) {
      if (first_id_.empty() && answer.contains("id")) first_id_ = answer["id"].get<std::string>();
      generated_text_ += choice_text(choice, kind_);
      const int64_t pass_tokens = usage_field(answer, "completion_tokens");
      generated_tokens_ += pass_tokens;
      continue_recomputed(pass_tokens);
      return;
    }
    if (generated_tokens_ > 0 || !generated_text_.empty()) {  // stitch the passes together
      const std::string text = generated_text_ + choice_text(choice, kind_);
      if (kind_ == ApiKind::kCompletion) {
        choice["text"] = text;
      } else if (choice.contains("message") && choice["message"].is_object()) {
        choice["message"]["content"] = text;
      }
      if (!first_id_.empty()) answer["id"] = first_id_;
    }
    if (answer.contains("usage") && answer["usage"].is_object()) patch_usage(answer);
    responder_->respond(200, "application/json", answer.dump());
    finished_ = true;
  }

  // The decode gave the request back: on with the prompt plus what it generated. A pass that
  // generated tokens brought the request closer to its end, however often a busy decode gives
  // it back; only passes that generated none count against the retries.
  void continue_recomputed(int64_t pass_tokens) {
    if (pass_tokens == 0 && ++idle_recomputes_ > std::max(1, ctx_.settings.max_retries)) {
      fail(502, "BadGatewayError",
           fmt::format("the decode instances gave the request back {} times without generating "
                       "a token (stop_reason \"recomputed\")",
                       idle_recomputes_));
      return;
    }
    auto body = continuation_body(client_body_, kind_, generated_text_, generated_tokens_);
    if (!body) {
      fail(502, "BadGatewayError",
           "a decode instance gave the request back (stop_reason \"recomputed\"), and a prompt of "
           "token ids cannot be continued with text");
      return;
    }
    KLOG_INFO("request {}: recomputing after {} tokens", request_id_, generated_tokens_);
    pass_body_ = std::move(*body);
    ++pass_;
    prefill();
  }

  // --- endings ---
  void retry(const std::string& why) {
    if (++attempts_ >= std::max(1, ctx_.settings.max_retries)) {
      fail(502, "BadGatewayError", fmt::format("{} (after {} attempts)", why, attempts_));
      return;
    }
    KLOG_WARN("request {}: {}; retrying", request_id_, why);
    const auto delay = ctx_.settings.retry_delay * std::pow(2.0, attempts_ - 1);
    timer_.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(delay));
    timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
      if (!ec) self->prefill();
    });
  }

  void respond_as(int status, const HeaderList& headers, std::string body) {
    std::string type = "application/json";
    if (auto t = server::find_header(headers, "content-type")) type = std::string(*t);
    if (started_) {
      stream_error(fmt::format("HTTP {}: {}", status, error_text(body)));
      return;
    }
    responder_->respond(status, type, std::move(body));
    finished_ = true;
  }

  void fail(int status, const char* type, const std::string& message) {
    KLOG_WARN("request {}: {}", request_id_, message);
    if (started_) {
      stream_error(message);
      return;
    }
    responder_->respond(status, "application/json", server::json_error_body(status, type, message));
    finished_ = true;
  }

  // After the first byte: the error as the stream's last event.
  void stream_error(const std::string& message) {
    if (finished_) return;
    KLOG_WARN("request {}: {}", request_id_, message);
    send_event(server::json_error_body(502, "BadGatewayError", message));
    if (!done_sent_) responder_->send_chunk(std::string(server::kSseDone));
    responder_->end_stream();
    finished_ = true;
    if (call_) call_->cancel();
  }

  void release_lease() {
    if (params_.is_object()) ctx_.leases->release(params_);
    params_ = nullptr;
  }

  void on_client_gone() {
    if (finished_) return;
    finished_ = true;
    timer_.cancel();
    if (call_) call_->cancel();  // the backend aborts the request
    release_lease();             // a prefill's KV no decode has taken
  }

  const ProxyContext& ctx_;
  const ApiKind kind_;
  const std::string target_;
  const Json client_body_;
  const std::string request_id_;
  const std::string authorization_;
  std::shared_ptr<server::Responder> responder_;
  Strand strand_;
  asio::steady_timer timer_;
  const std::shared_ptr<std::atomic<int64_t>> in_flight_;
  bool stream_ = false;
  int64_t n_ = 1;

  Json pass_body_;  // this pass's body: the client's, or a continuation
  int pass_ = 0;
  int attempts_ = 0;
  int idle_recomputes_ = 0;  // passes given back without a token
  std::shared_ptr<UpstreamCall> call_;
  bool finished_ = false;

  InstancePool::Handle p_;
  int64_t p_tokens_ = 0;
  Json params_;  // the prefill's kv_transfer_params until a decode takes them
  int64_t first_prompt_tokens_ = 0, pass_prompt_tokens_ = 0, cached_ = 0;

  InstancePool::Handle d_;
  int64_t d_tokens_ = 0;
  int d_status_ = 0;
  HeaderList d_headers_;
  std::string d_body_;
  server::SseDecoder sse_;
  bool usage_forced_ = false;
  bool started_ = false;  // the client has a byte
  bool done_sent_ = false;
  bool recomputed_pass_ = false;
  std::string pass_text_, generated_text_, first_id_;
  int64_t pass_tokens_ = 0, generated_tokens_ = 0;
};

}  // namespace

void run_pd_request(const ProxyContext& context, ApiKind kind, const server::HttpRequest& request,
                    std::shared_ptr<server::Responder> responder) {
  Json body = Json::parse(request.body, nullptr, false);
  if (!body.is_object()) {
    responder->respond(
        400, "application/json",
        server::json_error_body(400, "BadRequestError", "the request body is not a JSON object"));
    return;
  }
  std::string request_id;
  if (auto id = request.header("x-request-id"); id && !id->empty()) request_id = std::string(*id);
  if (request_id.empty()) request_id = fresh_request_id();
  std::string authorization;
  if (!context.settings.api_key.empty()) {
    authorization = "Bearer " + context.settings.api_key;
  } else if (auto a = request.header("authorization")) {
    authorization = std::string(*a);
  }
  std::make_shared<PdRequest>(context, kind, request.path, std::move(body), std::move(request_id),
                              std::move(authorization), std::move(responder))
      ->start();
}

}  // namespace kestrel::proxy
