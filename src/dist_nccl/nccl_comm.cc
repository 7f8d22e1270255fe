#include "dist_nccl/nccl_comm.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <thread>

namespace kestrel {

namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

struct NcclComm::State {
  NcclCommOptions o;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  char* buf = nullptr;  // device staging buffer
  size_t buf_bytes = 0;
  bool broken = false;  // aborted: every later collective fails

  ~State() {
    if (comm != nullptr) {
      if (broken) {
        ncclCommAbort(comm);
      } else {
        ncclCommDestroy(comm);
      }
    }
    if (buf != nullptr) cudaFree(buf);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }

  Error fail(const std::string& what, const std::string& why) {
    if (comm != nullptr && !broken) {
      broken = true;
      ncclCommAbort(comm);
      comm = nullptr;
    }
    return make_error("{} rank {}: NCCL {} failed: {} (a peer died, hangs or is unreachable)",
                      o.label, o.rank, what, why);
  }

  // Waits until the communicator is no longer busy with an operation it accepted
  // (non-blocking NCCL returns ncclInProgress), or fails it.
  Status settle(const std::string& what, ncclResult_t r) {
    const Clock::time_point deadline = Clock::now() + o.timeout;
    while (r == ncclInProgress) {
      if (Clock::now() > deadline) return fail(what, "timed out");
      std::this_thread::yield();
      if (ncclCommGetAsyncError(comm, &r) != ncclSuccess) return fail(what, "no state");
    }
    if (r != ncclSuccess) return fail(what, ncclGetErrorString(r));
    return Status::Ok();
  }

  // Waits for the stream (the copies and the collective on it), watching for NCCL's errors.
  Status finish(const std::string& what) {
    const Clock::time_point deadline = Clock::now() + o.timeout;
    while (true) {
      const cudaError_t q = cudaStreamQuery(stream);
      if (q == cudaSuccess) return Status::Ok();
      if (q != cudaErrorNotReady) return fail(what, cudaGetErrorString(q));
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm, &async);
      if (async != ncclSuccess && async != ncclInProgress)
        return fail(what, ncclGetErrorString(async));
      if (Clock::now() > deadline) return fail(what, "timed out");
      std::this_thread::yield();
    }
  }

  Status ensure(size_t bytes) {
    if (bytes <= buf_bytes) return Status::Ok();
    if (buf != nullptr) cudaFree(buf);
    buf = nullptr;
    buf_bytes = 0;
    if (const cudaError_t e = cudaMalloc(&buf, bytes); e != cudaSuccess)
      return make_error("{} rank {}: cannot allocate {} bytes on GPU {}: {}", o.label, o.rank,
                        bytes, o.device, cudaGetErrorString(e));
    buf_bytes = bytes;
    return Status::Ok();
  }

  Status usable() const {
    if (broken) return make_error("{} rank {}: the NCCL group was aborted", o.label, o.rank);
    return Status::Ok();
  }
};

int cuda_device_count() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

