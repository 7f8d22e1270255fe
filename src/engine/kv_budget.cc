#include "engine/kv_budget.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

namespace kestrel {

namespace {

constexpr double kDefaultUtilization = 0.9;

double gib(int64_t bytes) {
  return static_cast<double>(bytes) / double(int64_t{1} << 30);
}

// The cgroup (v2, then v1) memory limit of this process, if any.
std::optional<int64_t> cgroup_limit() {
  for (const char* path :
       {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    std::ifstream f(path);
    std::string value;
    if (!(f >> value) || value == "max") continue;
    try {
      const long long v = std::stoll(value);
      // v1 reports "no limit" as a huge page-rounded number.
      if (v > 0 && v < (int64_t{1} << 60)) return v;
    } catch (...) {
    }
  }
  return std::nullopt;
}

}  // namespace

Expected<MemoryInfo> read_memory_info() {
  std::ifstream f("/proc/meminfo");
  if (!f)
    return make_error("cannot read /proc/meminfo to size the KV cache; pass --kv-cache-memory");
  MemoryInfo info;
  std::string line;
  while (std::getline(f, line)) {
    std::istringstream ss(line);
    std::string key;
    int64_t kib = 0;
    if (!(ss >> key >> kib)) continue;
    if (key == "MemTotal:") info.total_bytes = kib * 1024;
    if (key == "MemAvailable:") info.available_bytes = kib * 1024;
  }
  if (info.total_bytes <= 0)
    return make_error("/proc/meminfo has no MemTotal; pass --kv-cache-memory");
  if (const auto limit = cgroup_limit()) {
    info.total_bytes = std::min(info.total_bytes, *limit);
    info.available_bytes = std::min(info.available_bytes, *limit);
  }
  return info;
}

Expected<KVBudget> plan_kv_cache(const KVBudgetRequest& request, const MemoryInfo& memory) {
  const int64_t bytes_per_block =
      request.layout.bytes_per_block() + std::max<int64_t>(request.extra_bytes_per_block, 0);
  if (bytes_per_block <= 0) return make_error("KV cache: the layer groups have no size");
  const int64_t block_size = request.layout.block_size();
  KVBudget out;
  int64_t budget = 0;
  if (request.kv_cache_memory_bytes) {
    if (request.memory_utilization)
      return make_error("give either --kv-cache-memory or --gpu-memory-utilization, not both");
    if (*request.kv_cache_memory_bytes <= 0)
      return make_error("--kv-cache-memory must be positive, got {}",
                        *request.kv_cache_memory_bytes);
    budget = *request.kv_cache_memory_bytes;
    out.source = "--kv-cache-memory";
  } else {
    const double util = request.memory_utilization.value_or(kDefaultUtilization);
    if (!(util > 0.0 && util <= 1.0))
      return make_error("--gpu-memory-utilization must be in (0, 1], got {}", util);
    const int64_t engine_bytes =
        static_cast<int64_t>(std::floor(util * double(memory.total_bytes)));
    budget = engine_bytes - request.weight_bytes - request.activation_reserve_bytes;
    out.source = fmt::format(
        "{:.2f} x {:.1f} GiB RAM - {:.2f} GiB weights - {:.2f} GiB activations", util,
        gib(memory.total_bytes), gib(request.weight_bytes), gib(request.activation_reserve_bytes));
    if (!request.memory_utilization && budget > kDefaultCpuKvCacheBytes) {
      budget = kDefaultCpuKvCacheBytes;
      out.source =
          "default CPU cap of 4 GiB (raise with --kv-cache-memory or "
          "--gpu-memory-utilization)";
    }
  }
  const int64_t blocks_per_seq =
      max_blocks_per_request(request.layout.groups, request.max_model_len,
                             std::max<int64_t>(request.max_num_batched_tokens, 1));
  // One sequence + the null block, and the sequence's state slot.
  const int64_t slot_bytes = request.layout.state.bytes_per_slot();
  const int64_t needed = (blocks_per_seq + 1) * bytes_per_block + slot_bytes;
  if (slot_bytes > 0) {
    // Its slot, a checkpoint, its draft snapshots.
    const int64_t per_seq =
        1 + (request.state_checkpoints ? 1 : 0) + request.state_snapshots_per_seq;
    out.num_state_slots = std::max<int64_t>(request.max_num_seqs, 1);
    if (out.num_state_slots * per_seq * slot_bytes > budget / 2)
      out.num_state_slots = std::max<int64_t>(budget / 2 / (per_seq * slot_bytes), 1);
    out.num_state_checkpoints = request.state_checkpoints ? out.num_state_slots : 0;
    out.num_state_snapshots = out.num_state_slots * request.state_snapshots_per_seq;
    out.state_bytes =
        (out.num_state_slots + out.num_state_checkpoints + out.num_state_snapshots) * slot_bytes;
  }
  if (budget < needed)
    return make_error(
        "To serve at least one request with the model's max seq len ({}), {:.3f} GiB KV cache is "
        "needed, which is larger than the available KV cache memory ({:.3f} GiB; {}). Try "
        "increasing --kv-cache-memory or --gpu-memory-utilization, or decreasing --max-model-len.",
        request.max_model_len, gib(needed), gib(std::max<int64_t>(budget, 0)), out.source);
  out.num_blocks = std::min<int64_t>((budget - out.state_bytes) / bytes_per_block,
                                     std::numeric_limits<int32_t>::max());
  out.bytes = out.num_blocks * bytes_per_block;
  out.num_tokens = (out.num_blocks - 1) * block_size;
  return out;
}

Expected<int64_t> parse_byte_count(const std::string& text) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  const std::string suffix = text.substr(digits);
  if (digits == 0 || suffix.size() > 1)
    return make_error(
        "'{}' is not a byte count (digits with an optional k/m/g/t or K/M/G/T suffix)", text);
  int64_t scale = 1;
  if (!suffix.empty()) {
    const char c = suffix[0];
    const int power = std::string("kmgt").find(char(std::tolower(c))) + 1;
    if (power == 0) return make_error("'{}': unknown size suffix '{}'", text, suffix);
    const int64_t base = std::isupper(static_cast<unsigned char>(c)) ? 1024 : 1000;
    for (int i = 0; i < power; ++i) scale *= base;
  }
  int64_t value = 0;
  try {
    value = std::stoll(text.substr(0, digits));
  } catch (...) {
    return make_error("'{}' is too large", text);
  }
  if (value > std::numeric_limits<int64_t>::max() / scale)
    return make_error("'{}' is too large", text);
  return value * scale;
}

}  // namespace kestrel
