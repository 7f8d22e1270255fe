#include "engine/multiproc_executor.h"

#include <charconv>
#include <exception>
#include <optional>

#include "base/logging.h"
#include "sched/contract_codec.h"

namespace kestrel {

namespace {

// The first byte of every control message says what it is.
constexpr char kInit = 'I';    // leader: the KV plan follows (blocks, state slots, checkpoints)
constexpr char kStep = 'S';    // leader: an encoded SchedulerOutput follows
constexpr char kQuit = 'Q';    // leader: exit
constexpr char kReady = 'R';   // worker: its runner is built
constexpr char kOutput = 'O';  // worker: an encoded RunnerOutput follows
constexpr char kError = 'E';   // worker: the step (or the runner) failed; the reason follows
constexpr char kFatal = 'F';   // worker: an exception; its state no longer matches the group's

std::string message(char kind, std::string_view body = {}) {
  std::string m(1, kind);
  m += body;
  return m;
}

}  // namespace

MultiprocExecutor::MultiprocExecutor(std::unique_ptr<WorkerProcesses> processes,
                                     std::unique_ptr<HostCommLeader> workers,
                                     std::unique_ptr<ModelRunner> runner,
                                     std::chrono::milliseconds step_timeout)
    : processes_(std::move(processes)),
      workers_(std::move(workers)),
      runner_(std::move(runner)),
      step_timeout_(step_timeout) {}

Expected<std::unique_ptr<MultiprocExecutor>> MultiprocExecutor::start(
    std::unique_ptr<WorkerProcesses> processes, std::unique_ptr<HostCommLeader> workers,
    std::unique_ptr<ModelRunner> runner, const WorkerKvPlan& plan,
    std::chrono::milliseconds timeout, std::chrono::milliseconds step_timeout) {
  std::unique_ptr<MultiprocExecutor> e(new MultiprocExecutor(
      std::move(processes), std::move(workers), std::move(runner), step_timeout));
  KTRY(e->workers_->broadcast(message(
      kInit,
      fmt::format("{} {} {}", plan.num_blocks, plan.num_state_slots, plan.num_state_checkpoints))));
  KASSIGN(const std::vector<std::string> replies,
          e->workers_->gather(timeout, [&e] { return e->check_alive(); }));
  for (size_t i = 0; i < replies.size(); ++i)
    if (replies[i].empty() || replies[i][0] != kReady)
      return make_error("worker rank {} could not start: {}", i + 1,
                        replies[i].empty() ? "no reason given" : replies[i].substr(1));
  return e;
}

MultiprocExecutor::~MultiprocExecutor() {
  // A failed group's workers may wait in a collective that never completes: no grace for them.
  const bool failed = failure().has_value() || !check_alive().ok();
  if (!failed) (void)workers_->broadcast(message(kQuit));
  if (processes_) processes_->stop(failed ? std::chrono::milliseconds(0) : kQuitGrace);
}

std::optional<std::string> MultiprocExecutor::failure() const {
  {
    std::lock_guard lock(mu_);
    if (failure_) return failure_;
  }
  if (processes_) return processes_->failure();
  // Workers elsewhere: a closed connection is a lost rank.
  if (Status st = workers_->check_connections(); !st.ok()) return st.message();
  return std::nullopt;
}

Status MultiprocExecutor::check_alive() const {
  return processes_ ? processes_->check() : Status::Ok();
}

Error MultiprocExecutor::fail(const std::string& why) {
  std::lock_guard lock(mu_);
  if (!failure_) {
    failure_ = why;
    KLOG_ERROR("tensor-parallel group failed: {}", why);
  }
  return make_error("{}", *failure_);
}

Expected<RunnerOutput> MultiprocExecutor::execute(const SchedulerOutput& output) {
  if (auto f = failure()) return make_error("{}", *f);
  if (Status st = workers_->broadcast(message(kStep, encode(output))); !st.ok()) {
    // An unreachable rank is usually a dead process: its exit status says more than the send.
    if (processes_)
      if (auto f = processes_->failure()) return fail(*f);
    return fail(st.message());
  }
  // This process's rank, when it runs one; else the first worker's answer is the step's.
  std::optional<Expected<RunnerOutput>> mine;
  std::string exception;
  if (runner_) {
    try {
      mine = runner_->execute(output);
    } catch (const std::exception& e) {
      exception = e.what();
    }
  }
  auto replies = workers_->gather(step_timeout_, [this] { return check_alive(); });
  if (processes_)
    if (auto f = processes_->failure()) return fail(*f);
  if (!replies.ok()) return fail(replies.error().message);
  if (!exception.empty()) return fail("rank 0: " + exception);
  // Equal errors everywhere are the step's (every rank refused it before computing); anything
  // else leaves the ranks in different states. The ranks' KV loads finish at their own pace:
  // they are tallied apart from the outputs, which must be equal.
  std::vector<std::vector<KvLoadResult>> loads;
  if (mine && mine->ok()) loads.push_back(std::exchange((*mine)->kv_loads, {}));
  for (size_t i = 0; i < replies->size(); ++i) {
    const std::string& r = (*replies)[i];
    const int rank = int(i) + 1;
    if (r.empty()) return fail(fmt::format("rank {}: an empty answer", rank));
    const std::string_view body = std::string_view(r).substr(1);
    if (r[0] == kFatal) return fail(fmt::format("rank {}: {}", rank, body));
    Expected<RunnerOutput> theirs = make_error("{}", body);
    if (r[0] == kOutput) {
      theirs = decode_runner_output(body);
      if (!theirs.ok()) return fail(fmt::format("rank {}: {}", rank, theirs.error().message));
      loads.push_back(std::exchange(theirs->kv_loads, {}));
    } else if (r[0] != kError) {
      return fail(fmt::format("rank {}: an unknown answer", rank));
    }
    if (!mine) {
      mine = std::move(theirs);
      continue;
    }
    if (mine->ok() != theirs.ok())
      return fail(fmt::format("rank {} {} a step the first rank {}", rank,
                              theirs.ok() ? "ran" : "failed", theirs.ok() ? "failed" : "ran"));
    if (!theirs.ok() && theirs.error().message != mine->error().message)
      return fail(fmt::format("rank {} failed the step alone: {}", rank, body));
    if (theirs.ok() && !(*theirs == **mine))
      return fail(fmt::format("rank {} sampled other tokens than the first rank", rank));
  }
  if (mine->ok()) (*mine)->kv_loads = tally_loads(std::move(loads));
  return std::move(*mine);
}

std::vector<KvLoadResult> MultiprocExecutor::tally_loads(
    std::vector<std::vector<KvLoadResult>> outputs) {
  const size_t ranks = outputs.size();
  std::vector<KvLoadResult> done;
  for (std::vector<KvLoadResult>& out : outputs)
    for (KvLoadResult& r : out) {
      LoadTally& t = loads_[r.load_id];
      t.result.load_id = r.load_id;
      t.result.bytes += r.bytes;
      t.result.ucx_bytes += r.ucx_bytes;
      if (!r.ok && t.result.ok) {
        t.result.ok = false;
        t.result.error = std::move(r.error);
      }
      if (++t.ranks == ranks) {
        done.push_back(std::move(t.result));
        loads_.erase(r.load_id);
      }
    }
  return done;
}

namespace {

// The three numbers of a kInit message's body.
std::optional<WorkerKvPlan> parse_kv_plan(std::string_view body) {
  WorkerKvPlan plan;
  int32_t* fields[] = {&plan.num_blocks, &plan.num_state_slots, &plan.num_state_checkpoints};
  const char* p = body.data();
  const char* end = body.data() + body.size();
  for (int32_t* f : fields) {
    while (p < end && *p == ' ') ++p;
    const auto r = std::from_chars(p, end, *f);
    if (r.ec != std::errc()) return std::nullopt;
    p = r.ptr;
  }
  if (p != end) return std::nullopt;
  return plan;
}

}  // namespace

int run_worker(
    HostCommWorker& leader,
    const std::function<Expected<std::unique_ptr<Executor>>(const WorkerKvPlan&)>& make_executor) {
  auto init = leader.receive();
  if (!init.ok() || init->empty()) return 2;
  if ((*init)[0] == kQuit) return 0;
  if ((*init)[0] != kInit) return 2;
  const std::optional<WorkerKvPlan> plan = parse_kv_plan(std::string_view(*init).substr(1));
  if (!plan) return 2;
  std::unique_ptr<Executor> executor;
  try {
    auto made = make_executor(*plan);
    if (!made.ok()) {
      (void)leader.send(message(kError, made.error().message));
      return 1;
    }
    executor = std::move(*made);
  } catch (const std::exception& e) {
    (void)leader.send(message(kError, e.what()));
    return 1;
  }
  if (!leader.send(message(kReady)).ok()) return 2;
  while (true) {
    auto msg = leader.receive();
    if (!msg.ok() || msg->empty()) return 2;
    if ((*msg)[0] == kQuit) return 0;
    if ((*msg)[0] != kStep) return 2;
    auto step = decode_scheduler_output(std::string_view(*msg).substr(1));
    std::string reply;
    if (!step.ok()) {
      reply = message(kFatal, step.error().message);
    } else {
      try {
        auto out = executor->execute(*step);
        reply = out.ok() ? message(kOutput, encode(*out)) : message(kError, out.error().message);
      } catch (const std::exception& e) {
        reply = message(kFatal, e.what());
      }
    }
    if (!leader.send(reply).ok()) return 2;
    if (reply[0] == kFatal) return 1;
  }
}

}  // namespace kestrel
