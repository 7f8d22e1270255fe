// server/http/responder.h — the handle a handler answers through, from any thread, at any time.
//
// Exactly one response per request: either respond() once, or start_stream(), any number of
// send_chunk() and end_stream(). Calls never block: they queue work on the connection's strand,
// which writes in call order. Once the client is gone or the response is complete, every call is
// a harmless no-op.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "server/http/request.h"

namespace kestrel::server {

namespace detail {
class Connection;
}  // namespace detail

class Responder : public std::enable_shared_from_this<Responder> {
 public:
  // Complete response with Content-Length. Returns false (and sends nothing) if a response was
  // already started or the client is gone.
  bool respond(int status, std::string_view content_type, std::string body,
               HeaderList extra_headers = {});

  // Starts a streamed response: chunked for HTTP/1.1 (the connection stays reusable), delimited
  // by closing the connection for HTTP/1.0. Returns false as respond() does.
  bool start_stream(int status, std::string_view content_type = "text/event-stream",
                    HeaderList extra_headers = {});

  // Queues one piece of the stream, written as soon as the socket allows; empty data is ignored.
  void send_chunk(std::string data);

  // Completes the stream.
  void end_stream();

  // Gives up on this response: closes the connection unless a complete response (or the end of a
  // stream) is already queued. Does not fire on_disconnect.
  void abort();

  // `callback` runs once if the connection closes before the response is complete (client went
  // away, write timeout, server shutdown). It runs on an I/O thread and must not block; if the
  // client is already gone it runs at once on the calling thread. Replaces an earlier callback.
  void on_disconnect(std::function<void()> callback);

  // True until the response is completely written or the connection closed.
  bool is_open() const;

  // Server side: made with make_shared by the connection; the mark_* hooks run on its strand.
  explicit Responder(std::weak_ptr<detail::Connection> connection);
  void mark_complete();
  void mark_disconnected();

 private:
  enum class State { kNew, kComplete, kStreaming, kStreamEnded, kAborted };

  // Posts `work` to the connection's strand unless the exchange is closed; caller holds mu_.
  template <typename Work>
  void post_locked(Work work);

  mutable std::mutex mu_;
  State state_ = State::kNew;
  bool open_ = true;
  bool disconnected_ = false;
  std::function<void()> on_disconnect_;
  std::weak_ptr<detail::Connection> connection_;
};

}  // namespace kestrel::server
