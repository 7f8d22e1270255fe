// server/http/server_options.h — HttpServer settings.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace kestrel::server {

struct HttpServerOptions {
  std::string host = "0.0.0.0";
  uint16_t port = 0;  // 0: the OS picks a free port; HttpServer::port() tells which
  int io_threads = 2;
  size_t max_body_bytes = 32u << 20;    // larger bodies get 413
  size_t max_header_bytes = 64u << 10;  // larger request heads get 431
  // How long a connection may sit between requests before the server closes it.
  std::chrono::milliseconds keep_alive_timeout{5000};
  // From the first byte of a request to the end of its head (slowloris protection).
  std::chrono::milliseconds header_timeout{10000};
  // From the end of the head to the end of the body.
  std::chrono::milliseconds body_timeout{60000};
  // Longest a single write may wait on a client that does not read.
  std::chrono::milliseconds write_timeout{60000};
  // Connections beyond this many get 503 and are closed; 0 = no cap.
  size_t max_connections = 0;
  // Several servers listen on one port (SO_REUSEPORT; the kernel spreads the connections over
  // them): each must set it, on the same host and port.
  bool reuse_port = false;
};

}  // namespace kestrel::server
