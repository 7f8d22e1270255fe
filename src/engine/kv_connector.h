// engine/kv_connector.h — the engine side of prefill/decode disaggregation (issue 21), called by
// the engine core on its thread at fixed points of each request's life.
//
// Producer (kv_producer, kv_both): a request with do_remote_decode holds its blocks when it
// finishes (sched/scheduler.h); lease_held() puts them under a lease (kvx/lease_registry.h) and
// returns the kv_transfer_params its response carries (with the state slot held for a model
// with linear-attention layers, sched/scheduler.h). Leases that a consumer releases or lets
// expire give their blocks back at the start of the next step. Rank 0's KV server answers the
// consumers' lease messages through control().
//
// Consumer (kv_consumer, kv_both): a request with do_remote_prefill is admitted with the
// producer's blocks to load, and its lease is kept alive (kvx/lease_client.h) from then on. When
// the workers report the load, the lease is released, and the answer decides: loaded only if the
// load succeeded and the lease was whole until then; otherwise, by kv_load_failure_policy, the
// request prefills locally (recompute) or ends with the error. Every other exit — abort,
// rejection, a failed step — releases the lease too, exactly once.
//
// Engine thread only, except the wake callback (the lease registry's and client's threads) and
// control() (the KV server's connection threads), which touch only the registry.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/protocol.h"
#include "kvx/kv_server.h"
#include "kvx/kv_transfer_config.h"
#include "kvx/lease_client.h"
#include "kvx/lease_registry.h"
#include "model/causal_lm.h"
#include "sched/scheduler.h"

namespace kestrel {

// What a model rank's KV pool is, for the transfer handshake: the compatibility key from the
// model (its type, layers, the whole model's KV heads, head width, cache dtype and kind, the
// block size, and the linear-attention layers' shape from `whole`) and this rank's heads
// [head_begin, head_begin + its count) of total_heads; with linear-attention layers also its
// key heads from key_head_begin and how a state slot is cut (kvx/kv_rank.h).
KvRankInfo model_kv_rank(const CausalLM& model, const KVMemoryView& memory, int block_size,
                         std::string engine_id, uint64_t epoch, int tp_rank, int tp_size,
                         int head_begin, int total_heads, const LinearAttentionConfig& whole = {},
                         int key_head_begin = 0);

// Why a model cannot transfer its KV (Kestrel moves one KV cache group of full attention or of
// MLA latents, with the linear-attention layers' state slot); empty when it can.
std::string kv_transfer_unsupported(const CausalLM& model, int block_size);

struct KvConnectorConfig {
  KvTransferConfig transfer;
  std::string engine_id;  // this data-parallel rank's (with its _dp<rank> suffix)
  std::string host;       // the address consumers reach this instance's ranks at
  int port = 0;           // its TP rank 0's port; rank r serves on port + r
  int tp_size = 1;
  int block_size = 16;
  uint64_t epoch = 0;  // this incarnation
  // The model has linear-attention layers: a load needs the producer's held state slot.
  bool moves_state = false;
};

class KvConnector {
 public:
  using Clock = std::chrono::steady_clock;
  explicit KvConnector(KvConnectorConfig config);

  // Runs (from another thread) when a lease is released or a release is answered: the engine
  // thread has work. Set once, before the engine thread starts.
  void set_wake(std::function<void()> wake);
  KvControlHandler control();

  // Whether this instance can serve a request with these params (a role it has, a producer
  // whose blocks fit here): the error says why not (HTTP 400). Thread-safe (reads the config).
  Status check(const KvTransferParams& params, size_t prompt_len) const;
  // A request refused before admission (its params, or anything else about it): its producer
  // lease is released at once, so the producer frees now. Thread-safe.
  void release_refused(const KvTransferParams& params);
  // A new request's kv_transfer_params applied to its scheduler spec (after check()).
  Status admit(RequestHandle id, const KvTransferParams& params, const std::vector<int32_t>& prompt,
               RequestSpec& spec);
  // Start of a step: frees the leases that ended (producer) and decides the loads whose release
  // was answered (consumer). Requests that fail by policy are returned with the reason.
  std::vector<std::pair<RequestHandle, std::string>> before_step(Scheduler& scheduler);
  // The step's loads, as they start.
  void on_started(const std::vector<KvLoad>& loads);
  // The workers' load reports of a step.
  void on_loads(Scheduler& scheduler, const std::vector<KvLoadResult>& loads);
  // Requests finished this step whose blocks the scheduler holds: leased; the params for their
  // responses (remote_request_id is left for the engine client, which knows the API's id).
  std::unordered_map<RequestHandle, KvTransferResult> lease_held(Scheduler& scheduler);
  // Any exit of a request: a lease still watched is released.
  void on_exit(RequestHandle id);

  // Consumer requests admitted whose load is not decided yet. Thread-safe.
  int64_t num_pending() const { return num_pending_.load(); }
  // Work the engine thread must come back for without a new request: a release in flight.
  bool busy() const { return !pending_.empty(); }
  // When the engine must wake at the latest (the next lease expiry).
  Clock::time_point next_deadline() const;
  KvTransferStats stats() const;
  const KvConnectorConfig& config() const { return config_; }

 private:
  struct Pending {                // a consumer request between admission and its load's decision
    Clock::time_point started;    // when its load started
    std::optional<bool> load_ok;  // reported by the workers
    std::string error;
    int64_t bytes = 0, ucx_bytes = 0, blocks = 0;
    double seconds = 0;
    bool released = false;
  };

  KvConnectorConfig config_;
  std::unique_ptr<LeaseRegistry> registry_;  // producer
  std::unique_ptr<LeaseClient> client_;      // consumer
  std::unordered_map<RequestHandle, Pending> pending_;
  KvTransferStats stats_;
  std::atomic<uint64_t> next_refused_{0};  // keys of refused requests' releases
  std::atomic<int64_t> num_pending_{0};    // pending_.size(), for other threads
  std::function<void()> wake_;
};

}  // namespace kestrel
