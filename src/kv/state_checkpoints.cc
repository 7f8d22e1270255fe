#include "kv/state_checkpoints.h"

#include <algorithm>

#include "base/status.h"

namespace kestrel {

StateCheckpoints::StateCheckpoints(int32_t first_slot, int32_t num_slots) {
  for (int32_t i = 0; i < num_slots; ++i) slots_.push_back(first_slot + i);
  free_.assign(slots_.rbegin(), slots_.rend());
}

bool StateCheckpoints::has(const BlockHash& h) const {
  const auto it = by_hash_.find(h);
  return it != by_hash_.end() && it->second->committed;
}

std::optional<int32_t> StateCheckpoints::find(const BlockHash& h) {
  const auto it = by_hash_.find(h);
  if (it == by_hash_.end() || !it->second->committed) return std::nullopt;
  lru_.splice(lru_.begin(), lru_, it->second);
  it->second->found_in = step_;
  return it->second->slot;
}

std::optional<int32_t> StateCheckpoints::reserve(const BlockHash& h) {
  if (slots_.empty() || by_hash_.count(h) != 0) return std::nullopt;
  if (free_.empty() && !evict()) return std::nullopt;
  const int32_t slot = free_.back();
  free_.pop_back();
  lru_.push_front(Entry{h, slot, false});
  by_hash_[h] = lru_.begin();
  pending_.push_back(lru_.begin());
  return slot;
}

void StateCheckpoints::release(const BlockHash& h) {
  const auto it = by_hash_.find(h);
  if (it != by_hash_.end() && it->second->committed) erase(it->second);
}

std::optional<int32_t> StateCheckpoints::take() {
  if (free_.empty() && !evict()) return std::nullopt;
  const int32_t slot = free_.back();
  free_.pop_back();
  ++num_taken_;
  return slot;
}

void StateCheckpoints::put_back(int32_t slot) {
  KCHECK(num_taken_ > 0 && std::find(slots_.begin(), slots_.end(), slot) != slots_.end(),
         "state slot {} was not taken from the checkpoints", slot);
  --num_taken_;
  free_.push_back(slot);
}

bool StateCheckpoints::evict() {
  // Pending ones are this step's to write, found ones its to read: both stay.
  const auto victim = std::find_if(lru_.rbegin(), lru_.rend(), [&](const Entry& e) {
    return e.committed && e.found_in != step_;
  });
  if (victim == lru_.rend()) return false;
  erase(std::next(victim).base());
  return true;
}

void StateCheckpoints::commit() {
  ++step_;
  for (const Lru::iterator it : pending_) it->committed = true;
  pending_.clear();
}

void StateCheckpoints::abort() {
  ++step_;
  for (const Lru::iterator it : pending_) erase(it);
  pending_.clear();
}

void StateCheckpoints::erase(Lru::iterator it) {
  free_.push_back(it->slot);
  by_hash_.erase(it->hash);
  lru_.erase(it);
}

}  // namespace kestrel
