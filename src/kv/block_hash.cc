#include "kv/block_hash.h"

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include "base/status.h"

namespace kestrel {

BlockHash hash_block(const std::optional<BlockHash>& parent, std::span<const int32_t> tokens,
                     std::span<const uint64_t> extra_keys) {
  XXH3_state_t state;
  XXH3_128bits_reset(&state);
  // A tag byte separates "no parent" from any real parent value; the lengths keep the token and
  // extra-key fields from sliding into each other.
  const uint8_t has_parent = parent.has_value() ? 1 : 0;
  XXH3_128bits_update(&state, &has_parent, sizeof(has_parent));
  if (parent) {
    XXH3_128bits_update(&state, &parent->lo, sizeof(parent->lo));
    XXH3_128bits_update(&state, &parent->hi, sizeof(parent->hi));
  }
  const uint64_t n_tokens = tokens.size();
  const uint64_t n_extra = extra_keys.size();
  XXH3_128bits_update(&state, &n_tokens, sizeof(n_tokens));
  XXH3_128bits_update(&state, tokens.data(), tokens.size_bytes());
  XXH3_128bits_update(&state, &n_extra, sizeof(n_extra));
  XXH3_128bits_update(&state, extra_keys.data(), extra_keys.size_bytes());
  const XXH128_hash_t h = XXH3_128bits_digest(&state);
  return BlockHash{h.low64, h.high64};
}

void extend_block_hashes(std::span<const int32_t> tokens, int32_t block_size,
                         std::span<const uint64_t> extra_keys, std::vector<BlockHash>* hashes) {
  KCHECK(block_size > 0, "block size {}", block_size);
  const size_t num_full = tokens.size() / static_cast<size_t>(block_size);
  for (size_t i = hashes->size(); i < num_full; ++i) {
    std::optional<BlockHash> parent;
    if (i > 0) parent = (*hashes)[i - 1];
    hashes->push_back(hash_block(parent, tokens.subspan(i * block_size, block_size), extra_keys));
  }
}

}  // namespace kestrel
