// engine/kv_budget.h — how many KV blocks the engine gets, decided once at start-up after the
// weights are loaded (ARCHITECTURE.md §3). On the CPU the "device memory" is host RAM:
//   --kv-cache-memory BYTES                 exactly that many bytes of KV cache;
//   --gpu-memory-utilization F (explicit)   F × RAM for the whole engine, minus weights and an
//                                           activation reserve, goes to KV (as vLLM on a GPU);
//   neither                                 as 0.9 × RAM, but at most 4 GiB (vLLM's CPU backend
//                                           default), so a small model does not claim all RAM.
// RAM is MemTotal from /proc/meminfo, lowered to the cgroup memory limit when one is set.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "base/status.h"
#include "kv/kv_cache_spec.h"

namespace kestrel {

struct MemoryInfo {
  int64_t total_bytes = 0;
  int64_t available_bytes = 0;
};

// This machine's RAM as the engine may use it.
Expected<MemoryInfo> read_memory_info();

struct KVBudgetRequest {
  std::optional<int64_t> kv_cache_memory_bytes;
  std::optional<double> memory_utilization;  // only when given explicitly
  int64_t weight_bytes = 0;
  int64_t activation_reserve_bytes = 0;  // workspace the forward pass needs besides KV
  KVCacheLayout layout;                  // the model's KV cache groups over one block pool
  // Bytes each block adds elsewhere: the speculative proposer's own cache under the same ids.
  int64_t extra_bytes_per_block = 0;
  int64_t max_model_len = 0;
  int64_t max_num_batched_tokens = 0;  // a step's tokens: what a sliding window holds besides
  // Models with linear-attention layers: one state slot (layout.state) per running sequence,
  // and with prefix caching as many checkpoint slots, priced before the blocks.
  int64_t max_num_seqs = 0;
  bool state_checkpoints = false;
  // Speculative decoding: k draft snapshots per running sequence (KVCacheStorage's), priced too.
  int64_t state_snapshots_per_seq = 0;
};

struct KVBudget {
  int64_t num_blocks = 0;  // including the null block
  int64_t bytes = 0;       // num_blocks × bytes per block
  int64_t num_tokens = 0;  // usable blocks × block size
  std::string source;      // which rule decided, for the start-up log
  // Linear-attention state slots: max_num_seqs (and as many checkpoints with prefix caching, and
  // the draft snapshots under speculative decoding),
  // or fewer of each when their bytes would take more than half the budget (then at most that
  // many sequences run at once).
  int64_t num_state_slots = 0;
  int64_t num_state_checkpoints = 0;
  int64_t num_state_snapshots = 0;  // draft snapshots, state_snapshots_per_seq per slot
  int64_t state_bytes = 0;
};

constexpr int64_t kDefaultCpuKvCacheBytes = int64_t{4} << 30;

// Errors when the budget cannot hold one request of max_model_len tokens (and its state slot),
// saying which flag to change, or when the flags are out of range.
Expected<KVBudget> plan_kv_cache(const KVBudgetRequest& request, const MemoryInfo& memory);

// Parses a byte count as vLLM's human_readable_int does: digits with an optional suffix,
// lowercase k/m/g/t decimal (1k = 1000), uppercase K/M/G/T binary (1K = 1024).
Expected<int64_t> parse_byte_count(const std::string& text);

}  // namespace kestrel
