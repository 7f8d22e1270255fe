// engine/engine_client.h — the engine as callers use it: it routes requests to its data-parallel
// ranks (each an engine thread stepping its own EngineCore: engine/rank_loop.h), names them by
// handles, and runs an output thread that turns their tokens into text (one OutputProcessor per
// request) for one RequestStream per request that any thread can read. Requests go to the rank
// with the least load (vLLM's score: 4 × waiting + running), aborts to the rank that holds the
// request; a rank that fails stops them all (the engine is then dead). When the ranks share
// their experts, they step in lockstep (engine/dp_lockstep.h): a rank steps an empty batch while
// another has work. Built by engine/engine_builder.h; used by the CLI, the offline benchmarks
// and the server, which see only this header and engine/protocol.h.
//
// Locks: req_mu_ guards the handles and the live requests (taken briefly by submitting threads
// and the output thread; never while detokenizing), out_mu_ the outputs waiting for the output
// thread. A request's OutputProcessor is touched only by the output thread once submitted.
#pragma once

#include <atomic>
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

#include "base/request_table.h"
#include "base/status.h"
#include "engine/protocol.h"

namespace kestrel {

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

class RankLoop;
class OutputProcessor;
class Tokenizer;
struct EngineClientOptions;

class EngineClient {
 public:
  // `tokenizer` may be null (token-id requests only); it must outlive the client. Starts a
  // thread per rank and the output thread.
  EngineClient(const Tokenizer* tokenizer, EngineClientOptions options);
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
  // The context length every request must fit (prompt + output).
  int64_t max_model_len() const { return max_model_len_; }
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
  Status validate(const GenerateRequest& request) const;
  // add_request() but for the release of a refused request's producer lease.
  Expected<std::shared_ptr<RequestStream>> submit(GenerateRequest request);
  // Under req_mu_: a free handle, now naming `id`; and the reverse once the request is gone.
  RequestHandle take_handle(const std::string& id);
  void drop_handle(RequestHandle h);
  // Under req_mu_: the rank a new request goes to.
  size_t pick_rank() const;
  // Output thread: delivers each output to its stream until every rank has stopped.
  void output_loop();
  void deliver(EngineCoreOutput&& out);
  // Finishes every stream still open (shutdown, engine failure).
  void finish_all(FinishReason reason, const std::string& error);
  // From a rank's thread: the rank failed; every rank stops.
  void on_rank_failure(const std::string& why);

  const Tokenizer* tokenizer_;
  int64_t vocab_size_ = 0;
  int64_t max_model_len_ = 0;
  int64_t max_num_seqs_ = 0;
  std::vector<std::unique_ptr<RankLoop>> ranks_;

  std::mutex out_mu_;
  std::condition_variable out_cv_;
  std::deque<std::vector<EngineCoreOutput>> outbox_;
  size_t ranks_done_ = 0;     // rank threads that have stopped
  std::string engine_error_;  // why the engine stopped, if a step failed
  std::atomic<bool> stopping_{false};

  // Requests the core still holds, with their stream until the client side finishes them. A
  // handle goes back to free_handles_ when the core's finished output arrives: by then the
  // core, the scheduler and the KV manager have let it go, and the worker drops it at the next
  // step before it takes any new request (WorkerRequests::apply), so reuse is safe. Only the
  // output thread (and a submit that fails) erases entries, so the output thread may use an
  // entry's processor between two holds of req_mu_.
  struct Live {
    std::string id;
    std::shared_ptr<RequestStream> stream;     // null once finished here (a stop string)
    std::unique_ptr<OutputProcessor> outputs;  // the output thread's
    size_t rank = 0;                           // the data-parallel rank that holds it
  };
  mutable std::mutex req_mu_;
  std::unordered_map<std::string, RequestHandle> handles_;  // the API ids of live_
  RequestTable<Live> live_;
  std::vector<RequestHandle> free_handles_;
  RequestHandle next_handle_ = 0;
  std::vector<int64_t> live_per_rank_;  // under req_mu_
  size_t next_tie_ = 0;                 // under req_mu_: rotates among equal loads

  mutable std::mutex observer_mu_;
  std::function<void(int64_t, int)> step_observer_;  // under observer_mu_

  std::thread output_thread_;
};

}  // namespace kestrel
