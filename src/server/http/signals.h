// server/http/signals.h — waiting for SIGINT/SIGTERM to start a graceful shutdown.
#pragma once

#include <csignal>
#include <initializer_list>
#include <memory>

namespace kestrel::server {

// Catches the given signals from construction on (so a signal arriving before wait() is not
// lost and does not kill the process) until destruction.
class SignalWaiter {
 public:
  explicit SignalWaiter(std::initializer_list<int> signals = {SIGINT, SIGTERM});
  ~SignalWaiter();
  SignalWaiter(const SignalWaiter&) = delete;
  SignalWaiter& operator=(const SignalWaiter&) = delete;

  // Blocks until one of the signals arrives and returns its number, or returns 0 after cancel().
  int wait();

  // Makes wait() return 0 (e.g. when the server must stop for another reason). Thread-safe.
  void cancel();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kestrel::server
