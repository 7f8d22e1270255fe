#include "kvx/ucx_transport.h"

#include <fmt/format.h>

#ifdef KESTREL_HAS_UCX

#include <ucp/api/ucp.h>

#include <atomic>
#include <fstream>
#include <thread>

#include "base/logging.h"

namespace kestrel {

namespace {

std::string to_hex(const void* data, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  const auto* p = static_cast<const uint8_t*>(data);
  std::string out(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kDigits[p[i] >> 4];
    out[2 * i + 1] = kDigits[p[i] & 15];
  }
  return out;
}

Expected<std::string> from_hex(const std::string& hex) {
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  if (hex.size() % 2 != 0) return make_error("odd-length hex");
  std::string out(hex.size() / 2, '\0');
  for (size_t i = 0; i < out.size(); ++i) {
    const int hi = digit(hex[2 * i]), lo = digit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return make_error("not hex");
    out[i] = char(hi * 16 + lo);
  }
  return out;
}

// This kernel's boot id: a producer with the same one is on this host.
std::string boot_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return id;
}

Error ucs_error(const char* what, ucs_status_t status) {
  return make_error("UCX {}: {}", what, ucs_status_string(status));
}

// A context and a thread-safe worker for remote memory access; `wakeup`: the worker can sleep.
struct Worker {
  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;

  Status open(bool wakeup) {
    ucp_config_t* config = nullptr;
    if (ucs_status_t s = ucp_config_read(nullptr, nullptr, &config); s != UCS_OK)
      return ucs_error("config", s);
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
    params.features = UCP_FEATURE_RMA | (wakeup ? UCP_FEATURE_WAKEUP : 0);
    params.mt_workers_shared = 1;
    const ucs_status_t s = ucp_init(&params, config, &context);
    ucp_config_release(config);
    if (s != UCS_OK) return ucs_error("init", s);
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_MULTI;
    if (ucs_status_t w = ucp_worker_create(context, &wp, &worker); w != UCS_OK)
      return ucs_error("worker", w);
    return Status::Ok();
  }

  void close() {
    if (worker != nullptr) ucp_worker_destroy(worker);
    if (context != nullptr) ucp_cleanup(context);
    worker = nullptr;
    context = nullptr;
  }
};

}  // namespace

bool ucx_available() {
  return true;
}

namespace {

// One registered region's remote key, packed as hex.
Expected<std::string> packed_rkey(ucp_context_h context, ucp_mem_h memh) {
  void* rkey = nullptr;
  size_t rkey_size = 0;
  if (ucs_status_t s = ucp_rkey_pack(context, memh, &rkey, &rkey_size); s != UCS_OK)
    return ucs_error("remote key", s);
  std::string hex = to_hex(rkey, rkey_size);
  ucp_rkey_buffer_release(rkey);
  return hex;
}

Status map_memory(ucp_context_h context, void* base, uint64_t length, ucp_mem_h* memh) {
  ucp_mem_map_params_t mp{};
  mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
  mp.address = base;
  mp.length = length;
  if (ucs_status_t s = ucp_mem_map(context, &mp, memh); s != UCS_OK) {
    *memh = nullptr;
    return ucs_error("memory registration", s);
  }
  return Status::Ok();
}

}  // namespace

struct UcxProducer::Impl {
  Worker w;
  ucp_mem_h memh = nullptr;
  ucp_mem_h state_memh = nullptr;  // the linear-attention state slots, when there are some
  std::atomic<bool> stop{false};
  std::thread progress;

  ~Impl() {
    if (progress.joinable()) {
      stop.store(true);
      ucp_worker_signal(w.worker);
      progress.join();
    }
    if (memh != nullptr) ucp_mem_unmap(w.context, memh);
    if (state_memh != nullptr) ucp_mem_unmap(w.context, state_memh);
    w.close();
  }

  // Serves what the transports emulate on this side (reads over TCP need the target's worker).
  void run() {
    while (!stop.load()) {
      while (ucp_worker_progress(w.worker) != 0) {
      }
      if (stop.load()) break;
      if (ucp_worker_wait(w.worker) != UCS_OK) std::this_thread::yield();
    }
  }
};

UcxProducer::UcxProducer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
UcxProducer::~UcxProducer() = default;

