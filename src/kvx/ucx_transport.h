// kvx/ucx_transport.h — the KV transfer's fast path over UCX (issue 21; Debian's libucx-dev):
// one-sided reads of a producer rank's KV pool. On one host UCX reads with cross-memory attach
// (one copy, process to process); between hosts it reads over TCP or RDMA, whichever it finds.
// The TCP path (kvx/tcp.h) stays the handshake, the control messages and the fallback: a
// producer rank advertises its UCX worker address, the pool's remote key and base address in its
// hello, and a consumer that has UCX too reads block slices straight into its own blocks. What
// it reads is checked as a TCP read is (the blocks belong to the pool, the heads to the rank),
// and the lease protocol around a read does not change.
//
// Built without UCX (KESTREL_HAS_UCX undefined), start() says so and the TCP path serves alone.
//
// UcxProducer: one per producer rank, beside its KvServer; its progress thread serves the reads
// UCX emulates (over TCP). UcxConsumer: one per KvPuller; its worker is thread-safe (the
// puller's threads share it).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "kv/kv_memory.h"
#include "kvx/tcp.h"

namespace kestrel {

// Whether this build has the UCX path.
bool ucx_available();

class UcxProducer {
 public:
  // Registers `memory` (the whole pool, and its state slots) with a new UCX context and starts
  // the progress thread.
  static Expected<std::unique_ptr<UcxProducer>> start(const KVMemoryView& memory);
  ~UcxProducer();
  UcxProducer(const UcxProducer&) = delete;
  UcxProducer& operator=(const UcxProducer&) = delete;
  // What the hello carries: {"host": the kernel's boot id, "address": worker address, "rkey":
  // packed remote key (both hex), "base": the pool's address, "length": its bytes, and for a
  // model with linear-attention layers "state": {"rkey", "base", "length"} of its state slots}.
  const nlohmann::json& advertisement() const { return advertisement_; }

  struct Impl;

 private:
  explicit UcxProducer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  nlohmann::json advertisement_;
};

// One read: `bytes` from the producer's address `remote` into `local`.
struct UcxRead {
  uint8_t* local = nullptr;
  uint64_t remote = 0;
  size_t bytes = 0;
};

class UcxConsumer {
 public:
  static Expected<std::unique_ptr<UcxConsumer>> start();
  ~UcxConsumer();
  UcxConsumer(const UcxConsumer&) = delete;
  UcxConsumer& operator=(const UcxConsumer&) = delete;

  // An endpoint to one producer rank, with its pool's key. Destroyed before its consumer.
  class Remote {
   public:
    ~Remote();
    Remote(const Remote&) = delete;
    Remote& operator=(const Remote&) = delete;
    uint64_t base() const { return base_; }
    uint64_t length() const { return length_; }
    // The producer's state slots (0: it advertised none).
    uint64_t state_base() const { return state_base_; }

    struct Impl;

   private:
    friend class UcxConsumer;
    Remote() = default;
    std::unique_ptr<Impl> impl_;
    uint64_t base_ = 0, length_ = 0, state_base_ = 0;
  };

  // Connects to the producer that sent `advertisement`.
  Expected<std::unique_ptr<Remote>> connect(const nlohmann::json& advertisement);
  // Runs `reads` and waits for all of them until `deadline`; reads outside the advertised range
  // are refused before any is issued. On an error or the deadline the remote is unusable.
  Status read(Remote& remote, const std::vector<UcxRead>& reads, Deadline deadline);

  struct Impl;

 private:
  explicit UcxConsumer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kestrel
