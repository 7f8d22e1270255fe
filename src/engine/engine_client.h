// engine/engine_client.h — the engine as callers use it: an engine thread stepping an
// EngineCore per data-parallel rank, an output thread turning their tokens into text
// (OutputProcessor), and one RequestStream per request that any thread can read. Requests go to
// the rank with the least load (vLLM's score: 4 × waiting + running), aborts to the rank that
// holds the request; a rank that fails stops them all (the engine is then dead). When the ranks
// share their experts, they step in lockstep (engine/dp_lockstep.h): a rank steps an empty batch
// while another has work. Used by the CLI, the offline benchmarks and the server.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <variant>
#include <vector>

#include "engine/dp_lockstep.h"
#include "engine/engine_core.h"
#include "engine/output_processor.h"

namespace kestrel {

// A request as the server submits it: `id` is the API's request id (unique among live requests);
// engine.id is left to the client, which assigns the request's handle.
struct GenerateRequest {
  std::string id;
  EngineRequest engine;
  OutputOptions output;
};

// One request's outputs, merged while nobody reads them. Thread-safe.
class RequestStream {
 public:
  explicit RequestStream(std::string id) : id_(std::move(id)) {}
  const std::string& id() const { return id_; }

  // Blocks until there is output and returns all of it since the previous call. After the
  // finished output has been returned, further calls return it again.
  RequestOutput next();
  std::optional<RequestOutput> try_next();
  // `fn` runs on the client's output thread whenever output arrives (at once if some is already
  // waiting). It must not block; typically it posts a read to an event loop.
  void set_notify(std::function<void()> fn);

  void push(RequestOutput&& out);  // the client's side

 private:
  std::string id_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<RequestOutput> pending_;
  std::optional<RequestOutput> final_;  // the finished output, once handed out
  std::function<void()> notify_;
};

// Counters for logs, metrics and benchmarks; a snapshot after the latest step.
struct EngineStats {
  int64_t num_running = 0;
  int64_t num_waiting = 0;
  double kv_cache_usage = 0.0;  // fraction of usable blocks in use
  int64_t prefix_cache_queries = 0;
  int64_t prefix_cache_hits = 0;
  int64_t num_preemptions = 0;
  EngineCoreCounters counters;
  int64_t num_speculative_tokens = 0;  // k; 0 without speculative decoding
  bool dead = false;                   // a step failed; the engine accepts nothing more
  int engine_index = 0;                // its data-parallel rank (per-rank stats)
  KvTransferStats kv;                  // prefill/decode disaggregation (zeros without it)
};

class EngineClient {
 public:
  struct Options {
    SchedulerConfig scheduler;
    std::vector<int32_t> eos_token_ids;
    // Speculative decoding (moved into the engine): scheduler.num_lookahead_tokens must match.
    Speculation speculation;
    // One per data-parallel rank, each with its own scheduler and KV cache (of
    // scheduler.num_blocks), instead of one in-process runner of `model` (which then only
    // describes the model): in-process runners of each rank's model copy, or tensor-parallel
    // groups (engine/multiproc_executor.h), with their proposers. scheduler.kv_groups must then
    // be set.
    std::vector<std::unique_ptr<Executor>> executors;
    // Expert parallelism across the data-parallel ranks: each executor's rank in the group's
    // lockstep (engine/dp_lockstep.h), in the same order; empty when the ranks step on their own.
    std::vector<std::unique_ptr<DpLockstep>> lockstep;
    // Prefill/decode disaggregation: each executor's rank's connector, in the same order (empty:
    // none; kv_transfer_params are then ignored, as vLLM ignores them without a connector).
    std::vector<std::unique_ptr<KvConnector>> kv_connectors;
    int64_t num_speculative_tokens = 0;  // k, for stats
    // The data-parallel rank of the first engine (a server behind an external load balancer
    // runs one rank of several): engines are numbered from it in logs and metrics.
    int first_engine_index = 0;
    // How often the engine thread logs vLLM's "SpecDecoding metrics" line (0: never).
    std::chrono::milliseconds spec_log_interval{10000};
  };

  // `tokenizer` may be null (token-id requests only). Both must outlive the client. Starts the
  // engine and output threads. The scheduler config must pass validate().
  EngineClient(CausalLM& model, const Tokenizer* tokenizer, Options options);
  ~EngineClient();
  EngineClient(const EngineClient&) = delete;
  EngineClient& operator=(const EngineClient&) = delete;