Expected<std::unique_ptr<UcxProducer>> UcxProducer::start(const KVMemoryView& memory) {
  auto impl = std::make_unique<Impl>();
  KTRY(impl->w.open(/*wakeup=*/true));
  const uint64_t length =
      uint64_t(memory.planes) * uint64_t(memory.num_blocks) * memory.block_bytes;
  KTRY(map_memory(impl->w.context, memory.base, length, &impl->memh));
  KASSIGN(const std::string rkey_hex, packed_rkey(impl->w.context, impl->memh));
  std::string state_rkey_hex;
  if (memory.state != nullptr) {
    KTRY(map_memory(impl->w.context, memory.state, memory.state_bytes(), &impl->state_memh));
    KASSIGN(state_rkey_hex, packed_rkey(impl->w.context, impl->state_memh));
  }
  ucp_address_t* address = nullptr;
  size_t address_size = 0;
  if (ucs_status_t s = ucp_worker_get_address(impl->w.worker, &address, &address_size); s != UCS_OK)
    return ucs_error("worker address", s);
  const std::string address_hex = to_hex(address, address_size);
  ucp_worker_release_address(impl->w.worker, address);
  Impl* raw = impl.get();
  impl->progress = std::thread([raw] { raw->run(); });
  auto producer = std::unique_ptr<UcxProducer>(new UcxProducer(std::move(impl)));
  producer->advertisement_ = {{"host", boot_id()},
                              {"address", address_hex},
                              {"rkey", rkey_hex},
                              {"base", reinterpret_cast<uint64_t>(memory.base)},
                              {"length", length}};
  if (memory.state != nullptr)
    producer->advertisement_["state"] = {{"rkey", state_rkey_hex},
                                         {"base", reinterpret_cast<uint64_t>(memory.state)},
                                         {"length", uint64_t(memory.state_bytes())}};
  return producer;
}

struct UcxConsumer::Impl {
  Worker w;
  ~Impl() { w.close(); }

  // Progresses until `request` completes or the deadline passes; frees it.
  ucs_status_t wait(void* request, Deadline deadline) {
    if (request == nullptr) return UCS_OK;
    if (UCS_PTR_IS_ERR(request)) return UCS_PTR_STATUS(request);
    ucs_status_t status;
    while ((status = ucp_request_check_status(request)) == UCS_INPROGRESS) {
      if (ucp_worker_progress(w.worker) == 0 && std::chrono::steady_clock::now() > deadline) {
        ucp_request_cancel(w.worker, request);
        while (ucp_request_check_status(request) == UCS_INPROGRESS) ucp_worker_progress(w.worker);
        status = UCS_ERR_TIMED_OUT;
        break;
      }
    }
    ucp_request_free(request);
    return status;
  }
};

struct UcxConsumer::Remote::Impl {
  UcxConsumer::Impl* consumer = nullptr;
  ucp_ep_h ep = nullptr;
  ucp_rkey_h rkey = nullptr;
  ucp_rkey_h state_rkey = nullptr;  // the state slots' (none: the producer has none)
  uint64_t state_base = 0, state_length = 0;
  std::atomic<bool> failed{false};
  bool peer_errors = false;  // created with peer failure handling (a remote host)

  static void on_error(void* arg, ucp_ep_h, ucs_status_t) {
    static_cast<Impl*>(arg)->failed.store(true);
  }

  ~Impl() {
    if (rkey != nullptr) ucp_rkey_destroy(rkey);
    if (state_rkey != nullptr) ucp_rkey_destroy(state_rkey);
    if (ep == nullptr) return;
    ucp_request_param_t p{};
    // Forced (no flush) where a dead peer could hold the flush up; UCX allows it only with peer
    // failure handling. On one host the flush has nothing to wait for.
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = peer_errors ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    consumer->wait(ucp_ep_close_nbx(ep, &p),
                   std::chrono::steady_clock::now() + std::chrono::seconds(5));
  }
};

UcxConsumer::UcxConsumer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
UcxConsumer::~UcxConsumer() = default;
UcxConsumer::Remote::~Remote() = default;

Expected<std::unique_ptr<UcxConsumer>> UcxConsumer::start() {
  auto impl = std::make_unique<Impl>();
  KTRY(impl->w.open(/*wakeup=*/false));
  return std::unique_ptr<UcxConsumer>(new UcxConsumer(std::move(impl)));
}

