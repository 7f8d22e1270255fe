#include "distributed/store.h"

#include <msgpack.hpp>
#include <zmq.hpp>

#include <map>
#include <tuple>

#include "base/logging.h"

namespace kestrel {

namespace {

using Clock = std::chrono::steady_clock;

// Requests: [seq, op, key, value, from]; the answer to set/get: [seq, found, value]; a notice:
// [topic, value, from]. The server's own pings are notices of topic kPingTopic.
using Request = std::tuple<uint64_t, std::string, std::string, std::vector<char>, std::string>;
using Answer = std::tuple<uint64_t, bool, std::vector<char>>;
using Notice = std::tuple<std::string, std::vector<char>, std::string>;
constexpr const char* kPingTopic = "ping";
// How often a thread that waits for messages wakes to do its timed work.
constexpr std::chrono::milliseconds kPollTick{20};

std::string tcp_endpoint(const std::string& host, int port) {
  return "tcp://" + host + ":" + (port == 0 ? std::string("*") : std::to_string(port));
}

template <typename T>
msgpack::sbuffer pack(const T& value) {
  msgpack::sbuffer out;
  msgpack::pack(out, value);
  return out;
}

template <typename T>
bool unpack(const zmq::message_t& m, T& value) {
  try {
    const msgpack::object_handle h = msgpack::unpack(static_cast<const char*>(m.data()), m.size());
    value = h.get().as<T>();
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace

std::string subscribed_key(const std::string& name) {
  return "subscribed/" + name;
}

struct StoreServer::State {
  zmq::context_t ctx{1};
  zmq::socket_t router{ctx, zmq::socket_type::router};
  std::atomic<bool> stop{false};
  NoticeTiming timing;
  std::map<std::string, std::vector<char>> values;
  struct Subscriber {
    std::string name;
    Clock::time_point last_seen;
  };
  std::map<std::string, Subscriber> subscribers;  // by ZeroMQ identity

  void notify(const std::string& identity, const Notice& n) {
    const msgpack::sbuffer out = pack(n);
    router.send(zmq::buffer(identity), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
    router.send(zmq::buffer(out.data(), out.size()), zmq::send_flags::dontwait);
  }
  void notify_all(const Notice& n) {
    for (const auto& [identity, s] : subscribers) notify(identity, n);
  }

  void handle(const std::string& identity, Request& r) {
    auto& [seq, op, key, value, from] = r;
    if (op == "set" || op == "get") {
      bool found = true;
      std::vector<char> answer;
      if (op == "set") {
        values[key] = std::move(value);
      } else {
        const auto it = values.find(key);
        found = it != values.end();
        if (found) answer = it->second;
      }
      const msgpack::sbuffer out = pack(Answer{seq, found, answer});
      router.send(zmq::buffer(identity), zmq::send_flags::sndmore);
      router.send(zmq::buffer(out.data(), out.size()), zmq::send_flags::dontwait);
    } else if (op == "sub") {
      subscribers[identity] = Subscriber{key, Clock::now()};
      values[subscribed_key(key)] = {};
      notify(identity, Notice{kPingTopic, {}, ""});  // starts its watch of the server
    } else if (op == "ping") {
      if (auto it = subscribers.find(identity); it != subscribers.end())
        it->second.last_seen = Clock::now();
    } else if (op == "pub") {
      notify_all(Notice{key, value, from});
    }
  }

  // Pings every subscriber and announces (once) those that fell silent.
  void watch(Clock::time_point now) {
    std::vector<std::string> lost;
    for (auto it = subscribers.begin(); it != subscribers.end();) {
      if (now - it->second.last_seen > timing.lost_after) {
        lost.push_back(it->second.name);
        it = subscribers.erase(it);
      } else {
        ++it;
      }
    }
    for (const std::string& name : lost) {
      KLOG_ERROR("group member {} stopped answering for {} ms; telling the others", name,
                 timing.lost_after.count());
      notify_all(Notice{kLostTopic, std::vector<char>(name.begin(), name.end()), ""});
    }
    notify_all(Notice{kPingTopic, {}, ""});
  }
};

Expected<std::unique_ptr<StoreServer>> StoreServer::start(const std::string& endpoint,
                                                          NoticeTiming timing) {
  auto st = std::make_unique<State>();
  st->timing = timing;
  std::string bound;
  int port = 0;
  try {
    st->router.set(zmq::sockopt::linger, 0);
    st->router.bind(endpoint);
    bound = st->router.get(zmq::sockopt::last_endpoint);
    if (bound.rfind("tcp://", 0) == 0) port = std::stoi(bound.substr(bound.rfind(':') + 1));
  } catch (const zmq::error_t& e) {
    return make_error("rendezvous store: cannot listen on {}: {}", endpoint, e.what());
  }
  return std::unique_ptr<StoreServer>(new StoreServer(std::move(st), bound, port));
}

Expected<std::unique_ptr<StoreServer>> StoreServer::start(const std::string& host, int port) {
  return start(tcp_endpoint(host, port));
}

StoreServer::StoreServer(std::unique_ptr<State> state, std::string endpoint, int port)
    : state_(std::move(state)), endpoint_(std::move(endpoint)), port_(port) {
  thread_ = std::thread([st = state_.get()] {
    Clock::time_point next_watch = Clock::now() + st->timing.ping_interval;
    while (!st->stop.load()) {
      zmq::pollitem_t item{st->router.handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, kPollTick);
      const Clock::time_point now = Clock::now();
      if (now >= next_watch) {
        st->watch(now);
        next_watch = now + st->timing.ping_interval;
      }
      if (!(item.revents & ZMQ_POLLIN)) continue;
      // Drain what is waiting, so a burst of pings never delays a rendezvous.
      while (true) {
        zmq::message_t id, body;
        if (!st->router.recv(id, zmq::recv_flags::dontwait)) break;
        if (!st->router.recv(body)) break;
        Request r;
        if (!unpack(body, r)) continue;  // not a store request: dropped
        st->handle(id.to_string(), r);
      }
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

Expected<std::unique_ptr<StoreClient>> StoreClient::connect(const std::string& endpoint,
                                                            std::chrono::milliseconds timeout) {
  auto st = std::make_unique<State>();
  try {
    st->dealer.set(zmq::sockopt::linger, 0);
    st->dealer.connect(endpoint);
  } catch (const zmq::error_t& e) {
    return make_error("rendezvous store {}: {}", endpoint, e.what());
  }
  return std::unique_ptr<StoreClient>(new StoreClient(std::move(st), endpoint, timeout));
}

Expected<std::unique_ptr<StoreClient>> StoreClient::connect(const std::string& host, int port,
                                                            std::chrono::milliseconds timeout) {
  return connect(tcp_endpoint(host, port), timeout);
}

StoreClient::StoreClient(std::unique_ptr<State> state, std::string address,
                         std::chrono::milliseconds t)
    : state_(std::move(state)), address_(std::move(address)), timeout_(t) {}

StoreClient::~StoreClient() = default;

Expected<std::pair<bool, std::vector<char>>> StoreClient::request(const std::string& op,
                                                                  const std::string& key,
                                                                  const std::vector<char>& value) {
  const uint64_t seq = ++seq_;
  const msgpack::sbuffer out = pack(Request{seq, op, key, value, ""});
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
      Answer a;
      if (!unpack(body, a)) continue;
      auto& [got, found, answer] = a;
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

Status StoreClient::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout,
                         const std::function<Status()>& alive) {
  const Clock::time_point deadline = Clock::now() + timeout;
  for (size_t i = 0; i < keys.size(); ++i) {
    while (true) {
      KASSIGN(auto r, request("get", keys[i], {}));
      if (r.first) break;
      if (alive) KTRY(alive());
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

struct StoreSubscriber::State {
  zmq::context_t ctx{1};
  zmq::socket_t sub{ctx, zmq::socket_type::dealer};  // the thread's: notices in, pings out
  std::mutex pub_mu;
  zmq::socket_t pub{ctx, zmq::socket_type::dealer};  // publish()'s, under pub_mu
  std::string endpoint;
  Handler handler;
  NoticeTiming timing;
  std::atomic<bool> stop{false};
};

Expected<std::unique_ptr<StoreSubscriber>> StoreSubscriber::connect(const std::string& endpoint,
                                                                    std::string name,
                                                                    Handler handler,
                                                                    NoticeTiming timing) {
  auto st = std::make_unique<State>();
  st->endpoint = endpoint;
  st->handler = std::move(handler);
  st->timing = timing;
  try {
    for (zmq::socket_t* s : {&st->sub, &st->pub}) {
      s->set(zmq::sockopt::linger, 0);
      s->connect(endpoint);
    }
    const msgpack::sbuffer out = pack(Request{0, "sub", name, {}, name});
    st->sub.send(zmq::buffer(out.data(), out.size()), zmq::send_flags::none);
  } catch (const zmq::error_t& e) {
    return make_error("group notices at {}: {}", endpoint, e.what());
  }
  return std::unique_ptr<StoreSubscriber>(new StoreSubscriber(std::move(st), std::move(name)));
}

StoreSubscriber::StoreSubscriber(std::unique_ptr<State> state, std::string name)
    : state_(std::move(state)), name_(std::move(name)) {
  thread_ = std::thread([this] { run(); });
}

StoreSubscriber::~StoreSubscriber() {
  state_->stop.store(true);
  thread_.join();
}

void StoreSubscriber::run() {
  State& st = *state_;
  const msgpack::sbuffer ping = pack(Request{0, "ping", name_, {}, name_});
  Clock::time_point next_ping = Clock::now();
  // The server is watched from its first message on (before that it may still be starting).
  bool heard = false, lost = false;
  Clock::time_point last_heard = Clock::now();
  while (!st.stop.load()) {
    zmq::pollitem_t item{st.sub.handle(), 0, ZMQ_POLLIN, 0};
    try {
      zmq::poll(&item, 1, kPollTick);
      const Clock::time_point now = Clock::now();
      if (now >= next_ping) {
        st.sub.send(zmq::buffer(ping.data(), ping.size()), zmq::send_flags::dontwait);
        next_ping = now + st.timing.ping_interval;
      }
      while (item.revents & ZMQ_POLLIN) {
        zmq::message_t body;
        if (!st.sub.recv(body, zmq::recv_flags::dontwait)) break;
        heard = true;
        last_heard = Clock::now();
        Notice n;
        if (!unpack(body, n)) continue;
        auto& [topic, value, from] = n;
        if (topic == kPingTopic || from == name_) continue;
        st.handler(topic, value);
      }
    } catch (const zmq::error_t& e) {
      KLOG_ERROR("group notices at {}: {}", st.endpoint, e.what());
      return;
    }
    if (heard && !lost && Clock::now() - last_heard > st.timing.lost_after) {
      lost = true;
      st.handler(kLostTopic, std::vector<char>(st.endpoint.begin(), st.endpoint.end()));
    }
  }
}

Status StoreSubscriber::publish(const std::string& topic, const std::vector<char>& value) {
  const msgpack::sbuffer out = pack(Request{0, "pub", topic, value, name_});
  std::lock_guard lock(state_->pub_mu);
  try {
    state_->pub.send(zmq::buffer(out.data(), out.size()), zmq::send_flags::none);
  } catch (const zmq::error_t& e) {
    return make_error("group notices at {}: cannot publish {}: {}", state_->endpoint, topic,
                      e.what());
  }
  return Status::Ok();
}

}  // namespace kestrel
