// engine/dp_group.h — what a process needs to take part in expert parallelism across
// data-parallel ranks (issue 20): where the group meets — rank 0's store and notice board
// (distributed/store.h) at --data-parallel-address:--data-parallel-rpc-port, or at an ipc path when
// every rank runs in this process — this process's address toward it, and the abort flag its
// process tree shares (distributed/shared_flag.h). Rank 0's process serves the store; every model
// rank joins the expert communicator of its TP index through it; every scheduler joins the
// lockstep; a process with ranks but no scheduler (--headless) watches the notice board so that
// a lost group aborts its collectives.
//
// Made before the process forks its tensor-parallel workers, which use it (connect_experts)
// in their own process; start() and watch() start threads. Owned by the process's start-up
// code; abort() is thread- and process-safe.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "base/status.h"
#include "distributed/device_comm.h"
#include "distributed/local_address.h"
#include "distributed/shared_flag.h"
#include "distributed/store.h"
#include "engine/dp_lockstep.h"

namespace kestrel {

struct DpGroupSpec {
  int size = 1;                       // --data-parallel-size
  bool all_local = false;             // every rank (and its scheduler) runs in this process
  bool serves = false;                // this process runs rank 0's scheduler: it serves the store
  std::string address = "127.0.0.1";  // --data-parallel-address
  int rpc_port = 29550;               // --data-parallel-rpc-port
  std::chrono::milliseconds start_timeout{600000};  // every rank up
  std::chrono::milliseconds collective_timeout{60000};
  AddressHints address_hints;  // where this host's address toward rank 0 is named outright
};

class DpGroup {
 public:
  // Picks the endpoint and this process's address (no threads, no sockets yet).
  static Expected<std::unique_ptr<DpGroup>> plan(const DpGroupSpec& spec);
  ~DpGroup();

  // Rank 0's process: serves the store and notice board (after forking: it starts a thread).
  Status start();
  // The communicator of the model ranks with TP index `tp_rank`, as data-parallel rank
  // `dp_rank`; blocks until every member has joined (`alive` ends the wait early).
  Expected<std::unique_ptr<DeviceComm>> connect_experts(int dp_rank, int tp_rank,
                                                        const std::function<Status()>& alive) const;
  // Data-parallel rank `dp_rank`'s place in the lockstep, for the process running its scheduler.
  Expected<std::unique_ptr<DpLockstep>> join_lockstep(int dp_rank,
                                                      const std::string& settings) const;
  // A process with model ranks but no scheduler: a lost or failed group aborts its collectives.
  Status watch(const std::string& name);

  std::atomic<bool>& abort() const { return abort_.get(); }
  const std::string& endpoint() const { return endpoint_; }
  const std::string& host() const { return host_; }

 private:
  DpGroup(const DpGroupSpec& spec, std::string endpoint, std::string host);
  DpGroupSpec spec_;
  std::string endpoint_, host_;
  SharedFlag abort_;
  std::unique_ptr<StoreServer> server_;
  std::unique_ptr<StoreSubscriber> watcher_;
};

}  // namespace kestrel
