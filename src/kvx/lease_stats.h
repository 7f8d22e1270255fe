// kvx/lease_stats.h — a producer's lease counters, as /metrics reports them.
#pragma once

#include <cstdint>

namespace kestrel {

struct LeaseStats {
  int64_t active = 0;
  int64_t created = 0;
  int64_t released = 0;
  int64_t expired = 0;
  int64_t heartbeats = 0;  // heartbeat messages answered
};

}  // namespace kestrel
