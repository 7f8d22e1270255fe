// proxy/instances.h — the PD proxy's prefill and decode instances and their load (issue 21).
//
// Each instance is one server (one data-parallel rank of an engine group, as the guides list
// them). Its load is what this proxy has sent it and not yet seen finish, in tokens: a prefill's
// prompt tokens until it answers, a decode's prompt plus output tokens until its response ends
// (the original estimates both from the request body's length in bytes). pick() takes the least
// loaded instance that is up; an instance whose connection failed is down until a health probe
// answers; instances added at run time wait for their first answer; removed ones take no new
// requests and are forgotten once idle. Several proxies may run side by side: each balances its
// own traffic, and no request state lives here beyond the loads.
//
// Thread-safe (one mutex): request flows, the routes and the prober share it.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace kestrel::proxy {

enum class Role { kPrefill, kDecode };
const char* role_name(Role role);

struct Instance {
  Role role = Role::kPrefill;
  std::string host;
  uint16_t port = 0;
  std::string address() const;  // host:port
};

// "host:port" (IPv6 hosts in brackets).
Expected<Instance> parse_instance(Role role, const std::string& text);

class InstancePool {
 public:
  using Clock = std::chrono::steady_clock;
  using Handle = std::shared_ptr<const Instance>;

  struct Counts {
    int prefill = 0, decode = 0;  // taking requests
  };

  // The instances given at start take requests at once.
  void add_ready(const Instance& instance);
  // Added at run time: probed until it answers (ready) or `max_probes` probes failed (dropped).
  // False when the address is already known.
  bool add_waiting(const Instance& instance, int max_probes);
  // Takes no new requests; forgotten once its load is zero. False when unknown.
  bool remove(Role role, const std::string& address);

  // The least loaded instance of `role` that is up (ties: fewer requests, then the one picked
  // least recently); when every one is down, the least recently failed of them — a request
  // should try rather than fail while the prober has not run. Adds `tokens` to its load.
  std::optional<Handle> pick(Role role, int64_t tokens);
  void release(const Handle& instance, int64_t tokens);
  // A connection to it failed: down until a probe answers.
  void mark_down(const Handle& instance);

  // Instances to probe now (down or waiting); report each probe's outcome.
  std::vector<Handle> to_probe();
  void probed(const Handle& instance, bool ok);

  Counts counts() const;
  std::vector<Handle> all(Role role) const;  // taking requests or not, except waiting ones

 private:
  enum class State { kUp, kDown, kWaiting, kRemoved };
  struct Entry {
    Handle instance;
    State state = State::kUp;
    int64_t tokens = 0;
    int64_t requests = 0;
    uint64_t last_pick = 0;
    int probes_left = 0;  // waiting
    Clock::time_point down_since;
  };
  Entry* find(const Instance& instance);
  void forget_idle_removed();

  mutable std::mutex mu_;
  std::vector<Entry> entries_;
  uint64_t picks_ = 0;
};

}  // namespace kestrel::proxy
