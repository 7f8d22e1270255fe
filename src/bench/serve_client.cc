#include "bench/serve_client.h"

#include <algorithm>
#include <array>
#include <deque>
#include <limits>
#include <memory>
#include <numeric>
#include <optional>
#include <string_view>
#include <utility>

#include <fmt/format.h>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include "server/http/sse_decoder.h"

namespace kestrel::bench {

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::ip::tcp;
using boost::system::error_code;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

// An error body beyond this is cut: only its message is wanted.
constexpr size_t kMaxErrorBody = 64u << 10;
// Read granularity per connection; streamed chunks are far smaller.
constexpr size_t kReadChunk = 16u << 10;
// Latest honoured send time, so that absurd schedules cannot overflow the clock.
constexpr double kMaxSendAtS = 1e7;

double seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

std::string truncated(std::string_view s, size_t n = 200) {
  if (s.size() <= n) return std::string(s);
  return std::string(s.substr(0, n)) + "...";
}

bool non_empty_string(const json& object, const char* key) {
  auto it = object.find(key);
  return it != object.end() && it->is_string() && !it->get_ref<const std::string&>().empty();
}

// Whether a streamed chunk carries generated output, i.e. marks a token arrival.
bool has_content(const json& event) {
  auto choices = event.find("choices");
  if (choices == event.end() || !choices->is_array() || choices->empty()) return false;
  const json& choice = (*choices)[0];
  if (!choice.is_object()) return false;
  if (non_empty_string(choice, "text")) return true;
  auto delta = choice.find("delta");
  if (delta == choice.end() || !delta->is_object()) return false;
  if (non_empty_string(*delta, "content") || non_empty_string(*delta, "reasoning") ||
      non_empty_string(*delta, "reasoning_content")) {
    return true;
  }
  auto tools = delta->find("tool_calls");
  return tools != delta->end() && tools->is_array() && !tools->empty();
}

// The human-readable message of an error object in the OpenAI ({"error":{"message"}}),
// vLLM 401 ({"error":"..."}) or FastAPI ({"detail":...}) shapes; empty if none is recognised.
std::string error_message(const json& body) {
  if (!body.is_object()) return "";
  auto error = body.find("error");
  if (error != body.end()) {
    if (error->is_string()) return error->get<std::string>();
    if (error->is_object()) {
      auto message = error->find("message");
      if (message != error->end() && message->is_string()) return message->get<std::string>();
    }
    return truncated(error->dump());
  }
  for (const char* key : {"message", "detail"}) {
    auto it = body.find(key);
    if (it != body.end()) return it->is_string() ? it->get<std::string>() : truncated(it->dump());
  }
  return "";
}

class Runner;

// One request: connect, send, read the streamed response, fill the trace.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(Runner& runner, size_t index);
  void start();

 private:
  void on_connect(error_code ec);
  void on_write(error_code ec);
  void on_header(error_code ec);
  void read_body();
  void on_body(error_code ec);
  void on_body_end();
  // Handles one SSE payload; false when the request is over.
  bool on_event(const std::string& payload);
  void on_token(Clock::time_point now);
  void finish_stream();
  void fail_with_status();
  void fail(std::string error);
  void complete();

  Runner& runner_;
  size_t index_;
  const ServeRequest& request_;
  RequestTrace& trace_;
  tcp::socket socket_;
  asio::steady_timer deadline_;
  beast::flat_buffer buffer_;
  http::request<http::string_body> http_request_;
  http::response_parser<http::buffer_body> parser_;
  std::array<char, kReadChunk> chunk_;
  server::SseDecoder sse_;
  std::string error_body_;
  unsigned status_ = 0;
  Clock::time_point sent_;
  Clock::time_point last_token_;
  bool got_token_ = false;
  bool got_usage_ = false;
  int64_t usage_tokens_ = 0;
  int64_t content_chunks_ = 0;
  bool done_ = false;
};

// The schedule: releases requests at their send times, within the concurrency cap.
class Runner {
 public:
  Runner(const ClientOptions& options, const std::vector<ServeRequest>& requests,
         int max_concurrency, const std::function<void(size_t)>& on_done)
      : options_(options),
        requests_(requests),
        max_concurrency_(max_concurrency),
        on_done_(on_done),
        traces_(requests.size()) {}

  std::vector<RequestTrace> run() {
    for (size_t i = 0; i < requests_.size(); ++i) traces_[i].prompt_len = requests_[i].prompt_len;
    error_code ec;
    tcp::resolver resolver(ioc_);
    endpoints_ = resolver.resolve(options_.host, std::to_string(options_.port), ec);
    if (ec || endpoints_.empty()) {
      std::string error =
          fmt::format("cannot resolve host '{}': {}", options_.host, ec ? ec.message() : "none");
      for (size_t i = 0; i < traces_.size(); ++i) {
        traces_[i].error = error;
        if (on_done_) on_done_(i + 1);
      }
      return std::move(traces_);
    }
    order_.resize(requests_.size());
    std::iota(order_.begin(), order_.end(), size_t{0});
    std::stable_sort(order_.begin(), order_.end(),
                     [&](size_t a, size_t b) { return send_offset(a) < send_offset(b); });
    start_ = Clock::now();
    release_due();
    ioc_.run();
    return std::move(traces_);
  }

