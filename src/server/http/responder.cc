#include "server/http/responder.h"

#include <utility>

#include <boost/asio/post.hpp>

#include "server/http/connection.h"

namespace kestrel::server {

Responder::Responder(std::weak_ptr<detail::Connection> connection)
    : connection_(std::move(connection)) {}

template <typename Work>
void Responder::post_locked(Work work) {
  if (!open_) return;
  auto conn = connection_.lock();
  if (!conn) return;
  // Holding mu_ while posting keeps calls from different threads in one order on the strand and
  // keeps any post from racing with the connection's close.
  boost::asio::post(conn->executor(),
                    [conn, self = shared_from_this(), work = std::move(work)]() mutable {
                      work(*conn, self.get());
                    });
}

bool Responder::respond(int status, std::string_view content_type, std::string body,
                        HeaderList extra_headers) {
  std::lock_guard lock(mu_);
  if (state_ != State::kNew || !open_) return false;
  state_ = State::kComplete;
  post_locked(
      [status, type = std::string(content_type), body = std::move(body),
       extra = std::move(extra_headers)](detail::Connection& c, const Responder* r) mutable {
        c.write_response(r, status, std::move(type), std::move(extra), std::move(body));
      });
  return true;
}

bool Responder::start_stream(int status, std::string_view content_type, HeaderList extra_headers) {
  std::lock_guard lock(mu_);
  if (state_ != State::kNew || !open_) return false;
  state_ = State::kStreaming;
  post_locked([status, type = std::string(content_type), extra = std::move(extra_headers)](
                  detail::Connection& c, const Responder* r) mutable {
    c.write_stream_head(r, status, std::move(type), std::move(extra));
  });
  return true;
}

void Responder::send_chunk(std::string data) {
  if (data.empty()) return;
  std::lock_guard lock(mu_);
  if (state_ != State::kStreaming) return;
  post_locked([data = std::move(data)](detail::Connection& c, const Responder* r) mutable {
    c.write_chunk(r, std::move(data));
  });
}

void Responder::end_stream() {
  std::lock_guard lock(mu_);
  if (state_ != State::kStreaming) return;
  state_ = State::kStreamEnded;
  post_locked([](detail::Connection& c, const Responder* r) { c.write_stream_end(r); });
}

void Responder::abort() {
  std::lock_guard lock(mu_);
  if (state_ != State::kNew && state_ != State::kStreaming) return;
  state_ = State::kAborted;
  post_locked([](detail::Connection& c, const Responder* r) { c.abort_exchange(r); });
}

void Responder::on_disconnect(std::function<void()> callback) {
  std::unique_lock lock(mu_);
  if (open_) {
    on_disconnect_ = std::move(callback);
    return;
  }
  bool fire = disconnected_;
  lock.unlock();
  if (fire && callback) callback();
}

bool Responder::is_open() const {
  std::lock_guard lock(mu_);
  return open_;
}

void Responder::mark_complete() {
  std::function<void()> dropped;
  std::lock_guard lock(mu_);
  open_ = false;
  dropped = std::move(on_disconnect_);
}

void Responder::mark_disconnected() {
  std::function<void()> callback;
  {
    std::lock_guard lock(mu_);
    if (!open_) return;
    open_ = false;
    disconnected_ = true;
    callback = std::move(on_disconnect_);
  }
  if (callback) callback();
}

}  // namespace kestrel::server
