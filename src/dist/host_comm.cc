#include "dist/host_comm.h"

#include <unistd.h>
#include <zmq.hpp>

#include <charconv>
#include <optional>

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

}  // namespace

struct HostCommLeader::State {
  zmq::context_t ctx{1};
  zmq::socket_t router{ctx, zmq::socket_type::router};
  std::vector<bool> connected;
};

Expected<std::unique_ptr<HostCommLeader>> HostCommLeader::bind(const std::string& endpoint,
                                                               int num_workers) {
  auto st = std::make_unique<State>();
  try {
    st->router.set(zmq::sockopt::linger, 0);
    st->router.set(zmq::sockopt::router_mandatory, 1);  // a send to a gone worker is an error
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
    zmq::pollitem_t item{state_->router.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, kPollSlice);
    if (item.revents & ZMQ_POLLIN) {
      zmq::message_t id, body;
      if (!state_->router.recv(id) || !state_->router.recv(body)) continue;
      const int rank = rank_of(id.to_string_view());
      if (rank < 1 || rank > num_workers_) continue;  // not one of the group: dropped
      return std::optional<std::pair<int, std::string>>{{rank, body.to_string()}};
    }
    if (alive) KTRY(alive());
    if (Clock::now() > deadline) return std::optional<std::pair<int, std::string>>{};
  }
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
  try {
    for (int r = 1; r <= num_workers_; ++r) {
      const std::string id = routing_id(r);
      state_->router.send(zmq::buffer(id), zmq::send_flags::sndmore);
      state_->router.send(zmq::buffer(bytes.data(), bytes.size()), zmq::send_flags::none);
    }
  } catch (const zmq::error_t& e) {
    return make_error("worker control channel {}: cannot send: {}", endpoint_, e.what());
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
};

Expected<std::unique_ptr<HostCommWorker>> HostCommWorker::connect(const std::string& endpoint,
                                                                  int rank) {
  auto st = std::make_unique<State>();
  try {
    st->dealer.set(zmq::sockopt::linger, 1000);  // the last reply still goes out at exit
    st->dealer.set(zmq::sockopt::routing_id, routing_id(rank));
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
    if (!state_->dealer.recv(msg)) return make_error("worker control channel: no message");
  } catch (const zmq::error_t& e) {
    return make_error("worker control channel: {}", e.what());
  }
  return msg.to_string();
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
