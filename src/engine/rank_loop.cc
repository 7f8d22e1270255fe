#include "engine/rank_loop.h"

#include <utility>

#include "base/logging.h"

namespace kestrel {

RankLoop::RankLoop(size_t index, size_t of, std::unique_ptr<EngineCore> core,
                   std::unique_ptr<DpLockstep> lockstep, int64_t num_speculative_tokens,
                   std::chrono::milliseconds spec_log_interval, Hooks hooks)
    : index_(index),
      of_(of),
      core_(std::move(core)),
      lockstep_(std::move(lockstep)),
      num_speculative_tokens_(num_speculative_tokens),
      spec_log_interval_(spec_log_interval),
      hooks_(std::move(hooks)) {
  stats_.engine_index = int(index_);
  stats_.num_speculative_tokens = num_speculative_tokens_;
  if (lockstep_) {
    core_->set_execute_empty_steps(true);
    core_->set_failure_cause([ls = lockstep_.get()] { return ls->failure(); });
    // A peer's wave start (or the group's failure) wakes this rank's thread.
    lockstep_->set_wake([this] { wake(); });
  }
  if (KvConnector* kv = core_->kv_connector())
    kv->set_wake([this] {
      kv_wake_.store(true);
      wake();
    });
}

RankLoop::~RankLoop() {
  stop();
  join();
}

void RankLoop::start() {
  spec_logged_at_ = std::chrono::steady_clock::now();
  thread_ = std::thread([this] { run(); });
}

bool RankLoop::post(Command command) {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return false;
    inbox_.push_back(std::move(command));
  }
  cv_.notify_all();
  return true;
}

void RankLoop::wake() {
  { std::lock_guard lock(mu_); }
  cv_.notify_all();
}

void RankLoop::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
}

bool RankLoop::stopping() const {
  std::lock_guard lock(mu_);
  return stopping_;
}

