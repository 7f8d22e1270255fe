#include "engine/dp_lockstep.h"

#include <charconv>

#include "base/logging.h"
#include "distributed/group_comm.h"

namespace kestrel {

namespace {

std::vector<char> bytes_of(const std::string& s) {
  return std::vector<char>(s.begin(), s.end());
}

std::string member_name(int rank) {
  return "dp" + std::to_string(rank);
}

std::string settings_key(int rank) {
  return "dp/settings/" + std::to_string(rank);
}

void raise_to(std::atomic<int64_t>& a, int64_t v) {
  int64_t cur = a.load();
  while (cur < v && !a.compare_exchange_weak(cur, v)) {
  }
}

}  // namespace

DpLockstep::DpLockstep(const DpLockstepOptions& o)
    : rank_(o.rank), size_(o.size), step_timeout_(o.step_timeout), abort_(o.abort) {}

Expected<std::unique_ptr<DpLockstep>> DpLockstep::connect(const DpLockstepOptions& o) {
  std::unique_ptr<DpLockstep> ls(new DpLockstep(o));
  KASSIGN(ls->store_, StoreClient::connect(o.endpoint, o.start_timeout));
  DpLockstep* self = ls.get();
  KASSIGN(ls->subscriber_, StoreSubscriber::connect(
                               o.endpoint, member_name(o.rank),
                               [self](const std::string& topic, const std::vector<char>& value) {
                                 self->on_notice(topic, value);
                               },
                               o.timing));
  KTRY(ls->store_->set(settings_key(o.rank), bytes_of(o.settings)));
  std::vector<std::string> keys;
  for (int r = 0; r < o.size; ++r) {
    keys.push_back(settings_key(r));
    keys.push_back(subscribed_key(member_name(r)));
  }
  // A rank that fails to start says so on the notice board: the others stop waiting for it.
  auto alive = [self]() -> Status {
    if (auto f = self->failure()) return make_error("{}", *f);
    return Status::Ok();
  };
  if (Status st = ls->store_->wait(keys, o.start_timeout, alive); !st.ok())
    return make_error(
        "data-parallel rank {}: the other ranks did not all come up at {} within {} s: {}", o.rank,
        o.endpoint, o.start_timeout.count() / 1000, st.message());
  KASSIGN(const std::vector<char> first, ls->store_->get(settings_key(0)));
  if (const std::string theirs(first.begin(), first.end()); theirs != o.settings) {
    const std::string why = fmt::format(
        "data-parallel rank {} runs with [{}] but rank 0 with [{}]: every data-parallel rank must "
        "share the settings that shape their collectives",
        o.rank, o.settings, theirs);
    ls->fail(why);
    return make_error("{}", why);
  }
  GroupCommOptions go;
  go.group = "dp-sync";
  go.rank = o.rank;
  go.size = o.size;
  go.host = o.host;
  go.connect_timeout = o.start_timeout;
  go.timeout = o.step_timeout;
  go.abort = o.abort;
  go.label = "data-parallel";
  go.alive = alive;
  KASSIGN(ls->comm_, connect_group_comm(go, *ls->store_));
  return ls;
}

DpLockstep::~DpLockstep() {
  leave();
  subscriber_.reset();  // no notice reaches a half-destroyed object
}

void DpLockstep::leave() {
  record(fmt::format("data-parallel rank {} stopped", rank_), kLeaveTopic);
}

void DpLockstep::set_wake(std::function<void()> wake) {
  std::lock_guard lock(mu_);
  wake_ = std::move(wake);
}

void DpLockstep::on_notice(const std::string& topic, const std::vector<char>& value) {
  const std::string text(value.begin(), value.end());
  if (topic == kWaveTopic) {
    int64_t w = 0;
    if (std::from_chars(text.data(), text.data() + text.size(), w).ec != std::errc()) return;
    raise_to(started_, w);
  } else if (topic == kLostTopic) {
    fail(fmt::format("the data-parallel group lost {} (it died or stopped answering)", text));
  } else if (topic == kFailTopic) {
    fail(text);
  } else if (topic == kLeaveTopic) {
    if (record(text, nullptr)) KLOG_INFO("data-parallel rank {}: {}; the group stops", rank_, text);
  } else {
    return;
  }
  std::function<void()> wake;
  {
    std::lock_guard lock(mu_);
    wake = wake_;
  }
  if (wake) wake();
}

bool DpLockstep::join(bool has_work) {
  if (has_work && !in_wave()) {
    const int64_t w = wave_.load();
    raise_to(started_, w);
    // A lost notice only delays the peers until the abort: the agreement waits for them.
    if (Status st = subscriber_->publish(kWaveTopic, bytes_of(std::to_string(w))); !st.ok())
      fail(st.message());
  }
  return in_wave();
}

bool DpLockstep::in_wave() const {
  return started_.load() >= wave_.load();
}

Expected<bool> DpLockstep::agree(bool has_work) {
  if (auto f = failure()) return make_error("{}", *f);
  float any = has_work ? 1.0f : 0.0f;
  if (Status st = comm_->all_reduce_sum(&any, 1); !st.ok()) {
    // The peer's own notice (lost, failed) says more than the timeout does.
    if (auto f = failure()) return make_error("{}", *f);
    fail(st.message());
    return make_error("{}", st.message());
  }
  if (any > 0.0f) return true;
  ++wave_;  // every rank saw the same sum: the wave ends everywhere at this step
  return false;
}

std::optional<std::string> DpLockstep::failure() const {
  std::lock_guard lock(mu_);
  return failure_;
}

void DpLockstep::fail(const std::string& why) {
  if (record(why, kFailTopic)) KLOG_ERROR("data-parallel rank {}: {}", rank_, why);
}

bool DpLockstep::record(const std::string& why, const char* tell) {
  {
    std::lock_guard lock(mu_);
    if (failure_) return false;
    failure_ = why;
  }
  if (abort_ != nullptr) abort_->store(true);
  if (tell != nullptr && subscriber_) (void)subscriber_->publish(tell, bytes_of(why));
  return true;
}

}  // namespace kestrel
