#include "server/http/connection.h"

#include <cstring>

#include <utility>

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/error.hpp>

#include "base/logging.h"
#include "server/http/json_error.h"
#include "server/http/wire.h"

namespace kestrel::server::detail {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using boost::system::error_code;

namespace {

// Bytes a client may send ahead while its request is being answered (pipelining) before the
// server gives up on it.
constexpr size_t kMaxBufferedWhileBusy = 1 << 20;
// How long a rejected request may keep sending before the socket is closed; draining it first
// lets the client read the error instead of getting a reset.
constexpr std::chrono::milliseconds kLingerTimeout{2000};

}  // namespace

Connection::Connection(asio::ip::tcp::socket socket, uint64_t id, ConnectionOwner& owner)
    : socket_(std::move(socket)),
      read_timer_(socket_.get_executor()),
      write_timer_(socket_.get_executor()),
      id_(id),
      owner_(owner) {
  error_code ec;
  auto remote = socket_.remote_endpoint(ec);
  if (!ec) {
    remote_ip_ = remote.address().to_string();
    remote_port_ = remote.port();
  }
}

void Connection::start() {
  asio::post(executor(), [self = shared_from_this()] {
    self->arm_read_timer(self->owner_.options().keep_alive_timeout);
    self->start_read();
  });
}

void Connection::start_rejecting(int status, std::string type, std::string message) {
  asio::post(executor(), [self = shared_from_this(), status, type = std::move(type),
                          message = std::move(message)] {
    self->send_error_and_close(status, type, message);
    self->start_read();
  });
}

void Connection::close_if_idle() {
  asio::post(executor(), [self = shared_from_this()] {
    bool idle = self->phase_ == Phase::kAwaitRequest && self->stage_ == Stage::kIdle &&
                self->buffer_.size() == 0;
    if (idle || self->phase_ == Phase::kLingering) self->close_now();
  });
}

void Connection::force_close() {
  asio::post(executor(), [self = shared_from_this()] { self->close_now(); });
}

void Connection::start_read() {
  if (phase_ == Phase::kClosed) return;
  socket_.async_read_some(
      asio::buffer(read_chunk_),
      [self = shared_from_this()](error_code ec, size_t n) { self->on_read(ec, n); });
}

void Connection::on_read(error_code ec, size_t n) {
  if (phase_ == Phase::kClosed) return;
  if (ec) {
    // EOF or reset: before a response completes this is the client going away.
    if (responder_) KLOG_DEBUG("connection {}: client gone ({})", id_, ec.message());
    close_now();
    return;
  }
  const auto dst = buffer_.prepare(n);
  std::memcpy(dst.data(), read_chunk_.data(), n);
  buffer_.commit(n);
  switch (phase_) {
    case Phase::kAwaitRequest:
      parse_buffered();
      break;
    case Phase::kLingering:
      buffer_.consume(buffer_.size());
      break;
    case Phase::kHandling:
    case Phase::kResponding:
      if (buffer_.size() > kMaxBufferedWhileBusy) {
        KLOG_WARN("connection {}: client sent too much data ahead of its response", id_);
        close_now();
      }
      break;
    case Phase::kClosed:
      break;
  }
  start_read();
}

void Connection::parse_buffered() {
  const HttpServerOptions& options = owner_.options();
  while (phase_ == Phase::kAwaitRequest && buffer_.size() > 0) {
    if (!parser_) {
      parser_.emplace();
      parser_->body_limit(options.max_body_bytes);
      parser_->header_limit(static_cast<std::uint32_t>(options.max_header_bytes));
      parser_->eager(true);
    }
    if (stage_ == Stage::kIdle) {
      stage_ = Stage::kHead;
      arm_read_timer(options.header_timeout);
    }
    error_code ec;
    size_t used = parser_->put(buffer_.data(), ec);
    buffer_.consume(used);
    if (ec && ec != http::error::need_more) {
      reject_request(ec);
      return;
    }
    if (stage_ == Stage::kHead && parser_->is_header_done()) {
      stage_ = Stage::kBody;
      arm_read_timer(options.body_timeout);
      maybe_send_continue();
    }
    if (parser_->is_done()) {
      dispatch();
      return;
    }
    if (ec || used == 0) return;
  }
}

void Connection::maybe_send_continue() {
  const auto& msg = parser_->get();
  auto expect = msg.find(http::field::expect);
  if (expect == msg.end() || msg.version() != 11 || parser_->is_done()) return;
  if (!iequals(std::string_view(expect->value().data(), expect->value().size()), "100-continue")) {
    return;
  }
  out_.emplace_back("HTTP/1.1 100 Continue\r\n\r\n");
  kick_write();
}

void Connection::reject_request(error_code ec) {
  const HttpServerOptions& options = owner_.options();
  if (ec == http::error::body_limit) {
    send_error_and_close(
        413, "RequestTooLargeError",
        fmt::format("Request body exceeds the limit of {} bytes", options.max_body_bytes));
  } else if (ec == http::error::header_limit) {
    send_error_and_close(
        431, "RequestHeaderFieldsTooLargeError",
        fmt::format("Request head exceeds the limit of {} bytes", options.max_header_bytes));
  } else {
    send_error_and_close(400, "BadRequestError", "Malformed HTTP request: " + ec.message());
  }
}

void Connection::send_error_and_close(int status, std::string_view type, std::string_view message) {
  KLOG_DEBUG("connection {}: {} {}", id_, status, message);
  std::string body = json_error_body(status, type, message);
  parser_.reset();
  disarm_read_timer();
  phase_ = Phase::kResponding;
  out_.push_back(format_response_head({.status = status,
                                       .version = 11,
                                       .content_type = "application/json",
                                       .content_length = body.size(),
                                       .chunked = false,
                                       .close = true}));
  out_.push_back(std::move(body));
  final_queued_ = true;
  close_after_ = true;
  linger_after_ = true;
  kick_write();
}

void Connection::dispatch() {
  auto msg = parser_->release();
  parser_.reset();
  stage_ = Stage::kIdle;
  disarm_read_timer();

  HttpRequest req;
  req.method = std::string(msg.method_string());
  req.target = std::string(msg.target());
  size_t q = req.target.find('?');
  req.path = req.target.substr(0, q);
  if (q != std::string::npos) req.query = req.target.substr(q + 1);
  req.version = msg.version() == 10 ? 10 : 11;
  for (const auto& field : msg) {
    req.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
  }
  req.body = std::move(msg.body());
  req.remote_ip = remote_ip_;
  req.remote_port = remote_port_;

  version_ = req.version;
  keep_alive_ = msg.keep_alive();
  head_request_ = msg.method() == http::verb::head;
  responder_ = std::make_shared<Responder>(weak_from_this());
  phase_ = Phase::kHandling;
  owner_.router().dispatch(req, responder_);
}

void Connection::write_response(const Responder* r, int status, std::string content_type,
                                HeaderList extra, std::string body) {
  if (phase_ == Phase::kClosed || responder_.get() != r) return;
  close_after_ = !keep_alive_ || owner_.stopping();
  linger_after_ = false;
  out_.push_back(format_response_head({.status = status,
                                       .version = version_,
                                       .content_type = content_type,
                                       .content_length = body.size(),
                                       .chunked = false,
                                       .close = close_after_,
                                       .extra = &extra}));
  if (!body.empty() && !head_request_) out_.push_back(std::move(body));
  phase_ = Phase::kResponding;
  final_queued_ = true;
  kick_write();
}

void Connection::write_stream_head(const Responder* r, int status, std::string content_type,
                                   HeaderList extra) {
  if (phase_ == Phase::kClosed || responder_.get() != r) return;
  // HTTP/1.0 has no chunked encoding: the end of the stream is the end of the connection.
  chunked_ = version_ == 11;
  close_after_ = !chunked_ || !keep_alive_ || owner_.stopping();
  linger_after_ = false;
  out_.push_back(format_response_head({.status = status,
                                       .version = version_,
                                       .content_type = content_type,
                                       .content_length = std::nullopt,
                                       .chunked = chunked_,
                                       .close = close_after_,
                                       .extra = &extra}));
  phase_ = Phase::kResponding;
  kick_write();
}

void Connection::write_chunk(const Responder* r, std::string data) {
  if (phase_ == Phase::kClosed || responder_.get() != r || head_request_) return;
  out_.push_back(chunked_ ? format_chunk(data) : std::move(data));
  kick_write();
}

void Connection::write_stream_end(const Responder* r) {
  if (phase_ == Phase::kClosed || responder_.get() != r) return;
  if (chunked_ && !head_request_) out_.emplace_back(kLastChunk);
  final_queued_ = true;
  kick_write();
}

void Connection::abort_exchange(const Responder* r) {
  if (phase_ == Phase::kClosed || responder_.get() != r) return;
  responder_->mark_complete();  // the handler chose this; on_disconnect is not for it
  responder_.reset();
  close_now();
}

void Connection::kick_write() {
  if (writing_ || phase_ == Phase::kClosed) return;
  if (out_.empty()) {
    if (final_queued_) finish_response();
    return;
  }
  write_bufs_.clear();
  for (const std::string& s : out_) write_bufs_.push_back(asio::buffer(s));
  in_flight_ = out_.size();
  writing_ = true;
  write_timer_.expires_after(owner_.options().write_timeout);
  write_timer_.async_wait([self = shared_from_this()](error_code ec) { self->on_write_timer(ec); });
  asio::async_write(socket_, write_bufs_,
                    [self = shared_from_this()](error_code ec, size_t) { self->on_write(ec); });
}

void Connection::on_write(error_code ec) {
  writing_ = false;
  write_timer_.expires_at(asio::steady_timer::time_point::max());
  if (phase_ == Phase::kClosed) return;
  if (ec) {
    KLOG_DEBUG("connection {}: write failed ({})", id_, ec.message());
    close_now();
    return;
  }
  out_.erase(out_.begin(), out_.begin() + static_cast<std::ptrdiff_t>(in_flight_));
  in_flight_ = 0;
  kick_write();
}

void Connection::finish_response() {
  final_queued_ = false;
  if (responder_) {
    responder_->mark_complete();
    responder_.reset();
  }
  if (close_after_) {
    if (!linger_after_) {
      close_now();
      return;
    }
    error_code ignored;
    socket_.shutdown(asio::ip::tcp::socket::shutdown_send, ignored);
    buffer_.consume(buffer_.size());
    phase_ = Phase::kLingering;
    arm_read_timer(kLingerTimeout);
    return;
  }
  if (owner_.stopping()) {
    close_now();
    return;
  }
  phase_ = Phase::kAwaitRequest;
  arm_read_timer(owner_.options().keep_alive_timeout);
  parse_buffered();  // a pipelined request may already be here
}

void Connection::close_now() {
  if (phase_ == Phase::kClosed) return;
  phase_ = Phase::kClosed;
  error_code ignored;
  socket_.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
  read_timer_.cancel();
  write_timer_.cancel();
  if (auto responder = std::move(responder_)) responder->mark_disconnected();
  owner_.connection_closed(id_);
}

void Connection::arm_read_timer(std::chrono::milliseconds after) {
  read_timer_.expires_after(after);
  read_timer_.async_wait([self = shared_from_this()](error_code ec) { self->on_read_timer(ec); });
}

void Connection::disarm_read_timer() {
  // A far expiry (rather than cancel()) also defuses a completion already queued.
  read_timer_.expires_at(asio::steady_timer::time_point::max());
}

void Connection::on_read_timer(error_code ec) {
  if (ec == asio::error::operation_aborted || phase_ == Phase::kClosed) return;
  if (read_timer_.expiry() > asio::steady_timer::clock_type::now()) return;
  if (phase_ == Phase::kAwaitRequest || phase_ == Phase::kLingering) {
    if (stage_ != Stage::kIdle) KLOG_DEBUG("connection {}: request read timed out", id_);
    close_now();
  }
}

void Connection::on_write_timer(error_code ec) {
  if (ec == asio::error::operation_aborted || phase_ == Phase::kClosed || !writing_) return;
  if (write_timer_.expiry() > asio::steady_timer::clock_type::now()) return;
  KLOG_INFO("connection {}: client stopped reading; closing", id_);
  close_now();
}

}  // namespace kestrel::server::detail
