#include "distributed/shm_comm.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>
#include <thread>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace kestrel {

namespace {

constexpr uint64_t kMagic = 0x6b65737472656c31ull;  // "kestrel1"
constexpr size_t kLine = 64;
// Busy-wait this many rounds before yielding the core: a collective's ranks usually arrive
// within microseconds of each other, and a yield costs more than that.
constexpr int kSpinRounds = 4000;
// Then yield for this long, then sleep in short naps: a rank that waits on another's long step
// (a data-parallel peer's prefill, under expert parallelism) should leave the core to it.
constexpr std::chrono::microseconds kYieldPeriod{2000};
constexpr std::chrono::microseconds kNap{50};

// One rank's barrier count and the note it posts with it, alone on their cache line.
struct alignas(kLine) Arrival {
  std::atomic<uint64_t> epoch{0};
  std::atomic<uint64_t> note{0};
};

size_t round_up(size_t n, size_t to) {
  return (n + to - 1) / to * to;
}

void cpu_relax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

using Clock = std::chrono::steady_clock;

// Waits for pred() until the deadline, or until `abort` is set: spins, yields, then naps.
template <typename Pred>
bool wait_until(Pred pred, Clock::time_point deadline, const std::atomic<bool>* abort = nullptr) {
  for (int i = 0; i < kSpinRounds; ++i) {
    if (pred()) return true;
    cpu_relax();
  }
  const Clock::time_point nap_from = Clock::now() + kYieldPeriod;
  while (!pred()) {
    const Clock::time_point now = Clock::now();
    if (now > deadline) return false;
    if (abort != nullptr && abort->load(std::memory_order_relaxed)) return false;
    if (now < nap_from) {
      sched_yield();
    } else {
      std::this_thread::sleep_for(kNap);
    }
  }
  return true;
}

}  // namespace

struct alignas(kLine) ShmComm::Header {
  std::atomic<uint64_t> magic{0};  // set last by rank 0: the segment is ready
  std::atomic<int32_t> attached{0};
  int32_t size = 0;
  uint64_t slot_bytes = 0;
};

namespace {

size_t segment_bytes(int size, size_t slot_bytes) {
  return round_up(sizeof(ShmComm::Header), kLine) + size_t(size) * sizeof(Arrival) +
         size_t(size) * round_up(slot_bytes, kLine);
}

}  // namespace

