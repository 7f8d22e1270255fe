#include "server/responses_store.h"

#include <utility>

namespace kestrel::server {

namespace {

bool is_running(const nlohmann::ordered_json& response) {
  const auto& status = response.at("status");
  return status == "queued" || status == "in_progress";
}

}  // namespace

void ResponsesStore::put(const std::string& id, nlohmann::ordered_json response,
                         nlohmann::json messages, std::function<void()> cancel) {
  std::lock_guard lock(mu_);
  if (auto it = entries_.find(id); it != entries_.end()) {
    order_.erase(it->second.order);
    entries_.erase(it);
  }
  order_.push_back(id);
  Entry e;
  e.running = is_running(response);
  e.stored = {std::move(response), std::move(messages)};
  e.cancel = e.running ? std::move(cancel) : nullptr;
  e.order = std::prev(order_.end());
  entries_.emplace(id, std::move(e));
  evict_locked();
}

void ResponsesStore::finish(const std::string& id, nlohmann::ordered_json response) {
  std::function<void()> drop;
  std::lock_guard lock(mu_);
  const auto it = entries_.find(id);
  if (it == entries_.end()) return;
  Entry& e = it->second;
  e.running = false;
  drop = std::move(e.cancel);
  if (e.stored.response.at("status") != "cancelled") e.stored.response = std::move(response);
  evict_locked();
}

std::optional<ResponsesStore::Stored> ResponsesStore::get(const std::string& id) const {
  std::lock_guard lock(mu_);
  const auto it = entries_.find(id);
  if (it == entries_.end()) return std::nullopt;
  return it->second.stored;
}

ResponsesStore::CancelResult ResponsesStore::cancel(const std::string& id,
                                                    nlohmann::ordered_json& out) {
  std::function<void()> stop;
  {
    std::lock_guard lock(mu_);
    const auto it = entries_.find(id);
    if (it == entries_.end()) return CancelResult::kNotFound;
    Entry& e = it->second;
    if (!e.running) {
      out = e.stored.response;
      return CancelResult::kNotRunning;
    }
    e.running = false;
    e.stored.response["status"] = "cancelled";
    e.stored.response["output"] = nlohmann::ordered_json::array();
    e.stored.response["usage"] = nullptr;
    out = e.stored.response;
    stop = std::move(e.cancel);
  }
  // Outside the lock: stopping the request leads to finish() on another thread.
  if (stop) stop();
  return CancelResult::kCancelled;
}

size_t ResponsesStore::size() const {
  std::lock_guard lock(mu_);
  return entries_.size();
}

void ResponsesStore::evict_locked() {
  for (auto it = order_.begin(); entries_.size() > capacity_ && it != order_.end();) {
    const auto entry = entries_.find(*it);
    if (entry->second.running) {
      ++it;
      continue;
    }
    entries_.erase(entry);
    it = order_.erase(it);
  }
}

}  // namespace kestrel::server
