// distributed/store.h — the rendezvous store and notice board of a process group (issue 20): a
// key-value map served by rank 0 over ZeroMQ (ROUTER) with msgpack requests, which every rank
// reaches at rank 0's address (--data-parallel-address:--data-parallel-rpc-port, an explicit
// address, never a resolved hostname; or an ipc:// path on one host). Ranks publish what the
// others need to connect (Gloo's pair addresses, shared-memory names, config hashes) and wait
// for it, each wait bounded by a timeout that names the keys still missing.
//
// The same server relays notices (data-parallel waves) between subscribers: a notice one
// subscriber publishes reaches every other one. It also watches them: subscribers ping it, it
// pings them, and a subscriber that falls silent is announced to the rest as "lost" (its name as
// the value), while a subscriber that stops hearing the server reports the server lost — so a
// dead process fails its group within seconds instead of leaving the others waiting in a
// collective.
//
// StoreServer and StoreSubscriber own their threads; a StoreClient belongs to one thread of its
// rank; StoreSubscriber::publish is thread-safe and its handler runs on its own thread.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"

namespace kestrel {

// How subscribers and the server watch each other.
struct NoticeTiming {
  std::chrono::milliseconds ping_interval{200};
  std::chrono::milliseconds lost_after{5000};  // silence after which a peer is lost
};

// The topic of the notice that announces a lost peer (the value names it).
inline constexpr const char* kLostTopic = "lost";

class StoreServer {
 public:
  // Serves on `endpoint` (tcp://HOST:PORT, port * or 0: one the OS picks; or ipc://PATH).
  static Expected<std::unique_ptr<StoreServer>> start(const std::string& endpoint,
                                                      NoticeTiming timing = {});
  // Serves on tcp://host:port (port 0: one the OS picks; port() says which).
  static Expected<std::unique_ptr<StoreServer>> start(const std::string& host, int port);
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;
  int port() const { return port_; }  // 0 for ipc://
  const std::string& endpoint() const { return endpoint_; }

 private:
  struct State;
  StoreServer(std::unique_ptr<State> state, std::string endpoint, int port);
  std::unique_ptr<State> state_;
  std::string endpoint_;
  int port_;
  std::thread thread_;
};

class StoreClient {
 public:
  // Every request waits at most `timeout` for the server's answer (a server that is not up yet
  // gets the request when it comes up within that time).
  static Expected<std::unique_ptr<StoreClient>> connect(const std::string& endpoint,
                                                        std::chrono::milliseconds timeout);
  static Expected<std::unique_ptr<StoreClient>> connect(const std::string& host, int port,
                                                        std::chrono::milliseconds timeout);
  ~StoreClient();
  StoreClient(const StoreClient&) = delete;
  StoreClient& operator=(const StoreClient&) = delete;

  Status set(const std::string& key, const std::vector<char>& value);
  // The value of `key`, waiting for it to be set up to the client's timeout.
  Expected<std::vector<char>> get(const std::string& key);
  // Waits until every key is set, up to `timeout`; the error lists the keys still missing.
  // `alive`, when given, is checked between polls: its error ends the wait at once (a member
  // known to have failed will not post its key).
  Status wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout,
              const std::function<Status()>& alive = {});
  std::chrono::milliseconds timeout() const { return timeout_; }
  const std::string& address() const { return address_; }

 private:
  struct State;
  StoreClient(std::unique_ptr<State> state, std::string address, std::chrono::milliseconds t);
  // One request and its answer: whether the key was there, and its value.
  Expected<std::pair<bool, std::vector<char>>> request(const std::string& op,
                                                       const std::string& key,
                                                       const std::vector<char>& value);
  std::unique_ptr<State> state_;
  std::string address_;
  std::chrono::milliseconds timeout_;
  uint64_t seq_ = 0;
};

// The key the server sets once subscriber `name` has subscribed (wait for every member's before
// publishing to them).
std::string subscribed_key(const std::string& name);

class StoreSubscriber {
 public:
  // topic, value — on the subscriber's thread; must not block for long.
  using Handler = std::function<void(const std::string&, const std::vector<char>&)>;
  // Subscribes to the server at `endpoint` as `name` (unique in the group). `handler` gets every
  // notice another subscriber publishes, a kLostTopic notice naming a subscriber the server lost,
  // and one naming the server (its endpoint) if the server falls silent.
  static Expected<std::unique_ptr<StoreSubscriber>> connect(const std::string& endpoint,
                                                            std::string name, Handler handler,
                                                            NoticeTiming timing = {});
  ~StoreSubscriber();
  StoreSubscriber(const StoreSubscriber&) = delete;
  StoreSubscriber& operator=(const StoreSubscriber&) = delete;

  // Sends a notice to every other subscriber. Thread-safe.
  Status publish(const std::string& topic, const std::vector<char>& value);
  const std::string& name() const { return name_; }

 private:
  struct State;
  StoreSubscriber(std::unique_ptr<State> state, std::string name);
  void run();
  std::unique_ptr<State> state_;
  std::string name_;
  std::thread thread_;
};

}  // namespace kestrel