void RankLoop::join() {
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

EngineStats RankLoop::stats() const {
  EngineStats s;
  {
    std::lock_guard lock(stats_mu_);
    s = stats_;
  }
  if (core_->executor().failure() || (lockstep_ && lockstep_->failure())) s.dead = true;
  return s;
}

bool RankLoop::wait_for_work(std::vector<Command>& commands) {
  std::unique_lock lock(mu_);
  // A lease's expiry is work too: wake for it even when nothing else comes.
  cv_.wait_until(lock, core_->next_deadline(), [&] {
    return stopping_ || !inbox_.empty() || core_->has_unfinished() || kv_wake_.exchange(false) ||
           (lockstep_ != nullptr && (lockstep_->in_wave() || lockstep_->failure()));
  });
  if (stopping_) return false;
  commands.swap(inbox_);
  return true;
}

void RankLoop::apply(std::vector<Command>& commands, std::vector<EngineCoreOutput>& outputs) {
  for (Command& c : commands) {
    if (auto* add = std::get_if<EngineRequest>(&c)) {
      if (Status st = core_->add_request(*add); !st.ok()) {
        // The client admits only what the core accepts; reaching this is a bug, reported.
        EngineCoreOutput err;
        err.id = add->id;
        err.finish_reason = FinishReason::kError;
        err.error = st.error().message;
        outputs.push_back(std::move(err));
        KLOG_ERROR("engine rejected request {}: {}", add->id, st.error().message);
      }
    } else {
      core_->abort(std::get<RequestHandle>(c));
    }
  }
  commands.clear();
}

bool RankLoop::agree_to_step(std::string& failure) {
  const bool has_work = core_->has_unfinished();
  if (lockstep_ == nullptr) return has_work;
  // In a wave every rank steps (this one maybe with nothing) until no rank has work.
  if (auto f = lockstep_->failure()) {
    failure = *f;
    return false;
  }
  if (!lockstep_->join(has_work)) return false;
  auto any = lockstep_->agree(has_work);
  if (!any.ok()) {
    failure = any.error().message;
    return false;
  }
  return *any;
}

void RankLoop::publish_stats(const std::string& failure) {
  std::lock_guard lock(stats_mu_);
  const Scheduler& s = core_->scheduler();
  EngineStats& st = stats_;
  st.num_running = static_cast<int64_t>(s.num_running());
  st.num_waiting = static_cast<int64_t>(s.num_waiting());
  st.kv_cache_usage = s.kv().usage();
  st.prefix_cache_queries = s.kv().prefix_cache_queries();
  st.prefix_cache_hits = s.kv().prefix_cache_hits();
  st.num_preemptions = s.num_preemptions();
  st.counters = core_->counters();
  st.dead = !failure.empty();
  if (const KvConnector* kv = core_->kv_connector()) {
    st.kv = kv->stats();
    st.kv.state_slots_held = s.kv().num_taken_state_slots();
  }
}

void RankLoop::log_spec_decode() {
  const auto now = std::chrono::steady_clock::now();
  if (spec_log_interval_.count() <= 0 || now - spec_logged_at_ < spec_log_interval_) return;
  const SpecDecodeStats& s = core_->counters().spec_decode;
  if (s.num_drafts != spec_logged_.num_drafts) {
    const std::string line = spec_decode_log_line(
        spec_logged_, s, std::chrono::duration<double>(now - spec_logged_at_).count());
    if (of_ == 1) {
      KLOG_INFO("{}", line);
    } else {
      KLOG_INFO("Engine {:03d}: {}", index_, line);  // vLLM's prefix with several engines
    }
  }
  spec_logged_ = s;
  spec_logged_at_ = now;
}

void RankLoop::report_failure(std::string failure) {
  if (lockstep_ != nullptr) {
    // A collective that gave up because the group was aborted: the group's own failure is the
    // cause worth reporting. Otherwise this rank's failure is, and the peers stop too.
    if (auto cause = lockstep_->failure()) {
      failure = *cause;
    } else {
      lockstep_->fail(failure);
    }
  }
  if (of_ > 1) failure = fmt::format("data-parallel rank {}: {}", index_, failure);
  if (stopping()) {
    // A step the shutdown interrupted (a peer had already stopped): not a failure to report.
  } else if (of_ == 1) {
    KLOG_ERROR("engine step failed, stopping the engine: {}", failure);
  } else {
    KLOG_ERROR("engine {} step failed, stopping every engine: {}", index_, failure);
  }
  hooks_.fail(failure);
}

void RankLoop::pause_while_waiting() {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, std::chrono::milliseconds(1),
               [&] { return stopping_ || !inbox_.empty() || kv_wake_.load(); });
}

void RankLoop::run() {
  std::vector<Command> commands;
  while (wait_for_work(commands)) {
    std::vector<EngineCoreOutput> outputs;
    apply(commands, outputs);
    std::string failure;
    const int64_t tokens_before = core_->counters().scheduled_tokens;
    const bool step = agree_to_step(failure);
    // Leases that ended free their blocks, and answered releases decide their loads, whether or
    // not this rank steps now.
    core_->poll_kv();
    if (failure.empty() && step) {
      auto stepped = core_->step();
      if (stepped.ok()) {
        for (EngineCoreOutput& o : *stepped) outputs.push_back(std::move(o));
      } else {
        failure = stepped.error().message;
      }
    }
    publish_stats(failure);
    const int64_t step_tokens = core_->counters().scheduled_tokens - tokens_before;
    if (step_tokens > 0) hooks_.observe_step(step_tokens, int(index_));
    log_spec_decode();
    if (!outputs.empty()) hooks_.publish(std::move(outputs));
    if (!failure.empty()) {
      report_failure(std::move(failure));
      break;
    }
    if (core_->has_unfinished() && core_->only_waiting()) pause_while_waiting();
  }
  hooks_.done();
}

}  // namespace kestrel