Expected<std::unique_ptr<ShmComm>> ShmComm::connect(const ShmCommOptions& o) {
  if (o.size < 1 || o.rank < 0 || o.rank >= o.size)
    return make_error("shared-memory group {}: rank {} of {} is not a rank of the group", o.name,
                      o.rank, o.size);
  if (o.slot_bytes < sizeof(float) || o.name.empty() || o.name[0] != '/')
    return make_error(
        "shared-memory group '{}': needs a name starting with '/' and slots of at "
        "least one float",
        o.name);
  const size_t bytes = segment_bytes(o.size, o.slot_bytes);
  const Clock::time_point deadline = Clock::now() + o.timeout;
  int fd = -1;
  if (o.rank == 0) {
    shm_unlink(o.name.c_str());  // a segment left by a crashed run
    fd = shm_open(o.name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0 || ftruncate(fd, off_t(bytes)) != 0) {
      const int err = errno;
      if (fd >= 0) close(fd);
      return make_error("shared-memory group {}: cannot create {} bytes: {}", o.name, bytes,
                        std::strerror(err));
    }
  } else {
    // Rank 0 may not have created (or sized) it yet.
    struct stat st {};
    while (true) {
      fd = shm_open(o.name.c_str(), O_RDWR, 0600);
      if (fd >= 0 && fstat(fd, &st) == 0 && size_t(st.st_size) == bytes) break;
      if (fd >= 0) close(fd);
      fd = -1;
      if (Clock::now() > deadline)
        return make_error(
            "shared-memory group {}: rank {} found no segment of {} bytes from rank 0 within {} "
            "ms (is rank 0 running with the same --tensor-parallel-size?)",
            o.name, o.rank, bytes, o.timeout.count());
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int map_err = errno;
  close(fd);
  if (base == MAP_FAILED)
    return make_error("shared-memory group {}: mmap of {} bytes failed: {}", o.name, bytes,
                      std::strerror(map_err));
  std::unique_ptr<ShmComm> comm(new ShmComm(o, base, bytes));
  Header* h = comm->header_;
  if (o.rank == 0) {
    new (h) Header();
    h->size = o.size;
    h->slot_bytes = o.slot_bytes;
    auto* arrivals =
        reinterpret_cast<Arrival*>(static_cast<char*>(base) + round_up(sizeof(Header), kLine));
    for (int r = 0; r < o.size; ++r) new (&arrivals[r]) Arrival();
    h->magic.store(kMagic, std::memory_order_release);
  } else {
    if (!wait_until([&] { return h->magic.load(std::memory_order_acquire) == kMagic; }, deadline))
      return make_error("shared-memory group {}: rank 0 did not initialise the segment in time",
                        o.name);
    if (h->size != o.size || h->slot_bytes != o.slot_bytes)
      return make_error(
          "shared-memory group {}: rank 0 made it for {} ranks and {}-byte slots, "
          "rank {} expects {} and {}",
          o.name, h->size, h->slot_bytes, o.rank, o.size, o.slot_bytes);
  }
  h->attached.fetch_add(1, std::memory_order_acq_rel);
  if (!wait_until([&] { return h->attached.load(std::memory_order_acquire) >= o.size; }, deadline,
                  o.abort)) {
    if (o.rank == 0) shm_unlink(o.name.c_str());  // the group will not form: leave nothing
    return make_error("shared-memory group {}: {} of {} ranks attached within {} ms", o.name,
                      h->attached.load(), o.size, o.timeout.count());
  }
  // Every rank has it mapped: the name is no longer needed, and nothing is left behind if a
  // rank dies.
  if (o.rank == 0) shm_unlink(o.name.c_str());
  return comm;
}

ShmComm::ShmComm(const ShmCommOptions& o, void* base, size_t bytes)
    : rank_(o.rank),
      size_(o.size),
      slot_floats_(o.slot_bytes / sizeof(float)),
      timeout_(o.timeout),
      abort_(o.abort),
      label_(o.label),
      base_(base),
      bytes_(bytes),
      header_(static_cast<Header*>(base)) {}

ShmComm::~ShmComm() {
  munmap(base_, bytes_);
}

float* ShmComm::slot(int r) const {
  return reinterpret_cast<float*>(slot_bytes_of(r));
}

char* ShmComm::slot_bytes_of(int r) const {
  char* first =
      static_cast<char*>(base_) + round_up(sizeof(Header), kLine) + size_t(size_) * sizeof(Arrival);
  return first + size_t(r) * round_up(slot_floats_ * sizeof(float), kLine);
}

namespace {

Arrival* arrivals_of(void* base) {
  return reinterpret_cast<Arrival*>(static_cast<char*>(base) +
                                    round_up(sizeof(ShmComm::Header), kLine));
}

}  // namespace

uint64_t ShmComm::max_note() const {
  const Arrival* arrivals = arrivals_of(base_);
  uint64_t m = 0;
  for (int r = 0; r < size_; ++r) m = std::max(m, arrivals[r].note.load(std::memory_order_relaxed));
  return m;
}

Status ShmComm::arrive_and_wait(uint64_t note) {
  Arrival* arrivals = arrivals_of(base_);
  ++epoch_;
  // The epoch's release publishes the note with it.
  arrivals[rank_].note.store(note, std::memory_order_relaxed);
  arrivals[rank_].epoch.store(epoch_, std::memory_order_release);
  const Clock::time_point deadline = Clock::now() + timeout_;
  for (int r = 0; r < size_; ++r) {
    if (wait_until([&] { return arrivals[r].epoch.load(std::memory_order_acquire) >= epoch_; },
                   deadline, abort_))
      continue;
    if (abort_ != nullptr && abort_->load())
      return make_error(
          "{} rank {} did not reach collective {}: the group was aborted (a rank failed)", label_,
          r, epoch_);
    return make_error(
        "{} rank {} did not reach collective {} within {} ms (it died or hangs); the group "
        "cannot continue",
        label_, r, epoch_, timeout_.count());
  }
  return Status::Ok();
}

Status ShmComm::all_reduce_sum(float* data, size_t n) {
  for (size_t off = 0; off < n; off += slot_floats_) {
    const size_t len = std::min(slot_floats_, n - off);
    std::memcpy(slot(rank_), data + off, len * sizeof(float));
    KTRY(arrive_and_wait());
    // Rank order, from the slots: every rank adds the same numbers in the same order.
    float* out = data + off;
    std::memcpy(out, slot(0), len * sizeof(float));
    for (int r = 1; r < size_; ++r) {
      const float* in = slot(r);
      for (size_t i = 0; i < len; ++i) out[i] += in[i];
    }
    KTRY(arrive_and_wait());  // the slots are free again
  }
  return Status::Ok();
}

Status ShmComm::all_gather(const float* in, size_t n, float* out) {
  for (size_t off = 0; off < n; off += slot_floats_) {
    const size_t len = std::min(slot_floats_, n - off);
    std::memcpy(slot(rank_), in + off, len * sizeof(float));
    KTRY(arrive_and_wait());
    for (int r = 0; r < size_; ++r)
      std::memcpy(out + size_t(r) * n + off, slot(r), len * sizeof(float));
    KTRY(arrive_and_wait());
  }
  return Status::Ok();
}

Status ShmComm::reduce_scatter_sum(const float* in, size_t n, float* out) {
  // Each round moves a piece of every rank's block: sub-slot q of a rank's slot holds its piece
  // for rank q, and rank q adds the pieces in rank order.
  const size_t piece = slot_floats_ / size_t(size_);
  if (piece == 0)
    return make_error("shared-memory group: slots of {} floats are too small for {} ranks",
                      slot_floats_, size_);
  for (size_t off = 0; off < n; off += piece) {
    const size_t len = std::min(piece, n - off);
    for (int q = 0; q < size_; ++q)
      std::memcpy(slot(rank_) + size_t(q) * piece, in + size_t(q) * n + off, len * sizeof(float));
    KTRY(arrive_and_wait());
    float* o = out + off;
    std::memcpy(o, slot(0) + size_t(rank_) * piece, len * sizeof(float));
    for (int r = 1; r < size_; ++r) {
      const float* p = slot(r) + size_t(rank_) * piece;
      for (size_t i = 0; i < len; ++i) o[i] += p[i];
    }
    KTRY(arrive_and_wait());
  }
  return Status::Ok();
}

Status ShmComm::all_gather_bytes(const void* in, size_t bytes, void* out) {
  const size_t slot = slot_floats_ * sizeof(float);
  const char* src = static_cast<const char*>(in);
  char* dst = static_cast<char*>(out);
  for (size_t off = 0; off < bytes; off += slot) {
    const size_t len = std::min(slot, bytes - off);
    std::memcpy(slot_bytes_of(rank_), src + off, len);
    KTRY(arrive_and_wait());
    for (int r = 0; r < size_; ++r)
      std::memcpy(dst + size_t(r) * bytes + off, slot_bytes_of(r), len);
    KTRY(arrive_and_wait());
  }
  return Status::Ok();
}

Status ShmComm::all_to_all_v(const void* send, std::span<const size_t> send_bytes, void* recv,
                             std::span<const size_t> recv_bytes) {
  KCHECK(send_bytes.size() == size_t(size_) && recv_bytes.size() == size_t(size_),
         "all-to-all over {} ranks with {} send and {} receive counts", size_, send_bytes.size(),
         recv_bytes.size());
  if (send_bytes[size_t(rank_)] != recv_bytes[size_t(rank_)])
    return make_error("all-to-all: rank {} sends itself {} bytes but expects {}", rank_,
                      send_bytes[size_t(rank_)], recv_bytes[size_t(rank_)]);
  // Each round carries up to `piece` bytes of every pair: sub-slot q of a rank's slot holds its
  // piece for rank q. The ranks agree on the number of rounds through the first barrier's notes.
  const size_t piece = (slot_floats_ * sizeof(float) / size_t(size_)) / kLine * kLine;
  if (piece == 0)
    return make_error("shared-memory group: slots of {} bytes are too small for {} ranks",
                      slot_floats_ * sizeof(float), size_);
  std::vector<size_t> send_at(size_t(size_) + 1, 0), recv_at(size_t(size_) + 1, 0);
  uint64_t mine = 1;
  for (size_t q = 0; q < size_t(size_); ++q) {
    send_at[q + 1] = send_at[q] + send_bytes[q];
    recv_at[q + 1] = recv_at[q] + recv_bytes[q];
    mine = std::max<uint64_t>(mine, (std::max(send_bytes[q], recv_bytes[q]) + piece - 1) / piece);
  }
  const char* src = static_cast<const char*>(send);
  char* dst = static_cast<char*>(recv);
  const size_t me = size_t(rank_);
  if (send_bytes[me] > 0) std::memcpy(dst + recv_at[me], src + send_at[me], send_bytes[me]);
  auto part = [piece](size_t total, uint64_t round) {
    const size_t done = size_t(round) * piece;
    return done >= total ? size_t(0) : std::min(piece, total - done);
  };
  uint64_t rounds = 1;
  for (uint64_t k = 0; k < rounds; ++k) {
    for (size_t q = 0; q < size_t(size_); ++q)
      if (const size_t len = part(send_bytes[q], k); q != me && len > 0)
        std::memcpy(slot_bytes_of(rank_) + q * piece, src + send_at[q] + size_t(k) * piece, len);
    KTRY(arrive_and_wait(mine));
    if (k == 0) rounds = max_note();
    for (size_t s = 0; s < size_t(size_); ++s)
      if (const size_t len = part(recv_bytes[s], k); s != me && len > 0)
        std::memcpy(dst + recv_at[s] + size_t(k) * piece, slot_bytes_of(int(s)) + me * piece, len);
    // The same note again: a slower rank may still be reading the first barrier's notes.
    KTRY(arrive_and_wait(mine));
  }
  return Status::Ok();
}

Status ShmComm::barrier() {
  return arrive_and_wait();
}

}  // namespace kestrel
