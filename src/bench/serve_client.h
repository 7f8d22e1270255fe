// bench/serve_client.h — the load-generating half of `kestrel bench serve`: an asynchronous
// OpenAI streaming client that sends each request at its scheduled time, caps the number in
// flight, and times every streamed chunk as vLLM's benchmark client does.
//
// Everything runs on one Asio io_context on the calling thread, one connection per request, so
// thousands of concurrent streams cost sockets, not threads. With no concurrency cap each request
// holds a file descriptor for its whole stream: keep RLIMIT_NOFILE above the expected count.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/serve_metrics.h"

namespace kestrel::bench {

struct ClientOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 8000;
  std::string api_key;  // sent as "Authorization: Bearer <key>" when not empty
  // From sending a request to the end of its stream; a request still running then fails.
  std::chrono::seconds request_timeout{600};
};

struct ServeRequest {
  std::string endpoint;  // "/v1/completions" or "/v1/chat/completions"
  // The OpenAI request body; the client adds stream:true and stream_options.include_usage:true.
  nlohmann::json body;
  int64_t prompt_len = 0;
  double send_at_s = 0;    // seconds after the run starts
  std::string request_id;  // sent as x-request-id when not empty
};

// Sends every request at its send_at_s, never more than max_concurrency in flight (0 = no cap;
// a due request waits for a free slot, as behind vLLM's semaphore), and returns one trace per
// request in input order. A trace's start_s is when the request actually left, so a request that
// waited for a slot is timed from then. A content chunk is one with non-empty `choices` whose
// first choice carries text (completions `text`; chat `delta.content`, `delta.reasoning`,
// `delta.reasoning_content` or `delta.tool_calls`). output_tokens is the final usage chunk's
// completion_tokens, or the number of content chunks if the server sent no usage. Failures
// (unreachable server, non-200 status, an error event, a malformed stream, a timeout) give
// success=false with the reason in `error`; they never stop the run. `on_done`, when set, runs on
// the calling thread after each request finishes, with the number finished so far.
std::vector<RequestTrace> run_requests(const ClientOptions& options,
                                       const std::vector<ServeRequest>& requests,
                                       int max_concurrency,
                                       const std::function<void(size_t done)>& on_done = {});

}  // namespace kestrel::bench
