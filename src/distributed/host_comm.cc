#include "distributed/host_comm.h"

#include <unistd.h>
#include <zmq.hpp>

#include <fmt/format.h>

#include <atomic>
#include <charconv>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>

namespace kestrel {

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kPollSlice = std::chrono::milliseconds(20);
constexpr std::string_view kIdPrefix = "rank-";

std::string routing_id(int rank) {
  return std::string(kIdPrefix) + std::to_string(rank);
}

// The rank a routing id names, or 0.
int rank_of(std::string_view id) {
  if (id.substr(0, kIdPrefix.size()) != kIdPrefix) return 0;
  int rank = 0;
  const std::string_view digits = id.substr(kIdPrefix.size());
  if (std::from_chars(digits.data(), digits.data() + digits.size(), rank).ec != std::errc())
    return 0;
  return rank;
}

// ZMTP heartbeats, answered by ZeroMQ's I/O thread while the owner computes: a peer that stops
// answering (its host gone, the network cut) has its connection closed after the timeout.
constexpr int kHeartbeatIntervalMs = 1000;
constexpr int kHeartbeatTimeoutMs = 5000;

void set_heartbeats(zmq::socket_t& s) {
  s.set(zmq::sockopt::heartbeat_ivl, kHeartbeatIntervalMs);
  s.set(zmq::sockopt::heartbeat_timeout, kHeartbeatTimeoutMs);
  s.set(zmq::sockopt::heartbeat_ttl, kHeartbeatTimeoutMs);
}

// Watches a socket's connections (ZeroMQ's socket monitor over an inproc pair, read by its own
// thread): the first connection that closes — its peer died, or its heartbeats stopped — is
// recorded, so a lost peer is known even while nobody waits on the socket. lost() is
// thread-safe.
class ConnectionWatch {
 public:
  ConnectionWatch(zmq::context_t& ctx, zmq::socket_t& watched, const std::string& name)
      : pair_(ctx, zmq::socket_type::pair) {
    const std::string addr = "inproc://monitor-" + name;
    if (zmq_socket_monitor(watched.handle(), addr.c_str(), ZMQ_EVENT_DISCONNECTED) != 0)
      throw zmq::error_t();
    pair_.connect(addr);
    thread_ = std::thread([this] { run(); });
  }
  ~ConnectionWatch() {
    stop_.store(true);
    thread_.join();
  }
  // The peer address of the first connection that closed, once one has.
  std::optional<std::string> lost() const {
    std::lock_guard lock(mu_);
    return lost_;
  }

 private:
  void run() {
    while (!stop_.load()) {
      zmq::pollitem_t item{pair_.handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, std::chrono::milliseconds(50));
      if (!(item.revents & ZMQ_POLLIN)) continue;
      zmq::message_t event, address;
      if (!pair_.recv(event) || !pair_.recv(address)) continue;
      uint16_t id = 0;
      if (event.size() >= sizeof(id)) std::memcpy(&id, event.data(), sizeof(id));
      if (id != ZMQ_EVENT_DISCONNECTED) continue;
      std::lock_guard lock(mu_);
      if (!lost_) lost_ = address.to_string();
    }
  }