  // Called by a session once its trace is final.
  void finished() {
    --in_flight_;
    ++done_;
    if (on_done_) on_done_(done_);
    // Posted, not called, so that sessions failing at once cannot recurse without bound.
    asio::post(ioc_, [this] { launch_ready(); });
  }

  asio::io_context& ioc() { return ioc_; }
  const ClientOptions& options() const { return options_; }
  const tcp::resolver::results_type& endpoints() const { return endpoints_; }
  const ServeRequest& request(size_t i) const { return requests_[i]; }
  RequestTrace& trace(size_t i) { return traces_[i]; }
  double since_start(Clock::time_point t) const { return seconds(t - start_); }

 private:
  Clock::duration send_offset(size_t i) const {
    double s = requests_[i].send_at_s;
    s = s > 0 ? std::min(s, kMaxSendAtS) : 0.0;  // NaN and negatives mean "now"
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  }

  // Moves every request whose time has come to the ready queue and arms the timer for the next.
  void release_due() {
    const auto now = Clock::now();
    while (next_ < order_.size() && start_ + send_offset(order_[next_]) <= now) {
      ready_.push_back(order_[next_++]);
    }
    launch_ready();
    if (next_ < order_.size()) {
      timer_.expires_at(start_ + send_offset(order_[next_]));
      timer_.async_wait([this](error_code ec) {
        if (!ec) release_due();
      });
    }
  }

  void launch_ready() {
    while (!ready_.empty() && (max_concurrency_ <= 0 || in_flight_ < max_concurrency_)) {
      size_t index = ready_.front();
      ready_.pop_front();
      ++in_flight_;
      std::make_shared<Session>(*this, index)->start();
    }
  }

  const ClientOptions& options_;
  const std::vector<ServeRequest>& requests_;
  const int max_concurrency_;
  const std::function<void(size_t)>& on_done_;
  std::vector<RequestTrace> traces_;
  asio::io_context ioc_{1};
  asio::steady_timer timer_{ioc_};
  tcp::resolver::results_type endpoints_;
  std::vector<size_t> order_;  // request indices by send time
  size_t next_ = 0;            // first entry of order_ not yet due
  std::deque<size_t> ready_;   // due, waiting for a slot
  int in_flight_ = 0;
  size_t done_ = 0;
  Clock::time_point start_;
};

Session::Session(Runner& runner, size_t index)
    : runner_(runner),
      index_(index),
      request_(runner.request(index)),
      trace_(runner.trace(index)),
      socket_(runner.ioc()),
      deadline_(runner.ioc()) {}

void Session::start() {
  sent_ = Clock::now();
  trace_.start_s = runner_.since_start(sent_);
  if (!request_.body.is_object()) {
    fail("request body must be a JSON object");
    return;
  }
  json body = request_.body;
  body["stream"] = true;
  json& stream_options = body["stream_options"];
  if (!stream_options.is_object()) stream_options = json::object();
  stream_options["include_usage"] = true;

  const ClientOptions& options = runner_.options();
  http_request_.method(http::verb::post);
  http_request_.target(request_.endpoint);
  http_request_.version(11);
  http_request_.set(http::field::host, fmt::format("{}:{}", options.host, options.port));
  http_request_.set(http::field::user_agent, "kestrel-bench");
  http_request_.set(http::field::content_type, "application/json");
  if (!request_.request_id.empty()) http_request_.set("x-request-id", request_.request_id);
  if (!options.api_key.empty()) {
    http_request_.set(http::field::authorization, "Bearer " + options.api_key);
  }
  http_request_.body() = body.dump(-1, ' ', false, json::error_handler_t::replace);
  http_request_.prepare_payload();
  parser_.body_limit(std::numeric_limits<std::uint64_t>::max());

  auto self = shared_from_this();
  deadline_.expires_after(options.request_timeout);
  deadline_.async_wait([self](error_code ec) {
    if (!ec) {
      self->fail(fmt::format("request timed out after {} s",
                             self->runner_.options().request_timeout.count()));
    }
  });
  asio::async_connect(socket_, runner_.endpoints(),
                      [self](error_code ec, const tcp::endpoint&) { self->on_connect(ec); });
}

