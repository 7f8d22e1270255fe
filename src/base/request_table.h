// base/request_table.h — how the engine names a request inside itself, and the table that holds
// per-request state by that name.
//
// A RequestHandle is a small dense integer the engine client assigns when a request is submitted
// and recycles once the request is gone from every layer (scheduler, KV manager, worker, engine
// core, output processor). The API's request id string stays at the engine client's edge; every
// table below it is a RequestTable: a vector indexed by handle, so a lookup is an index, not a
// string hash. Not thread-safe: each table belongs to the one thread of its owner.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "base/status.h"

namespace kestrel {

using RequestHandle = uint32_t;

template <typename T>
class RequestTable {
 public:
  T* find(RequestHandle h) { return h < slots_.size() && slots_[h] ? &*slots_[h] : nullptr; }
  const T* find(RequestHandle h) const {
    return h < slots_.size() && slots_[h] ? &*slots_[h] : nullptr;
  }
  bool contains(RequestHandle h) const { return find(h) != nullptr; }
  T& at(RequestHandle h) {
    T* v = find(h);
    KCHECK(v != nullptr, "request {} is not in the table", h);
    return *v;
  }
  const T& at(RequestHandle h) const {
    const T* v = find(h);
    KCHECK(v != nullptr, "request {} is not in the table", h);
    return *v;
  }
  // Inserts or replaces the entry of h.
  T& put(RequestHandle h, T value) {
    if (h >= slots_.size()) slots_.resize(size_t(h) + 1);
    if (!slots_[h]) ++size_;
    slots_[h] = std::move(value);
    return *slots_[h];
  }
  // The entry of h, default-constructed when absent.
  T& operator[](RequestHandle h) {
    if (T* v = find(h)) return *v;
    return put(h, T{});
  }
  // Returns whether h had an entry.
  bool erase(RequestHandle h) {
    if (!contains(h)) return false;
    slots_[h].reset();
    --size_;
    return true;
  }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  // fn(handle, entry) for every entry, in handle order.
  template <typename Fn>
  void for_each(Fn&& fn) {
    for (size_t h = 0; h < slots_.size(); ++h)
      if (slots_[h]) fn(RequestHandle(h), *slots_[h]);
  }

 private:
  std::vector<std::optional<T>> slots_;
  size_t size_ = 0;
};

}  // namespace kestrel
