// engine/rank_loop.h — one data-parallel rank's engine thread. The thread alone owns the rank's
// EngineCore (and through it the scheduler, the KV manager and the executor): each turn it
// drains the rank's inbox (new requests and aborts the client posted), agrees with its lockstep
// peers whether to step, steps, publishes its stats and hands the outputs to the client. A rank
// whose step fails reports it and stops; the client then stops every rank.
//
// Threads: post(), wake(), stop() and stats() may be called from any thread; everything else
// runs on the rank's own thread. The inbox is under mu_, the stats under stats_mu_.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "engine/dp_lockstep.h"
#include "engine/engine_core.h"
#include "engine/protocol.h"

namespace kestrel {

class RankLoop {
 public:
  // What the rank tells its client, from the rank's thread.
  struct Hooks {
    // The outputs of one turn, in order (never empty).
    std::function<void(std::vector<EngineCoreOutput>&&)> publish;
    // After every step that ran the model: the tokens it computed and the rank's index.
    std::function<void(int64_t, int)> observe_step;
    // The rank failed and stopped: why (already prefixed with the rank under data parallelism).
    std::function<void(const std::string&)> fail;
    // The thread is about to end.
    std::function<void()> done;
  };
  // `index`: the rank's data-parallel rank (logs, metrics); `of`: how many ranks the client has
  // (log prefixes). With `lockstep` the rank steps with its peers (engine/dp_lockstep.h).
  RankLoop(size_t index, size_t of, std::unique_ptr<EngineCore> core,
           std::unique_ptr<DpLockstep> lockstep, int64_t num_speculative_tokens,
           std::chrono::milliseconds spec_log_interval, Hooks hooks);
  ~RankLoop();
  RankLoop(const RankLoop&) = delete;
  RankLoop& operator=(const RankLoop&) = delete;

  void start();
  size_t index() const { return index_; }

  // Queues a new request or an abort; false once the rank is stopping (nothing queued).
  using Command = std::variant<EngineRequest, RequestHandle>;
  bool post(Command command);
  // Wakes the thread to look at its connector and lockstep (their callbacks call it).
  void wake();
  // Tells the thread to stop after its current turn; idempotent.
  void stop();
  void join();
  // Whether the thread has been told to stop.
  bool stopping() const;

  // A snapshot after the latest turn; `dead` also when the executor or the lockstep group has
  // failed since (a worker that dies while the engine idles).
  EngineStats stats() const;
  // The rank's connector, for checks that read only its settings and atomics (thread-safe).
  const KvConnector* kv_connector() const { return core_->kv_connector(); }
  KvConnector* kv_connector() { return core_->kv_connector(); }
  DpLockstep* lockstep() { return lockstep_.get(); }

 private:
  void run();
  // Waits for work and takes the inbox; false when told to stop.
  bool wait_for_work(std::vector<Command>& commands);
  void apply(std::vector<Command>& commands, std::vector<EngineCoreOutput>& outputs);
  // Whether to step this turn: the rank's own work, or its lockstep wave. Sets `failure` when
  // the group has failed.
  bool agree_to_step(std::string& failure);
  void publish_stats(const std::string& failure);
  // vLLM's periodic "SpecDecoding metrics" line, when drafts were verified since.
  void log_spec_decode();
  // Reports a failed turn: the group's cause where it has one.
  void report_failure(std::string failure);
  // A short pause while the only work left waits on others (KV loads, lease answers).
  void pause_while_waiting();

  const size_t index_, of_;
  const std::unique_ptr<EngineCore> core_;
  const std::unique_ptr<DpLockstep> lockstep_;
  const int64_t num_speculative_tokens_;
  const std::chrono::milliseconds spec_log_interval_;
  const Hooks hooks_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Command> inbox_;  // under mu_
  bool stopping_ = false;       // under mu_
  std::atomic<bool> kv_wake_{false};

  mutable std::mutex stats_mu_;
  EngineStats stats_;  // under stats_mu_

  SpecDecodeStats spec_logged_;  // the counters at the last "SpecDecoding metrics" line, and when
  std::chrono::steady_clock::time_point spec_logged_at_;
  std::thread thread_;
};

}  // namespace kestrel
