// proxy/proxy_server.h — `kestrel proxy`: the PD load-balancing proxy in front of prefill and
// decode instances, with the routes and flags of vLLM-Ascend's
// load_balance_proxy_server_example.py (issue 21). Requests run as pd_request.h describes;
// /healthcheck, /v1/models, /reset_prefix_cache and /instances/{add,remove} are answered here.
// Instances that fail a connection, and instances added at run time, are probed (GET /health)
// every --waiting-retry-interval.
//
// The HTTP server's I/O threads take requests; the backend exchanges run on the proxy's own
// threads (--workers), each request on its strand. run() blocks until stop().
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "proxy/instances.h"
#include "proxy/pd_request.h"

namespace kestrel::proxy {

struct ProxyOptions {
  std::string host = "localhost";
  int port = 8000;
  std::vector<std::string> prefiller_hosts{"localhost"};
  std::vector<int> prefiller_ports{8001};
  std::vector<std::string> decoder_hosts{"localhost"};
  std::vector<int> decoder_ports{8002};
  int max_retries = 3;
  double retry_delay = 0.001;          // seconds, doubled per failed attempt
  int max_waiting_retries = 3;         // probes of an added instance before it is dropped
  double waiting_retry_interval = 10;  // seconds between probes
  int workers = 1;
  std::string log_level = "info";
  std::string api_key;  // sent to every backend (the CLI takes it from OPENAI_API_KEY)
};

// Checks the flags (host and port lists of equal length, positive counts, ports in range).
Status check_proxy_options(const ProxyOptions& options);

class ProxyServer {
 public:
  explicit ProxyServer(ProxyOptions options);
  ~ProxyServer();
  // Binds and starts serving; port() is known after it.
  Status start();
  uint16_t port() const;
  // Stops accepting, lets requests in flight finish within `grace`, stops the threads.
  void stop(std::chrono::milliseconds grace);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace kestrel::proxy
