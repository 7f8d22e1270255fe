#include "dist/store.h"

#include <msgpack.hpp>
#include <zmq.hpp>

#include <map>

namespace kestrel {

namespace {

using Clock = std::chrono::steady_clock;

std::string endpoint(const std::string& host, int port) {
  return "tcp://" + host + ":" + (port == 0 ? std::string("*") : std::to_string(port));
}

}  // namespace

struct StoreServer::State {
  zmq::context_t ctx{1};
  zmq::socket_t router{ctx, zmq::socket_type::router};
  std::atomic<bool> stop{false};
  std::map<std::string, std::vector<char>> values;
};

Expected<std::unique_ptr<StoreServer>> StoreServer::start(const std::string& host, int port) {
  auto st = std::make_unique<State>();
  try {
    st->router.set(zmq::sockopt::linger, 0);
    st->router.bind(endpoint(host, port));
    const std::string last = st->router.get(zmq::sockopt::last_endpoint);
    port = std::stoi(last.substr(last.rfind(':') + 1));
  } catch (const zmq::error_t& e) {
    return make_error("rendezvous store: cannot listen on {}:{}: {}", host, port, e.what());
  }
  return std::unique_ptr<StoreServer>(new StoreServer(std::move(st), port));
}

StoreServer::StoreServer(std::unique_ptr<State> state, int port)
    : state_(std::move(state)), port_(port) {
  thread_ = std::thread([st = state_.get()] {
    // Requests are [seq, op, key, value]; answers [seq, found, value].
    while (!st->stop.load()) {
      zmq::pollitem_t item{st->router.handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, std::chrono::milliseconds(50));
      if (!(item.revents & ZMQ_POLLIN)) continue;
      zmq::message_t id, body;
      if (!st->router.recv(id) || !st->router.recv(body)) continue;
      uint64_t seq = 0;
      std::string op, key;
      std::vector<char> value;
      try {
        const msgpack::object_handle h =
            msgpack::unpack(static_cast<const char*>(body.data()), body.size());
        std::tie(seq, op, key, value) =
            h.get().as<std::tuple<uint64_t, std::string, std::string, std::vector<char>>>();
      } catch (const std::exception&) {
        continue;  // not a store request: dropped
      }
      bool found = true;
      std::vector<char> answer;
      if (op == "set") {
        st->values[key] = std::move(value);
      } else {
        const auto it = st->values.find(key);
        found = it != st->values.end();
        if (found) answer = it->second;
      }
      msgpack::sbuffer out;
      msgpack::pack(out, std::make_tuple(seq, found, answer));
      st->router.send(id, zmq::send_flags::sndmore);
      st->router.send(zmq::buffer(out.data(), out.size()), zmq::send_flags::dontwait);
    }
  });
}

StoreServer::~StoreServer() {
  state_->stop.store(true);
  thread_.join();
}

struct StoreClient::State {
  zmq::context_t ctx{1};
  zmq::socket_t dealer{ctx, zmq::socket_type::dealer};
};

Expected<std::unique_ptr<StoreClient>> StoreClient::connect(const std::string& host, int port,
                                                            std::chrono::milliseconds timeout) {
  auto st = std::make_unique<State>();
  const std::string address = endpoint(host, port);
  try {
    st->dealer.set(zmq::sockopt::linger, 0);
    st->dealer.connect(address);
  } catch (const zmq::error_t& e) {
    return make_error("rendezvous store {}: {}", address, e.what());
  }
  return std::unique_ptr<StoreClient>(new StoreClient(std::move(st), address, timeout));
}

StoreClient::StoreClient(std::unique_ptr<State> state, std::string address,
                         std::chrono::milliseconds t)
    : state_(std::move(state)), address_(std::move(address)), timeout_(t) {}

StoreClient::~StoreClient() = default;

Expected<std::pair<bool, std::vector<char>>> StoreClient::request(const std::string& op,
                                                                  const std::string& key,
                                                                  const std::vector<char>& value) {
  const uint64_t seq = ++seq_;
  msgpack::sbuffer out;
  msgpack::pack(out, std::make_tuple(seq, op, key, value));
  const Clock::time_point deadline = Clock::now() + timeout_;
  try {
    state_->dealer.send(zmq::buffer(out.data(), out.size()), zmq::send_flags::none);
    while (true) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      zmq::pollitem_t item{state_->dealer.handle(), 0, ZMQ_POLLIN, 0};
      if (left.count() > 0) zmq::poll(&item, 1, left);
      if (!(item.revents & ZMQ_POLLIN))
        return make_error(
            "rendezvous store {}: no answer to {} '{}' within {} ms (is rank 0 "
            "up at that address?)",
            address_, op, key, timeout_.count());
      zmq::message_t body;
      if (!state_->dealer.recv(body)) continue;
      const msgpack::object_handle h =
          msgpack::unpack(static_cast<const char*>(body.data()), body.size());
      auto [got, found, answer] = h.get().as<std::tuple<uint64_t, bool, std::vector<char>>>();
      if (got == seq) return std::make_pair(found, std::move(answer));  // older answers: late
    }
  } catch (const std::exception& e) {
    return make_error("rendezvous store {}: {} '{}': {}", address_, op, key, e.what());
  }
}

Status StoreClient::set(const std::string& key, const std::vector<char>& value) {
  KTRY(request("set", key, value));
  return Status::Ok();
}

Expected<std::vector<char>> StoreClient::get(const std::string& key) {
  KTRY(wait({key}, timeout_));
  KASSIGN(auto r, request("get", key, {}));
  return std::move(r.second);
}

Status StoreClient::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  const Clock::time_point deadline = Clock::now() + timeout;
  for (size_t i = 0; i < keys.size(); ++i) {
    while (true) {
      KASSIGN(auto r, request("get", keys[i], {}));
      if (r.first) break;
      if (Clock::now() > deadline) {
        std::string missing;
        for (size_t j = i; j < keys.size(); ++j)
          missing.append(missing.empty() ? "" : ", ").append(keys[j]);
        return make_error(
            "rendezvous store {}: still waiting for {} after {} ms (a rank did "
            "not start or cannot reach {})",
            address_, missing, timeout.count(), address_);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  return Status::Ok();
}

}  // namespace kestrel
