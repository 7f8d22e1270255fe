// kvx/kv_worker.h — one model rank's part in prefill/decode disaggregation (issue 21): on a
// producer, the KV server that lets consumers read this rank's blocks (rank 0's also answers
// the lease messages); on a consumer, the puller that runs the step's KvLoads and reports them.
// The model runner owns it next to the KV pool it reads and writes, and calls it from its
// thread: start() with each step's loads, finished() for the step's RunnerOutput.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kvx/kv_puller.h"
#include "kvx/kv_server.h"
#include "kvx/kv_transfer_config.h"
#include "kvx/ucx_transport.h"
#include "sched/runner_output.h"
#include "sched/scheduler_output.h"

namespace kestrel {

struct KvWorkerOptions {
  KvRankInfo self;
  bool serve = false;  // a producer rank: listen on host:port
  std::string host = "0.0.0.0";
  int port = 0;
  KvControlHandler control;  // rank 0 of a producer: the engine's leases
  bool pull = false;         // a consumer rank
  int pull_threads = 2;
  KvTransport transport = KvTransport::kTcp;
};

class KvWorker {
 public:
  static Expected<std::unique_ptr<KvWorker>> start(KVMemoryView memory, KvWorkerOptions options);

  // Starts the step's loads (their blocks are the transfer's until reported).
  void start_loads(const std::vector<KvLoad>& loads);
  // Loads finished since the last call.
  std::vector<KvLoadResult> finished();
  const KvServer* server() const { return server_.get(); }
  const KvPuller* puller() const { return puller_.get(); }

 private:
  KvWorker() = default;
  std::unique_ptr<UcxProducer> ucx_;  // declared before the server, which advertises it
  std::unique_ptr<KvServer> server_;
  std::unique_ptr<KvPuller> puller_;
};

}  // namespace kestrel
