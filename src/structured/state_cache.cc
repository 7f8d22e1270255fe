#include "structured/state_cache.h"

#include <cstring>

namespace kestrel::structured {
namespace {

// A state as bytes: per stack its depth, then its frames from the bottom.
std::string serialize(const std::vector<Stack>& stacks) {
  std::string key;
  for (const Stack& s : stacks) {
    const auto depth = static_cast<uint8_t>(s.depth());
    key += static_cast<char>(depth);
    const size_t at = key.size();
    key.resize(at + depth * sizeof(Frame));
    Stack t = s;
    for (int i = depth - 1; i >= 0; --i) {
      std::memcpy(key.data() + at + static_cast<size_t>(i) * sizeof(Frame), &t.top(),
                  sizeof(Frame));
      t.pop();
    }
  }
  return key;
}

}  // namespace

void StateCache::trim() {
  if (keys_.size() < kMaxStates) return;
  ids_.clear();
  keys_.clear();
  next_.clear();
  masks_.clear();
  loaded_ = -1;
}

int32_t StateCache::intern(const std::vector<Stack>& stacks) {
  std::string key = serialize(stacks);
  if (auto it = ids_.find(key); it != ids_.end()) return it->second;
  if (keys_.size() >= kMaxStates) return kFull;
  const auto id = static_cast<int32_t>(keys_.size());
  auto [it, inserted] = ids_.emplace(std::move(key), id);
  keys_.push_back(it->first);
  next_.resize(next_.size() + 256, kUnknown);
  return id;
}

void StateCache::load(int32_t state, std::vector<Stack>& out) const {
  out.clear();
  const std::string_view key = keys_[state];
  for (size_t at = 0; at < key.size();) {
    const auto depth = static_cast<uint8_t>(key[at++]);
    Stack s;
    for (int i = 0; i < depth; ++i, at += sizeof(Frame)) {
      Frame f;
      std::memcpy(&f, key.data() + at, sizeof(Frame));
      s.push(f);
    }
    out.push_back(s);
  }
}

int32_t StateCache::compute(int32_t state, uint8_t byte) {
  // The walk computes siblings one after another: their parent is usually still loaded.
  if (loaded_ != state) {
    load(state, from_);
    loaded_ = state;
  }
  to_.clear();
  for (const Stack& s : from_) advance(*grammar_, s, byte, to_);
  dedupe(to_);
  const int32_t id = to_.empty() ? kReject : intern(to_);
  // A full cache keeps no transition to a state it could not record.
  if (id != kFull) next_[static_cast<size_t>(state) * 256 + byte] = id;
  return id;
}

const std::vector<uint64_t>* StateCache::mask(int32_t state) const {
  for (const auto& [id, bits] : masks_) {
    if (id == state) return &bits;
  }
  return nullptr;
}

void StateCache::set_mask(int32_t state, const std::vector<uint64_t>& bits) {
  if (masks_.size() == kMaxMasks) masks_.pop_front();
  masks_.emplace_back(state, bits);
}

}  // namespace kestrel::structured