Expected<std::unique_ptr<UcxConsumer::Remote>> UcxConsumer::connect(
    const nlohmann::json& advertisement) {
  std::string address, rkey, state_rkey;
  uint64_t base = 0, length = 0, state_base = 0, state_length = 0;
  try {
    KASSIGN(address, from_hex(advertisement.at("address").get<std::string>()));
    KASSIGN(rkey, from_hex(advertisement.at("rkey").get<std::string>()));
    base = advertisement.at("base").get<uint64_t>();
    length = advertisement.at("length").get<uint64_t>();
    if (advertisement.contains("state")) {
      const nlohmann::json& s = advertisement["state"];
      KASSIGN(state_rkey, from_hex(s.at("rkey").get<std::string>()));
      state_base = s.at("base").get<uint64_t>();
      state_length = s.at("length").get<uint64_t>();
    }
  } catch (const nlohmann::json::exception& e) {
    return make_error("a malformed UCX advertisement: {}", e.what());
  }
  auto remote = std::unique_ptr<Remote>(new Remote());
  remote->impl_ = std::make_unique<Remote::Impl>();
  Remote::Impl& r = *remote->impl_;
  r.consumer = impl_.get();
  remote->base_ = base;
  remote->length_ = length;
  remote->state_base_ = state_base;
  r.state_base = state_base;
  r.state_length = state_length;
  ucp_ep_params_t ep{};
  ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                  UCP_EP_PARAM_FIELD_ERR_HANDLER;
  ep.address = reinterpret_cast<const ucp_address_t*>(address.data());
  // On one host UCX reads through shared memory or cross-memory attach, transports without peer
  // failure handling (asking for it would leave only TCP); a dead producer there fails the read
  // itself. Between hosts the endpoint needs it, so a dead peer fails the endpoint, not us.
  const bool same_host =
      advertisement.value("host", std::string()) == boot_id() && !boot_id().empty();
  ep.err_mode = same_host ? UCP_ERR_HANDLING_MODE_NONE : UCP_ERR_HANDLING_MODE_PEER;
  r.peer_errors = !same_host;
  ep.err_handler.cb = &Remote::Impl::on_error;
  ep.err_handler.arg = &r;
  if (ucs_status_t s = ucp_ep_create(impl_->w.worker, &ep, &r.ep); s != UCS_OK) {
    r.ep = nullptr;
    return ucs_error("endpoint", s);
  }
  if (ucs_status_t s = ucp_ep_rkey_unpack(r.ep, rkey.data(), &r.rkey); s != UCS_OK) {
    r.rkey = nullptr;
    return ucs_error("remote key", s);
  }
  if (!state_rkey.empty())
    if (ucs_status_t s = ucp_ep_rkey_unpack(r.ep, state_rkey.data(), &r.state_rkey); s != UCS_OK) {
      r.state_rkey = nullptr;
      return ucs_error("remote key", s);
    }
  return remote;
}

Status UcxConsumer::read(Remote& remote, const std::vector<UcxRead>& reads, Deadline deadline) {
  Remote::Impl& r = *remote.impl_;
  auto within = [](const UcxRead& x, uint64_t base, uint64_t length) {
    return x.remote >= base && x.bytes <= length && x.remote - base <= length - x.bytes;
  };
  // Each read's region: the block pool, or the state slots.
  std::vector<ucp_rkey_h> keys;
  keys.reserve(reads.size());
  for (const UcxRead& x : reads) {
    if (within(x, remote.base_, remote.length_))
      keys.push_back(r.rkey);
    else if (r.state_rkey != nullptr && within(x, r.state_base, r.state_length))
      keys.push_back(r.state_rkey);
    else
      return make_error("a UCX read outside the producer's pool");
  }
  if (r.failed.load()) return make_error("UCX: the producer's endpoint failed");
  std::vector<void*> pending;
  pending.reserve(reads.size());
  Status result = Status::Ok();
  for (size_t i = 0; i < reads.size(); ++i) {
    const UcxRead& x = reads[i];
    ucp_request_param_t p{};
    void* request = ucp_get_nbx(r.ep, x.local, x.bytes, x.remote, keys[i], &p);
    if (UCS_PTR_IS_ERR(request)) {
      result = ucs_error("read", UCS_PTR_STATUS(request));
      break;
    }
    if (request != nullptr) pending.push_back(request);
  }
  // Every issued read completes (or is cancelled) before its buffer is the caller's again.
  for (void* request : pending)
    if (ucs_status_t s = impl_->wait(request, deadline); s != UCS_OK && result.ok())
      result = ucs_error("read", s);
  if (result.ok() && r.failed.load()) result = make_error("UCX: the producer's endpoint failed");
  if (!result.ok()) r.failed.store(true);
  return result;
}

}  // namespace kestrel

#else  // built without UCX

namespace kestrel {

bool ucx_available() {
  return false;
}

struct UcxProducer::Impl {};
struct UcxConsumer::Impl {};
struct UcxConsumer::Remote::Impl {};

UcxProducer::UcxProducer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
UcxProducer::~UcxProducer() = default;
UcxConsumer::UcxConsumer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
UcxConsumer::~UcxConsumer() = default;
UcxConsumer::Remote::~Remote() = default;

Expected<std::unique_ptr<UcxProducer>> UcxProducer::start(const KVMemoryView&) {
  return make_error("this build has no UCX (install libucx-dev and rebuild)");
}
Expected<std::unique_ptr<UcxConsumer>> UcxConsumer::start() {
  return make_error("this build has no UCX (install libucx-dev and rebuild)");
}
Expected<std::unique_ptr<UcxConsumer::Remote>> UcxConsumer::connect(const nlohmann::json&) {
  return make_error("this build has no UCX");
}
Status UcxConsumer::read(Remote&, const std::vector<UcxRead>&, Deadline) {
  return make_error("this build has no UCX");
}

}  // namespace kestrel

#endif
