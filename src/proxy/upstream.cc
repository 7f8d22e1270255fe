#include "proxy/upstream.h"

#include <fmt/format.h>

#include <limits>

#include <boost/asio/connect.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>

namespace kestrel::proxy {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::ip::tcp;
using boost::system::error_code;

UpstreamCall::UpstreamCall(Strand strand, UpstreamRequest request, UpstreamHandlers handlers)
    : strand_(std::move(strand)),
      request_(std::move(request)),
      handlers_(std::move(handlers)),
      resolver_(strand_),
      socket_(strand_),
      timer_(strand_) {}

std::shared_ptr<UpstreamCall> UpstreamCall::start(Strand strand, UpstreamRequest request,
                                                  UpstreamHandlers handlers) {
  auto call = std::make_shared<UpstreamCall>(strand, std::move(request), std::move(handlers));
  asio::dispatch(strand, [call] { call->begin(); });
  return call;
}

void UpstreamCall::cancel() {
  asio::post(strand_, [self = shared_from_this()] { self->end("cancelled"); });
}

void UpstreamCall::arm(std::chrono::milliseconds timeout, const char* what) {
  timer_.expires_after(timeout);
  timer_.async_wait([self = shared_from_this(), what, timeout](const error_code& ec) {
    if (ec || self->done_) return;
    self->timed_out_ = fmt::format("{} timed out after {} ms", what, timeout.count());
    error_code ignored;
    self->resolver_.cancel();
    self->socket_.close(ignored);  // the pending operation fails and ends the exchange
  });
}

void UpstreamCall::begin() {
  if (done_) return;
  http_request_.method_string(request_.method);
  http_request_.target(request_.target);
  http_request_.version(11);
  http_request_.set(http::field::host, fmt::format("{}:{}", request_.host, request_.port));
  for (const auto& [name, value] : request_.headers) http_request_.set(name, value);
  if (!request_.body.empty() || request_.method == "POST") {
    if (http_request_.find(http::field::content_type) == http_request_.end())
      http_request_.set(http::field::content_type, "application/json");
    http_request_.body() = std::move(request_.body);
  }
  http_request_.prepare_payload();
  parser_.body_limit(std::numeric_limits<uint64_t>::max());
  parser_.header_limit(1u << 20);
  arm(request_.connect_timeout, "connecting");
  resolver_.async_resolve(
      request_.host, std::to_string(request_.port),
      [self = shared_from_this()](const error_code& ec, const tcp::resolver::results_type& r) {
        self->on_resolved(ec, r);
      });
}

void UpstreamCall::on_resolved(const error_code& ec, const tcp::resolver::results_type& endpoints) {
  if (done_) return;
  if (ec) {
    end(timed_out_.empty() ? fmt::format("cannot resolve {}: {}", request_.host, ec.message())
                           : timed_out_);
    return;
  }
  asio::async_connect(socket_, endpoints,
                      [self = shared_from_this()](const error_code& e, const tcp::endpoint&) {
                        self->on_connected(e);
                      });
}

void UpstreamCall::on_connected(const error_code& ec) {
  if (done_) return;
  if (ec) {
    end(timed_out_.empty() ? "cannot connect: " + ec.message() : timed_out_);
    return;
  }
  connected_ = true;
  error_code ignored;
  socket_.set_option(tcp::no_delay(true), ignored);
  arm(request_.idle_timeout, "waiting for the response");
  http::async_write(
      socket_, http_request_,
      [self = shared_from_this()](const error_code& e, size_t) { self->on_written(e); });
}

void UpstreamCall::on_written(const error_code& ec) {
  if (done_) return;
  if (ec) {
    end(timed_out_.empty() ? "sending the request failed: " + ec.message() : timed_out_);
    return;
  }
  http::async_read_header(
      socket_, buffer_, parser_,
      [self = shared_from_this()](const error_code& e, size_t) { self->on_head(e); });
}

void UpstreamCall::on_head(const error_code& ec) {
  if (done_) return;
  if (ec) {
    end(timed_out_.empty() ? "no response: " + ec.message() : timed_out_);
    return;
  }
  server::HeaderList headers;
  for (const auto& field : parser_.get())
    headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
  if (handlers_.on_head) handlers_.on_head(int(parser_.get().result_int()), headers);
  if (done_) return;
  if (parser_.is_done()) {
    end("");
    return;
  }
  read_some();
}

void UpstreamCall::read_some() {
  auto& body = parser_.get().body();
  body.data = chunk_.data();
  body.size = chunk_.size();
  arm(request_.idle_timeout, "waiting for the response");
  http::async_read_some(socket_, buffer_, parser_,
                        [self = shared_from_this()](error_code e, size_t) { self->on_read(e); });
}

void UpstreamCall::on_read(error_code ec) {
  if (done_) return;
  if (ec == http::error::need_buffer) ec = {};  // the chunk buffer is full, not an error
  const size_t n = chunk_.size() - parser_.get().body().size;
  if (n > 0 && handlers_.on_data) handlers_.on_data(std::string_view(chunk_.data(), n));
  if (done_) return;
  if (ec) {
    end(timed_out_.empty() ? "the response broke off: " + ec.message() : timed_out_);
    return;
  }
  if (parser_.is_done()) {
    end("");
    return;
  }
  read_some();
}

void UpstreamCall::end(const std::string& error) {
  if (done_) return;
  done_ = true;
  error_code ignored;
  timer_.cancel();
  resolver_.cancel();
  socket_.shutdown(tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
  auto on_end = std::move(handlers_.on_end);
  handlers_ = {};  // drops what the handlers hold as soon as the exchange is over
  if (on_end) on_end(error, connected_);
}

std::shared_ptr<UpstreamCall> fetch(Strand strand, UpstreamRequest request,
                                    std::function<void(UpstreamReply)> done, size_t max_body) {
  auto reply = std::make_shared<UpstreamReply>();
  UpstreamHandlers h;
  h.on_head = [reply](int status, const server::HeaderList& headers) {
    reply->status = status;
    reply->headers = headers;
  };
  h.on_data = [reply, max_body](std::string_view bytes) {
    if (reply->body.size() + bytes.size() > max_body) {
      reply->error = fmt::format("response body over {} bytes", max_body);
      return;
    }
    if (reply->error.empty()) reply->body.append(bytes);
  };
  h.on_end = [reply, done = std::move(done)](const std::string& error, bool connected) {
    if (!error.empty() && reply->error.empty()) reply->error = error;
    if (!reply->error.empty()) reply->status = 0;
    reply->connected = connected;
    done(std::move(*reply));
  };
  return UpstreamCall::start(std::move(strand), std::move(request), std::move(h));
}

}  // namespace kestrel::proxy
