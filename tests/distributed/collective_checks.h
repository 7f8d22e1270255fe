// The checks every rank of a communicator test runs over all-to-all(v), all-gather of bytes and
// reduce-scatter (tests/dist, tests/dist_nccl): parts of varying length (empty ones, all-empty
// exchanges, parts larger than a shared-memory piece), contents that name the pair, and the
// reduce-scatter checked against the rank-order sum (exactly, or within float rounding).
#pragma once

#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "distributed/device_comm.h"
#include "distributed/fork_ranks.h"

namespace kestrel::test {

// Bytes rank `from` sends rank `to` in round `iter`: a length that varies with the pair (zero
// for some) and contents that name the pair.
inline size_t pair_bytes(int from, int to, int iter) {
  static constexpr size_t kLens[] = {0, 1, 63, 64, 65, 700, 5000, 0, 13, 9000};
  return kLens[size_t(from * 7 + to * 3 + iter) % (sizeof(kLens) / sizeof(kLens[0]))];
}

inline std::vector<uint8_t> pair_data(int from, int to, int iter) {
  std::vector<uint8_t> v(pair_bytes(from, to, iter));
  std::mt19937 gen(uint32_t(from * 1000003 + to * 1009 + iter));
  for (uint8_t& b : v) b = uint8_t(gen());
  return v;
}

// The checks every rank runs: 0 when all passed, else which one failed.
inline int exercise_exchanges(DeviceComm& comm, bool exact_sum) {
  const int size = comm.size(), rank = comm.rank();
  for (int iter = 0; iter < 12; ++iter) {
    // All-to-all(v): my parts in rank order, then what each peer sent me.
    std::vector<size_t> send_bytes(static_cast<size_t>(size)),
        recv_bytes(static_cast<size_t>(size));
    std::vector<uint8_t> send;
    for (int q = 0; q < size; ++q) {
      const std::vector<uint8_t> part = pair_data(rank, q, iter);
      send_bytes[size_t(q)] = part.size();
      send.insert(send.end(), part.begin(), part.end());
      recv_bytes[size_t(q)] = pair_bytes(q, rank, iter);
    }
    std::vector<uint8_t> recv(std::accumulate(recv_bytes.begin(), recv_bytes.end(), size_t(0)));
    if (!comm.all_to_all_v(send.data(), send_bytes, recv.data(), recv_bytes).ok()) return 10;
    size_t at = 0;
    for (int s = 0; s < size; ++s) {
      const std::vector<uint8_t> want = pair_data(s, rank, iter);
      if (!want.empty() && std::memcmp(recv.data() + at, want.data(), want.size()) != 0) return 11;
      at += want.size();
    }
    // Nothing anywhere still meets.
    const std::vector<size_t> none(size_t(size), 0);
    if (!comm.all_to_all_v(nullptr, none, nullptr, none).ok()) return 12;
    // All-gather of bytes (an odd length).
    const size_t n = 37 + size_t(iter) * 101;
    const std::vector<uint8_t> mine = pair_data(rank, rank + 100, iter + int(n));
    std::vector<uint8_t> all(mine.size() * size_t(size));
    if (!comm.all_gather_bytes(mine.data(), mine.size(), all.data()).ok()) return 13;
    for (int r = 0; r < size; ++r) {
      const std::vector<uint8_t> want = pair_data(r, r + 100, iter + int(n));
      if (std::memcmp(all.data() + size_t(r) * want.size(), want.data(), want.size()) != 0)
        return 14;
    }
    // Reduce-scatter: my block of the sum of every rank's blocks.
    const size_t block = 1 + size_t(iter) * 211;
    const std::vector<float> in = rank_data(rank, iter, block * size_t(size));
    std::vector<float> out(block);
    if (!comm.reduce_scatter_sum(in.data(), block, out.data()).ok()) return 15;
    std::vector<std::vector<float>> ins;
    for (int r = 0; r < size; ++r) ins.push_back(rank_data(r, iter, block * size_t(size)));
    for (size_t i = 0; i < block; ++i) {
      float want = 0;
      double exact = 0;
      for (int r = 0; r < size; ++r) {
        const float v = ins[size_t(r)][size_t(rank) * block + i];
        want = r == 0 ? v : want + v;
        exact += double(v);
      }
      if (exact_sum ? std::memcmp(&want, &out[i], sizeof(float)) != 0
                    : std::abs(double(out[i]) - exact) > 1e-4 * (1.0 + std::abs(exact)))
        return 16;
    }
  }
  return comm.barrier().ok() ? 0 : 17;
}

}  // namespace kestrel::test
