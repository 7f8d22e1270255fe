// server/responses_store.h — the Responses API's stored responses, kept for GET
// /v1/responses/{id}, cancel and previous_response_id. As in vLLM the store is off unless
// VLLM_ENABLE_RESPONSES_API_STORE=1; unlike vLLM it is bounded: past `capacity` entries the
// oldest finished one is dropped. Thread-safe: HTTP threads and the engine client's output thread
// call it concurrently.
#pragma once

#include <cstddef>
#include <functional>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include <nlohmann/json.hpp>

namespace kestrel::server {

class ResponsesStore {
 public:
  explicit ResponsesStore(size_t capacity) : capacity_(capacity) {}

  struct Stored {
    nlohmann::ordered_json response;  // the response object as GET returns it
    nlohmann::json messages;          // the chat messages it was rendered from (its input)
  };

  // Stores a response that is starting (status queued or in_progress) or finished. `cancel`
  // stops a running one; it is dropped once the response is finished.
  void put(const std::string& id, nlohmann::ordered_json response, nlohmann::json messages,
           std::function<void()> cancel = {});
  // The final object of a response stored by put(); a cancelled response keeps its object.
  void finish(const std::string& id, nlohmann::ordered_json response);
  std::optional<Stored> get(const std::string& id) const;

  enum class CancelResult { kNotFound, kNotRunning, kCancelled };
  // Marks a queued or in-progress response cancelled (status "cancelled", output [], usage
  // null) and stops it; `out` gets the object either way when found.
  CancelResult cancel(const std::string& id, nlohmann::ordered_json& out);

  size_t size() const;

 private:
  struct Entry {
    Stored stored;
    std::function<void()> cancel;
    bool running = false;
    std::list<std::string>::iterator order;
  };
  void evict_locked();

  const size_t capacity_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, Entry> entries_;
  std::list<std::string> order_;  // oldest first
};

}  // namespace kestrel::server
