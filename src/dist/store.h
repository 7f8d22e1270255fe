// dist/store.h — the rendezvous store of a process group (issue 20): a key-value map served by
// rank 0 over ZeroMQ (ROUTER) with msgpack requests, which every rank reaches at rank 0's address
// (--data-parallel-address / --master-addr style: an explicit address, never a resolved
// hostname). Ranks publish what the others need to connect (Gloo's pair addresses, ports) and
// wait for it, each wait bounded by a timeout that names the keys still missing.
//
// StoreServer owns its serving thread; a StoreClient belongs to one thread of its rank.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"

namespace kestrel {

class StoreServer {
 public:
  // Serves on tcp://host:port (port 0: one the OS picks; port() says which).
  static Expected<std::unique_ptr<StoreServer>> start(const std::string& host, int port);
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;
  int port() const { return port_; }

 private:
  struct State;
  explicit StoreServer(std::unique_ptr<State> state, int port);
  std::unique_ptr<State> state_;
  int port_;
  std::thread thread_;
};

class StoreClient {
 public:
  // Every request waits at most `timeout` for the server's answer.
  static Expected<std::unique_ptr<StoreClient>> connect(const std::string& host, int port,
                                                        std::chrono::milliseconds timeout);
  ~StoreClient();
  StoreClient(const StoreClient&) = delete;
  StoreClient& operator=(const StoreClient&) = delete;

  Status set(const std::string& key, const std::vector<char>& value);
  // The value of `key`, waiting for it to be set up to the client's timeout.
  Expected<std::vector<char>> get(const std::string& key);
  // Waits until every key is set, up to `timeout`; the error lists the keys still missing.
  Status wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  std::chrono::milliseconds timeout() const { return timeout_; }

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

}  // namespace kestrel
