#include "distributed/group_comm.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <random>

#include "base/logging.h"
#include "distributed/gloo_comm.h"
#include "distributed/shm_comm.h"

namespace kestrel {

namespace {

std::vector<char> bytes_of(const std::string& s) {
  return std::vector<char>(s.begin(), s.end());
}

// A segment name from the group's (letters and digits only) and a nonce: unique on the host.
std::string shm_name(const std::string& group) {
  std::string tag;
  for (char c : group) tag += std::isalnum(static_cast<unsigned char>(c)) ? c : '-';
  const uint64_t nonce = (uint64_t(std::random_device{}()) << 32) | std::random_device{}();
  return fmt::format("/kestrel-{}-{}-{:x}", tag, ::getpid(), nonce);
}

}  // namespace

Expected<std::unique_ptr<DeviceComm>> connect_group_comm(const GroupCommOptions& o,
                                                         StoreClient& store) {
  if (o.size < 1 || o.rank < 0 || o.rank >= o.size)
    return make_error("{} group: rank {} of {} is not a rank of the group", o.label, o.rank,
                      o.size);
  KTRY(store.set(fmt::format("{}/host/{}", o.group, o.rank), bytes_of(o.host)));
  std::vector<std::string> keys;
  for (int r = 0; r < o.size; ++r) keys.push_back(fmt::format("{}/host/{}", o.group, r));
  if (Status st = store.wait(keys, o.connect_timeout, o.alive); !st.ok())
    return make_error("{} group: not every member joined: {}", o.label, st.message());
  bool one_host = true;
  for (const std::string& k : keys) {
    KASSIGN(const std::vector<char> h, store.get(k));
    one_host = one_host && std::string(h.begin(), h.end()) == o.host;
  }
  if (one_host) {
    std::string name;
    if (o.rank == 0) {
      name = shm_name(o.group);
      KTRY(store.set(o.group + "/shm", bytes_of(name)));
    } else {
      KASSIGN(const std::vector<char> n, store.get(o.group + "/shm"));
      name.assign(n.begin(), n.end());
    }
    ShmCommOptions so;
    so.name = name;
    so.rank = o.rank;
    so.size = o.size;
    so.timeout = o.timeout;
    so.abort = o.abort;
    so.label = o.label;
    KASSIGN(auto comm, ShmComm::connect(so));
    return std::unique_ptr<DeviceComm>(std::move(comm));
  }
  GlooCommOptions go;
  go.rank = o.rank;
  go.size = o.size;
  go.bind_address = o.host;
  go.prefix = o.group + "/gloo";
  go.timeout = o.timeout;
  go.label = o.label;
  KLOG_INFO("{} group: rank {} of {} over Gloo (TCP) from {}", o.label, o.rank, o.size, o.host);
  KASSIGN(auto comm, GlooComm::connect(go, store));
  return std::unique_ptr<DeviceComm>(std::move(comm));
}

}  // namespace kestrel
