// distributed/group_comm.h — the communicator of a group whose members find each other through the
// rendezvous store (distributed/store.h): each member posts its host address; when every member is
// on one host the group uses shared memory (rank 0 picks the segment's name and posts it),
// otherwise Gloo over TCP bound to each member's address. Expert parallelism across data-parallel
// ranks and the data-parallel ranks' per-step agreement connect their groups this way, whichever
// processes and hosts their members run in.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "distributed/device_comm.h"
#include "distributed/store.h"

namespace kestrel {

struct GroupCommOptions {
  std::string group;  // the group's keys in the store: unique among the run's groups
  int rank = 0, size = 1;
  // This member's address (distributed/local_address.h): its host's identity, and where its Gloo
  // pairs listen.
  std::string host = "127.0.0.1";
  std::chrono::milliseconds connect_timeout{600000};  // for every member to join
  std::chrono::milliseconds timeout{60000};           // for every collective
  // Shared memory only: set when the group has failed, so waits give up at once.
  const std::atomic<bool>* abort = nullptr;
  std::string label = "group";  // what the group is, in errors
  // Checked while waiting for the members: its error (a member known to have failed) ends the
  // wait at once.
  std::function<Status()> alive;
};

// Blocks until every member has joined (or the connect timeout, naming the members missing).
Expected<std::unique_ptr<DeviceComm>> connect_group_comm(const GroupCommOptions& options,
                                                         StoreClient& store);

}  // namespace kestrel
