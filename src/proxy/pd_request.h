// proxy/pd_request.h — one client request through the PD proxy (issue 21): a prefill instance
// computes the prompt (one token, its KV kept), a decode instance loads that KV and generates,
// its response (streamed or not) passes through to the client with the prefill's cached-token
// count. Retries, with exponential back-off, only before the client has seen a byte: a prefill
// that fails (connection, 5xx, 429) is sent elsewhere; a decode stage that fails starts over
// with a new prefill (the first one's lease is released). A decode that gives the request back
// (stop_reason "recomputed") is continued: the prompt plus the text so far, the remaining
// budget, a new prefill and decode, its output appended to what the client already has. When the
// client goes away the backend exchange in progress is closed (the backend aborts the request)
// and a prefill's lease not yet taken by a decode is released.
//
// Each request's state lives on its own strand; the HTTP server's callbacks post onto it.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include <boost/asio/any_io_executor.hpp>

#include "proxy/instances.h"
#include "proxy/lease_releaser.h"
#include "proxy/pd_bodies.h"
#include "server/http/request.h"
#include "server/http/responder.h"

namespace kestrel::proxy {

struct ProxySettings {
  int max_retries = 3;                               // attempts per request, at least one
  std::chrono::duration<double> retry_delay{0.001};  // doubled after each failed attempt
  std::string api_key;                               // OPENAI_API_KEY: sent to every backend
  std::chrono::milliseconds connect_timeout{10000};
  std::chrono::milliseconds idle_timeout{600000};
};

// What every request shares; outlives them (the server drains them before it goes).
struct ProxyContext {
  boost::asio::any_io_executor executor;
  InstancePool* pool = nullptr;
  LeaseReleaser* leases = nullptr;
  ProxySettings settings;
  // Client requests being served (shared: a request outlives the server's threads when its
  // handler is dropped unrun at shutdown).
  std::shared_ptr<std::atomic<int64_t>> in_flight;
};

void run_pd_request(const ProxyContext& context, ApiKind kind, const server::HttpRequest& request,
                    std::shared_ptr<server::Responder> responder);

}  // namespace kestrel::proxy