  zmq::socket_t pair_;  // the watch thread's only
  mutable std::mutex mu_;
  std::optional<std::string> lost_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

std::string unique_monitor_name(const void* owner) {
  return fmt::format("{}-{}", ::getpid(), owner);
}

}  // namespace

struct HostCommLeader::State {
  zmq::context_t ctx{1};
  zmq::socket_t router{ctx, zmq::socket_type::router};
  std::unique_ptr<ConnectionWatch> watch;
  std::vector<bool> connected;
};

Expected<std::unique_ptr<HostCommLeader>> HostCommLeader::bind(const std::string& endpoint,
                                                               int num_workers) {
  auto st = std::make_unique<State>();
  try {
    st->router.set(zmq::sockopt::linger, 0);
    st->router.set(zmq::sockopt::router_mandatory, 1);  // a send to a gone worker is an error
    set_heartbeats(st->router);
    st->watch =
        std::make_unique<ConnectionWatch>(st->ctx, st->router, unique_monitor_name(st.get()));
    st->router.bind(endpoint);
  } catch (const zmq::error_t& e) {
    return make_error("worker control channel: cannot listen on {}: {}", endpoint, e.what());
  }
  st->connected.assign(size_t(num_workers), false);
  return std::unique_ptr<HostCommLeader>(new HostCommLeader(std::move(st), endpoint, num_workers));
}

HostCommLeader::HostCommLeader(std::unique_ptr<State> state, std::string endpoint, int n)
    : state_(std::move(state)), endpoint_(std::move(endpoint)), num_workers_(n) {}

HostCommLeader::~HostCommLeader() {
  // An ipc endpoint is a socket file, which closing the socket leaves behind.
  constexpr std::string_view kIpc = "ipc://";
  if (std::string_view(endpoint_).substr(0, kIpc.size()) == kIpc)
    ::unlink(endpoint_.c_str() + kIpc.size());
}

Expected<std::optional<std::pair<int, std::string>>> HostCommLeader::receive(
    Clock::time_point deadline, const LivenessCheck& alive) {
  while (true) {
    zmq::pollitem_t items[1] = {{state_->router.handle(), 0, ZMQ_POLLIN, 0}};
    zmq::poll(items, 1, kPollSlice);
    // Messages first: a worker that answers and then exits has its answer read.
    if (items[0].revents & ZMQ_POLLIN) {
      zmq::message_t id, body;
      if (!state_->router.recv(id) || !state_->router.recv(body)) continue;
      const int rank = rank_of(id.to_string_view());
      if (rank < 1 || rank > num_workers_) continue;  // not one of the group: dropped
      return std::optional<std::pair<int, std::string>>{{rank, body.to_string()}};
    }
    KTRY(check_connections());
    if (alive) KTRY(alive());
    if (Clock::now() > deadline) return std::optional<std::pair<int, std::string>>{};
  }
}

Status HostCommLeader::check_connections() const {
  if (auto peer = state_->watch->lost())
    return make_error("a worker's connection to {} closed (from {}): it died or is unreachable",
                      endpoint_, *peer);
  return Status::Ok();
}

Status HostCommLeader::wait_for_workers(std::chrono::milliseconds timeout,
                                        const LivenessCheck& alive) {
  const Clock::time_point deadline = Clock::now() + timeout;
  auto missing = [&] {
    std::string list;
    for (int r = 1; r <= num_workers_; ++r)
      if (!state_->connected[size_t(r - 1)]) list += (list.empty() ? "" : ", ") + std::to_string(r);
    return list;
  };
  int count = 0;
  for (bool c : state_->connected) count += c ? 1 : 0;
  while (count < num_workers_) {
    KASSIGN(auto got, receive(deadline, alive));
    if (!got)
      return make_error("worker ranks {} did not connect to {} within {} s", missing(), endpoint_,
                        timeout.count() / 1000);
    if (!state_->connected[size_t(got->first - 1)]) {
      state_->connected[size_t(got->first - 1)] = true;
      ++count;
    }
  }
  return Status::Ok();
}

Status HostCommLeader::broadcast(std::string_view bytes) {
  int r = 1;
  try {
    for (; r <= num_workers_; ++r) {
      const std::string id = routing_id(r);
      state_->router.send(zmq::buffer(id), zmq::send_flags::sndmore);
      state_->router.send(zmq::buffer(bytes.data(), bytes.size()), zmq::send_flags::none);
    }
  } catch (const zmq::error_t& e) {
    // A rank the router cannot reach has gone (its process or its connection).
    return make_error("worker rank {} is unreachable on the control channel {}: {}", r, endpoint_,
                      e.what());
  }
  return Status::Ok();
}

Expected<std::vector<std::string>> HostCommLeader::gather(std::chrono::milliseconds timeout,
                                                          const LivenessCheck& alive) {
  std::vector<std::string> replies(static_cast<size_t>(num_workers_));
  std::vector<bool> have(size_t(num_workers_), false);
  const Clock::time_point deadline = Clock::now() + timeout;
  for (int n = 0; n < num_workers_;) {
    KASSIGN(auto got, receive(deadline, alive));
    if (!got) {
      std::string list;
      for (int r = 1; r <= num_workers_; ++r)
        if (!have[size_t(r - 1)]) list += (list.empty() ? "" : ", ") + std::to_string(r);
      return make_error("worker ranks {} did not answer within {} s", list, timeout.count() / 1000);
    }
    const size_t i = size_t(got->first - 1);
    if (have[i]) return make_error("worker rank {} answered twice", got->first);
    replies[i] = std::move(got->second);
    have[i] = true;
    ++n;
  }
  return replies;
}

struct HostCommWorker::State {
  zmq::context_t ctx{1};
  zmq::socket_t dealer{ctx, zmq::socket_type::dealer};
  std::unique_ptr<ConnectionWatch> watch;
  std::string endpoint;
};

Expected<std::unique_ptr<HostCommWorker>> HostCommWorker::connect(const std::string& endpoint,
                                                                  int rank) {
  auto st = std::make_unique<State>();
  try {
    st->dealer.set(zmq::sockopt::linger, 1000);  // the last reply still goes out at exit
    st->dealer.set(zmq::sockopt::routing_id, routing_id(rank));
    set_heartbeats(st->dealer);
    st->watch =
        std::make_unique<ConnectionWatch>(st->ctx, st->dealer, unique_monitor_name(st.get()));
    st->endpoint = endpoint;
    st->dealer.connect(endpoint);
    st->dealer.send(zmq::str_buffer("hello"), zmq::send_flags::none);
  } catch (const zmq::error_t& e) {
    return make_error("worker rank {}: cannot reach the leader at {}: {}", rank, endpoint,
                      e.what());
  }
  return std::unique_ptr<HostCommWorker>(new HostCommWorker(std::move(st)));
}

HostCommWorker::HostCommWorker(std::unique_ptr<State> state) : state_(std::move(state)) {}

HostCommWorker::~HostCommWorker() = default;

Expected<std::string> HostCommWorker::receive() {
  zmq::message_t msg;
  try {
    while (true) {
      zmq::pollitem_t item{state_->dealer.handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, kPollSlice);
      if ((item.revents & ZMQ_POLLIN) && state_->dealer.recv(msg)) return msg.to_string();
      if (state_->watch->lost())
        return make_error("lost the connection to the leader at {}", state_->endpoint);
    }
  } catch (const zmq::error_t& e) {
    return make_error("worker control channel: {}", e.what());
  }
}

Status HostCommWorker::send(std::string_view bytes) {
  try {
    state_->dealer.send(zmq::buffer(bytes.data(), bytes.size()), zmq::send_flags::none);
  } catch (const zmq::error_t& e) {
    return make_error("worker control channel: cannot send: {}", e.what());
  }
  return Status::Ok();
}

}  // namespace kestrel
