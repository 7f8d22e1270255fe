// server/http/http_server.h — the HTTP/1.1 server core (Boost.Asio/Beast, all asynchronous).
//
// A fixed pool of I/O threads serves every connection; idle keep-alive connections and open
// streams cost no thread. Handlers run on an I/O thread and should return quickly, answering
// through their Responder later from any thread (see responder.h).
//
// Shutdown, wired from main():
//   SignalWaiter signals;            // before serving, so SIGINT/SIGTERM are caught
//   server.start(); ...
//   signals.wait();
//   server.stop_accepting();
//   server.shutdown(std::chrono::seconds(30));
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"
#include "server/http/request.h"
#include "server/http/responder.h"
#include "server/http/router.h"
#include "server/http/server_options.h"

namespace kestrel::server {

class HttpServer {
 public:
  explicit HttpServer(HttpServerOptions options);
  ~HttpServer();  // shutdown(0) if still running
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Registers the handler for exact (method, path); only before start().
  void route(std::string method, std::string path, Handler handler);

  // Binds, listens and starts the I/O threads.
  Status start();

  // The bound port (useful with options.port = 0); 0 before start().
  uint16_t port() const;

  // Open connections (including idle keep-alive ones).
  size_t connection_count() const;

  // Closes the listening socket: later connection attempts are refused. Idempotent. From a
  // thread other than the server's I/O threads it returns once the socket is closed.
  void stop_accepting();

  // Stops accepting, closes idle connections, waits up to `grace` for in-flight responses
  // (each then closes its connection), closes what remains (firing on_disconnect) and joins the
  // I/O threads. Idempotent. Must not be called from a handler or an I/O thread.
  void shutdown(std::chrono::milliseconds grace);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace kestrel::server