  // Validates and queues a request; its outputs arrive on the returned stream. Errors (bad ids,
  // lengths, options, a stopped or dead engine) leave no trace.
  Expected<std::shared_ptr<RequestStream>> add_request(GenerateRequest request);
  // Ends a request wherever it is; its stream finishes with "abort". Unknown ids are ignored.
  void abort(const std::string& id);
  // Summed over the data-parallel ranks (kv_cache_usage: their mean; dead: any).
  EngineStats stats() const;
  // Each data-parallel rank's, in rank order.
  std::vector<EngineStats> rank_stats() const;
  // The KV transfer counters summed over the ranks.
  KvTransferStats kv_stats() const;
  // Prefill/decode disaggregation, decode side: every rank already has kKvBacklogPerSeq ×
  // max_num_seqs requests waiting for their prompt's KV. More are refused (HTTP 503) rather than
  // queued without bound while their producers hold the blocks. Thread-safe.
  bool kv_backlog_full() const;
  static constexpr int64_t kKvBacklogPerSeq = 2;
  // A request with a producer's lease refused before it reached add_request(): the producer
  // frees the prompt's blocks now. Thread-safe.
  void release_kv_refused(const KvTransferParams& params);
  int num_ranks() const { return int(ranks_.size()); }
  // `fn` runs on an engine thread after every step that ran the model, with the number of
  // tokens the step computed (vllm:iteration_tokens_total) and the rank's index. It must be
  // cheap and not block.
  void set_step_observer(std::function<void(int64_t, int)> fn);
  const SchedulerConfig& scheduler_config() const { return options_.scheduler; }
  // Request handles made so far, the length of every per-request table in the engine: the peak
  // number of requests live at once, since finished requests' handles are reused.
  size_t num_request_handles() const;
  // Stops every thread; unfinished requests finish with "abort". Idempotent. Ranks in a
  // data-parallel lockstep first keep stepping with their peers, up to `drain`, until the group
  // is idle: the peers' requests need this rank's experts (a group shut down together drains).
  // Returns false, leaving the threads running, when the engine has failed and a rank thread is
  // still inside a step kFailedStopGrace after being told to stop: it waits in a collective of
  // the failed group, which Gloo gives up only at its timeout. The process must then end without
  // destroying the client (whose destructor would wait for that thread).
  bool shutdown(std::chrono::milliseconds drain = std::chrono::milliseconds(0));
  static constexpr std::chrono::seconds kFailedStopGrace{3};

 private:
  using Command = std::variant<EngineRequest, RequestHandle>;  // add, or abort

  Status validate(const GenerateRequest& request) const;
  // add_request() but for the release of a refused request's producer lease.
  Expected<std::shared_ptr<RequestStream>> submit(GenerateRequest request);
  // Under req_mu_: a free handle, now naming `id`; and the reverse once the request is gone.
  RequestHandle take_handle(const std::string& id);
  void drop_handle(RequestHandle h);
  struct Rank;
  void engine_loop(Rank& rank);
  // Engine thread: vLLM's periodic "SpecDecoding metrics" line, when drafts were verified since.
  void log_spec_decode(Rank& rank);
  // Under req_mu_: the rank a new request goes to.
  size_t pick_rank() const;
  void output_loop();
  // Output-thread side: delivers one core output to its stream.
  void deliver(EngineCoreOutput&& out);
  // Finishes every stream still open (shutdown, engine failure).
  void finish_all(FinishReason reason, const std::string& error);

  // One data-parallel rank: its core (its engine thread only), its inbox (under in_mu_), its
  // stats (under stats_mu_), the requests routed to it and not yet finished (under req_mu_).
  struct Rank {
    template <typename... CoreArgs>
    explicit Rank(size_t i, CoreArgs&&... args) : core(std::forward<CoreArgs>(args)...), index(i) {}
    EngineCore core;
    size_t index;  // its data-parallel rank (first_engine_index on): logs, metrics, errors
    std::unique_ptr<DpLockstep> lockstep;  // under expert parallelism across the ranks
    std::atomic<bool> kv_wake{false};      // its KV connector has news (leases, releases)
    std::vector<Command> inbox;
    EngineStats stats;
    int64_t live = 0;
    SpecDecodeStats spec_logged;  // the counters at the last "SpecDecoding metrics" line, and when
    std::chrono::steady_clock::time_point spec_logged_at;
    std::thread thread;
  };

  CausalLM& model_;
  Options options_;
  std::vector<std::unique_ptr<Rank>> ranks_;

  mutable std::mutex in_mu_;
  std::condition_variable in_cv_;  // notified for every rank; each waits on its own inbox
  bool stopping_ = false;

  std::mutex out_mu_;
  std::condition_variable out_cv_;
  std::deque<std::vector<EngineCoreOutput>> outbox_;
  size_t engines_done_ = 0;   // rank threads that have stopped
  std::string engine_error_;  // why the engine stopped, if a step failed

  // Requests the core still holds, with their stream until the client side finishes them. A
  // handle goes back to free_handles_ when the core's finished output arrives: by then the
  // core, the scheduler and the KV manager have let it go, and the worker drops it at the next
  // step before it takes any new request (WorkerRequests::apply), so reuse is safe.
  struct Live {
    std::string id;
    std::shared_ptr<RequestStream> stream;  // null once finished here (a stop string)
    size_t rank = 0;                        // the data-parallel rank that holds it
  };
  mutable std::mutex req_mu_;
  std::unordered_map<std::string, RequestHandle> handles_;  // the API ids of live_
  RequestTable<Live> live_;
  std::vector<RequestHandle> free_handles_;
  RequestHandle next_handle_ = 0;
  OutputProcessor processor_;  // under req_mu_

  mutable std::mutex stats_mu_;
  std::function<void(int64_t, int)> step_observer_;  // under stats_mu_
  size_t next_tie_ = 0;                              // under req_mu_: rotates among equal loads

  std::thread output_thread_;
};

}  // namespace kestrel