Expected<std::unique_ptr<NcclComm>> NcclComm::connect(const NcclCommOptions& o,
                                                      StoreClient& store) {
  if (o.size < 1 || o.rank < 0 || o.rank >= o.size)
    return make_error("NCCL group: rank {} of {} is not a rank of the group", o.rank, o.size);
  auto st = std::make_unique<State>();
  st->o = o;
  if (const cudaError_t e = cudaSetDevice(o.device); e != cudaSuccess)
    return make_error("{} rank {}: GPU {}: {}", o.label, o.rank, o.device, cudaGetErrorString(e));
  if (const cudaError_t e = cudaStreamCreateWithFlags(&st->stream, cudaStreamNonBlocking);
      e != cudaSuccess)
    return make_error("{} rank {}: cannot create a stream: {}", o.label, o.rank,
                      cudaGetErrorString(e));
  ncclUniqueId id;
  const std::string key = o.prefix + "/unique-id";
  if (o.rank == 0) {
    if (const ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess)
      return make_error("{} rank 0: ncclGetUniqueId: {}", o.label, ncclGetErrorString(r));
    KTRY(store.set(key, std::vector<char>(id.internal, id.internal + sizeof(id.internal))));
  } else {
    KASSIGN(const std::vector<char> v, store.get(key));
    if (v.size() != sizeof(id.internal))
      return make_error("{} rank {}: a malformed NCCL id in the store", o.label, o.rank);
    std::copy(v.begin(), v.end(), id.internal);
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  KTRY(st->settle("init", ncclCommInitRankConfig(&st->comm, o.size, id, o.rank, &config)));
  return std::unique_ptr<NcclComm>(new NcclComm(o, std::move(st)));
}

NcclComm::NcclComm(const NcclCommOptions& o, std::unique_ptr<State> state)
    : rank_(o.rank), size_(o.size), state_(std::move(state)) {}

NcclComm::~NcclComm() = default;

Status NcclComm::all_reduce_sum(float* data, size_t n) {
  KTRY(state_->usable());
  if (n == 0) return Status::Ok();
  State& s = *state_;
  KTRY(s.ensure(n * sizeof(float)));
  cudaMemcpyAsync(s.buf, data, n * sizeof(float), cudaMemcpyHostToDevice, s.stream);
  KTRY(
      s.settle("all-reduce", ncclAllReduce(s.buf, s.buf, n, ncclFloat, ncclSum, s.comm, s.stream)));
  cudaMemcpyAsync(data, s.buf, n * sizeof(float), cudaMemcpyDeviceToHost, s.stream);
  return s.finish("all-reduce");
}

Status NcclComm::reduce_scatter_sum(const float* in, size_t n, float* out) {
  KTRY(state_->usable());
  if (n == 0) return Status::Ok();
  State& s = *state_;
  const size_t whole = n * size_t(size_) * sizeof(float);
  KTRY(s.ensure(whole + n * sizeof(float)));
  float* dev_in = reinterpret_cast<float*>(s.buf);
  float* dev_out = reinterpret_cast<float*>(s.buf + whole);
  cudaMemcpyAsync(dev_in, in, whole, cudaMemcpyHostToDevice, s.stream);
  KTRY(s.settle("reduce-scatter",
                ncclReduceScatter(dev_in, dev_out, n, ncclFloat, ncclSum, s.comm, s.stream)));
  cudaMemcpyAsync(out, dev_out, n * sizeof(float), cudaMemcpyDeviceToHost, s.stream);
  return s.finish("reduce-scatter");
}

Status NcclComm::all_gather(const float* in, size_t n, float* out) {
  return all_gather_bytes(in, n * sizeof(float), out);
}

Status NcclComm::all_gather_bytes(const void* in, size_t bytes, void* out) {
  KTRY(state_->usable());
  if (bytes == 0) return Status::Ok();
  State& s = *state_;
  const size_t whole = bytes * size_t(size_);
  KTRY(s.ensure(bytes + whole));
  cudaMemcpyAsync(s.buf, in, bytes, cudaMemcpyHostToDevice, s.stream);
  KTRY(s.settle("all-gather",
                ncclAllGather(s.buf, s.buf + bytes, bytes, ncclUint8, s.comm, s.stream)));
  cudaMemcpyAsync(out, s.buf + bytes, whole, cudaMemcpyDeviceToHost, s.stream);
  return s.finish("all-gather");
}

Status NcclComm::all_to_all_v(const void* send, std::span<const size_t> send_bytes, void* recv,
                              std::span<const size_t> recv_bytes) {
  KTRY(state_->usable());
  KCHECK(send_bytes.size() == size_t(size_) && recv_bytes.size() == size_t(size_),
         "all-to-all over {} ranks with {} send and {} receive counts", size_, send_bytes.size(),
         recv_bytes.size());
  State& s = *state_;
  size_t out_total = 0, in_total = 0;
  for (size_t q = 0; q < size_t(size_); ++q) {
    out_total += send_bytes[q];
    in_total += recv_bytes[q];
  }
  KTRY(s.ensure(out_total + in_total + 1));
  char* dev_send = s.buf;
  char* dev_recv = s.buf + out_total;
  if (out_total > 0) cudaMemcpyAsync(dev_send, send, out_total, cudaMemcpyHostToDevice, s.stream);
  // One group of point-to-point sends and receives: NCCL runs them together.
  ncclResult_t r = ncclGroupStart();
  size_t so = 0, ro = 0;
  for (int q = 0; q < size_ && (r == ncclSuccess || r == ncclInProgress); ++q) {
    if (send_bytes[size_t(q)] > 0)
      r = ncclSend(dev_send + so, send_bytes[size_t(q)], ncclUint8, q, s.comm, s.stream);
    if ((r == ncclSuccess || r == ncclInProgress) && recv_bytes[size_t(q)] > 0)
      r = ncclRecv(dev_recv + ro, recv_bytes[size_t(q)], ncclUint8, q, s.comm, s.stream);
    so += send_bytes[size_t(q)];
    ro += recv_bytes[size_t(q)];
  }
  const ncclResult_t end = ncclGroupEnd();
  KTRY(s.settle("all-to-all", r == ncclSuccess || r == ncclInProgress ? end : r));
  if (in_total > 0) cudaMemcpyAsync(recv, dev_recv, in_total, cudaMemcpyDeviceToHost, s.stream);
  return s.finish("all-to-all");
}

Status NcclComm::barrier() {
  float one = 1.0f;
  return all_reduce_sum(&one, 1);
}

}  // namespace kestrel
