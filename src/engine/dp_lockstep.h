// engine/dp_lockstep.h — the data-parallel ranks' lockstep under expert parallelism (issue 20):
// the MoE layers of every rank meet in collectives (model/expert_exchange.h), so while any rank
// has work every rank steps — a rank with nothing to run steps an empty batch and serves the
// others' MoE rounds — and when none has, they all pause. A wave is one such stretch.
//
// - Every step the ranks all-reduce whether each has work (one tiny collective, before the
//   step; vLLM agrees on its batch shape every step and on pausing every 32): all step, or the
//   wave ends on every rank at the same step and each counts the next wave.
// - A rank that gets work while the group pauses starts the current wave itself and tells the
//   others through the group's notice board (distributed/store.h); they join at once. A start for a
//   wave already over is stale and ignored; one for a wave a rank has not reached yet counts
//   when it gets there (a late notice can neither start a finished wave nor be lost).
// - Start-up is a handshake: each rank posts a summary of the settings that shape the
//   collectives and waits for every rank's (timeouts name the ranks missing and the address);
//   a rank whose settings differ from rank 0's is refused, naming both.
// - A peer the notice board loses, or that leaves, fails the group: the failure is recorded,
//   the shared abort flag makes waiting collectives give up, and the engine is woken to stop.
//
// One per engine core (data-parallel rank) in the process that runs its scheduler; its methods
// run on that rank's engine thread, except the notice handler (the subscriber's thread), which
// touches only the atomics and calls the wake callback.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "base/status.h"
#include "distributed/device_comm.h"
#include "distributed/store.h"

namespace kestrel {

// The notices of the group's board: a rank started the wave in the value; a rank's engine
// failed (the value says why); a rank stopped (shut down).
inline constexpr const char* kWaveTopic = "wave";
inline constexpr const char* kFailTopic = "fail";
inline constexpr const char* kLeaveTopic = "leave";

struct DpLockstepOptions {
  std::string endpoint;  // the group's store and notice board (rank 0's process serves it)
  int rank = 0, size = 1;
  std::string host =
      "127.0.0.1";  // this process's address toward rank 0 (distributed/local_address.h)
  // The settings every rank must share (model, layout, dtypes, speculation), as text.
  std::string settings;
  std::chrono::milliseconds start_timeout{600000};  // for every rank to come up
  std::chrono::milliseconds step_timeout{60000};    // for the per-step agreement
  // Set when the group fails; the model's collectives of this process tree watch it.
  std::atomic<bool>* abort = nullptr;
  NoticeTiming timing;
};

class DpLockstep {
 public:
  // Joins the group: subscribes, posts this rank's settings and waits for every rank's, then
  // forms the group's agreement communicator. Blocks until all ranks are there.
  static Expected<std::unique_ptr<DpLockstep>> connect(const DpLockstepOptions& options);
  // leave()s: the others fail at once rather than wait for this rank.
  ~DpLockstep();
  DpLockstep(const DpLockstep&) = delete;
  DpLockstep& operator=(const DpLockstep&) = delete;

  // Runs (on the notice thread) when a peer starts a wave or the group fails: it wakes the
  // engine thread. Set before the engine thread starts; must not block.
  void set_wake(std::function<void()> wake);

  // Engine thread: whether this rank must step now — it has work (starting the wave if the
  // group pauses), or a peer started the wave.
  bool join(bool has_work);
  // Whether a wave is on (the engine thread must not sleep). Thread-safe.
  bool in_wave() const;
  // Engine thread, once before each step of a wave: whether any rank has work. When none has,
  // the wave ends on every rank. An error (a peer lost, a timeout) fails the group.
  Expected<bool> agree(bool has_work);
  // Why the group failed, once it has. Thread-safe.
  std::optional<std::string> failure() const;
  // Records a failure (this rank's engine failed): peers are told, waits abort.
  void fail(const std::string& why);
  // This rank stops (shutdown): the same, told as leaving rather than failing. Idempotent.
  void leave();

  int rank() const { return rank_; }
  int64_t wave() const { return wave_.load(); }

 private:
  DpLockstep(const DpLockstepOptions& options);
  void on_notice(const std::string& topic, const std::vector<char>& value);
  // Records the group's first failure (later ones are ignored: false), sets the abort flag and
  // tells the peers under topic `tell` (none: null).
  bool record(const std::string& why, const char* tell);

  int rank_, size_;
  std::chrono::milliseconds step_timeout_;
  std::atomic<bool>* abort_;
  // The wave this rank is in or waits for: written by the engine thread only, read by any.
  std::atomic<int64_t> wave_{0};
  std::atomic<int64_t> started_{-1};  // the latest wave any rank started
  mutable std::mutex mu_;             // guards failure_ and wake_
  std::optional<std::string> failure_;
  std::function<void()> wake_;
  std::unique_ptr<StoreClient> store_;
  std::unique_ptr<DeviceComm> comm_;             // the per-step agreement
  std::unique_ptr<StoreSubscriber> subscriber_;  // last: its thread stops first
};

}  // namespace kestrel