void Session::on_connect(error_code ec) {
  if (done_) return;
  const ClientOptions& options = runner_.options();
  if (ec) {
    fail(fmt::format("cannot connect to {}:{}: {}", options.host, options.port, ec.message()));
    return;
  }
  error_code ignored;
  socket_.set_option(tcp::no_delay(true), ignored);
  http::async_write(
      socket_, http_request_,
      [self = shared_from_this()](error_code write_ec, size_t) { self->on_write(write_ec); });
}

void Session::on_write(error_code ec) {
  if (done_) return;
  if (ec) {
    fail("sending the request failed: " + ec.message());
    return;
  }
  http::async_read_header(
      socket_, buffer_, parser_,
      [self = shared_from_this()](error_code read_ec, size_t) { self->on_header(read_ec); });
}

void Session::on_header(error_code ec) {
  if (done_) return;
  if (ec) {
    fail("no response from the server: " + ec.message());
    return;
  }
  status_ = parser_.get().result_int();
  read_body();
}

void Session::read_body() {
  auto& body = parser_.get().body();
  body.data = chunk_.data();
  body.size = chunk_.size();
  http::async_read_some(socket_, buffer_, parser_,
                        [self = shared_from_this()](error_code ec, size_t) { self->on_body(ec); });
}

void Session::on_body(error_code ec) {
  if (done_) return;
  if (ec == http::error::need_buffer) ec = {};  // the chunk buffer is full, not an error
  const std::string_view bytes(chunk_.data(), chunk_.size() - parser_.get().body().size);
  if (status_ != 200) {
    error_body_.append(
        bytes.substr(0, kMaxErrorBody - std::min(kMaxErrorBody, error_body_.size())));
  } else if (!sse_.feed(bytes, [this](const std::string& payload) { return on_event(payload); })) {
    fail("malformed stream: an event exceeds 16 MiB");
  }
  if (done_) return;
  if (ec) {
    if (status_ != 200) {
      fail_with_status();
    } else {
      fail("stream interrupted: " + ec.message());
    }
    return;
  }
  if (parser_.is_done()) {
    on_body_end();
    return;
  }
  read_body();
}

void Session::on_body_end() {
  if (status_ != 200) {
    fail_with_status();
    return;
  }
  std::optional<std::string> last = sse_.flush();
  if (last && !on_event(*last)) return;
  finish_stream();
}

bool Session::on_event(const std::string& payload) {
  if (payload == "[DONE]") {
    finish_stream();
    return false;
  }
  json event = json::parse(payload, nullptr, false);
  if (event.is_discarded() || !event.is_object()) {
    fail("malformed stream event: " + truncated(payload));
    return false;
  }
  if (event.contains("error")) {
    std::string message = error_message(event);
    fail("error in stream: " + (message.empty() ? truncated(payload) : message));
    return false;
  }
  if (has_content(event)) on_token(Clock::now());
  auto usage = event.find("usage");
  if (usage != event.end() && usage->is_object()) {
    auto tokens = usage->find("completion_tokens");
    if (tokens != usage->end() && tokens->is_number_integer()) {
      usage_tokens_ = tokens->get<int64_t>();
      got_usage_ = true;
    }
  }
  return true;
}

void Session::on_token(Clock::time_point now) {
  if (!got_token_) {
    trace_.ttft_s = seconds(now - sent_);
    got_token_ = true;
  } else {
    trace_.itl_s.push_back(seconds(now - last_token_));
  }
  last_token_ = now;
  trace_.token_times_s.push_back(runner_.since_start(now));
  ++content_chunks_;
}

void Session::finish_stream() {
  if (!got_token_) {
    fail("the stream ended without any content chunk");
    return;
  }
  trace_.success = true;
  trace_.output_tokens = got_usage_ ? usage_tokens_ : content_chunks_;
  trace_.latency_s = seconds(Clock::now() - sent_);
  complete();
}

void Session::fail_with_status() {
  json body = json::parse(error_body_, nullptr, false);
  std::string message = body.is_discarded() ? "" : error_message(body);
  if (message.empty()) {
    message = error_body_.empty() ? std::string(parser_.get().reason()) : truncated(error_body_);
  }
  fail(fmt::format("HTTP {}: {}", status_, message));
}

void Session::fail(std::string error) {
  if (done_) return;
  trace_.success = false;
  trace_.error = std::move(error);
  trace_.latency_s = seconds(Clock::now() - sent_);
  complete();
}

void Session::complete() {
  done_ = true;
  error_code ignored;
  deadline_.cancel();
  socket_.close(ignored);  // aborts whatever is pending; those handlers see done_
  runner_.finished();
}

}  // namespace

std::vector<RequestTrace> run_requests(const ClientOptions& options,
                                       const std::vector<ServeRequest>& requests,
                                       int max_concurrency,
                                       const std::function<void(size_t done)>& on_done) {
  return Runner(options, requests, max_concurrency, on_done).run();
}

}  // namespace kestrel::bench
