#include "proxy/instances.h"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>

namespace kestrel::proxy {

const char* role_name(Role role) {
  return role == Role::kPrefill ? "prefill" : "decode";
}

std::string Instance::address() const {
  return host.find(':') != std::string::npos ? fmt::format("[{}]:{}", host, port)
                                             : fmt::format("{}:{}", host, port);
}

Expected<Instance> parse_instance(Role role, const std::string& text) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size())
    return make_error("'{}' is not host:port", text);
  std::string host = text.substr(0, colon);
  if (host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  int port = 0;
  const char* first = text.data() + colon + 1;
  const char* last = text.data() + text.size();
  if (std::from_chars(first, last, port).ptr != last || port < 1 || port > 65535)
    return make_error("'{}': the port is not a number in 1-65535", text);
  return Instance{role, host, uint16_t(port)};
}

InstancePool::Entry* InstancePool::find(const Instance& instance) {
  for (Entry& e : entries_)
    if (e.instance->role == instance.role && e.instance->host == instance.host &&
        e.instance->port == instance.port)
      return &e;
  return nullptr;
}

void InstancePool::add_ready(const Instance& instance) {
  std::lock_guard lock(mu_);
  if (Entry* e = find(instance)) {
    e->state = State::kUp;
    return;
  }
  Entry e;
  e.instance = std::make_shared<const Instance>(instance);
  entries_.push_back(std::move(e));
}

bool InstancePool::add_waiting(const Instance& instance, int max_probes) {
  std::lock_guard lock(mu_);
  if (Entry* e = find(instance)) {
    if (e->state != State::kRemoved) return false;
    e->state = State::kWaiting;  // removed and added again: back once it answers
    e->probes_left = std::max(1, max_probes);
    return true;
  }
  Entry e;
  e.instance = std::make_shared<const Instance>(instance);
  e.state = State::kWaiting;
  e.probes_left = std::max(1, max_probes);
  entries_.push_back(std::move(e));
  return true;
}

bool InstancePool::remove(Role role, const std::string& address) {
  std::lock_guard lock(mu_);
  for (Entry& e : entries_) {
    if (e.instance->role != role || e.instance->address() != address) continue;
    e.state = State::kRemoved;
    forget_idle_removed();
    return true;
  }
  return false;
}

void InstancePool::forget_idle_removed() {
  std::erase_if(entries_, [](const Entry& e) {
    return (e.state == State::kRemoved && e.requests == 0) ||
           (e.state == State::kWaiting && e.probes_left <= 0);
  });
}

std::optional<InstancePool::Handle> InstancePool::pick(Role role, int64_t tokens) {
  std::lock_guard lock(mu_);
  Entry* best = nullptr;
  auto better = [](const Entry& a, const Entry& b) {
    if (a.tokens != b.tokens) return a.tokens < b.tokens;
    if (a.requests != b.requests) return a.requests < b.requests;
    return a.last_pick < b.last_pick;
  };
  for (Entry& e : entries_)
    if (e.instance->role == role && e.state == State::kUp && (best == nullptr || better(e, *best)))
      best = &e;
  if (best == nullptr) {
    for (Entry& e : entries_)
      if (e.instance->role == role && e.state == State::kDown &&
          (best == nullptr || e.down_since < best->down_since))
        best = &e;
  }
  if (best == nullptr) return std::nullopt;
  best->tokens += tokens;
  ++best->requests;
  best->last_pick = ++picks_;
  if (best->state == State::kDown) best->down_since = Clock::now();  // the next try goes elsewhere
  return best->instance;
}

void InstancePool::release(const Handle& instance, int64_t tokens) {
  std::lock_guard lock(mu_);
  for (Entry& e : entries_) {
    if (e.instance != instance) continue;
    e.tokens = std::max<int64_t>(0, e.tokens - tokens);
    e.requests = std::max<int64_t>(0, e.requests - 1);
  }
  forget_idle_removed();
}

void InstancePool::mark_down(const Handle& instance) {
  std::lock_guard lock(mu_);
  for (Entry& e : entries_)
    if (e.instance == instance && e.state == State::kUp) {
      e.state = State::kDown;
      e.down_since = Clock::now();
    }
}

std::vector<InstancePool::Handle> InstancePool::to_probe() {
  std::lock_guard lock(mu_);
  std::vector<Handle> out;
  for (const Entry& e : entries_)
    if (e.state == State::kDown || e.state == State::kWaiting) out.push_back(e.instance);
  return out;
}

void InstancePool::probed(const Handle& instance, bool ok) {
  std::lock_guard lock(mu_);
  for (Entry& e : entries_) {
    if (e.instance != instance) continue;
    if (ok && (e.state == State::kDown || e.state == State::kWaiting)) e.state = State::kUp;
    if (!ok && e.state == State::kWaiting) --e.probes_left;
  }
  forget_idle_removed();
}

InstancePool::Counts InstancePool::counts() const {
  std::lock_guard lock(mu_);
  Counts c;
  for (const Entry& e : entries_) {
    if (e.state != State::kUp && e.state != State::kDown) continue;
    ++(e.instance->role == Role::kPrefill ? c.prefill : c.decode);
  }
  return c;
}

std::vector<InstancePool::Handle> InstancePool::all(Role role) const {
  std::lock_guard lock(mu_);
  std::vector<Handle> out;
  for (const Entry& e : entries_)
    if (e.instance->role == role && e.state != State::kWaiting) out.push_back(e.instance);
  return out;
}

}  // namespace kestrel::proxy
