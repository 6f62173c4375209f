// A bounded, least-recently-used cache of what an executor built for one rank's program under one *call shape*:
// the CUDA executor keeps an instantiated CUDA graph per shape and replays it for eager calls that repeat
// (exec/cuda/graph_cache.h, docs/cuda-executor.md "Graph cache"). Pure C++, no CUDA types: tested on the CPU
// (tests/unit/test_call_shape_cache.cc).
//
// Why a shape is enough: a rank's copy-engine program is a pure function of its schedule (which ops, on which lanes,
// which flag slots and scratch offsets), the call's buffer addresses, and per-executor constants (flag and scratch
// addresses, lanes, reduction CTAs). Flags carry constants (wait for 1, reset to 0), never sequence numbers, so two
// calls with equal shapes enqueue identical GPU operations; the only per-call value, the executor's done marker,
// is written outside the cached work.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <optional>
#include <unordered_map>
#include <vector>

#include "exec/executor.h"

namespace conccl::exec {

// Everything that decides what one rank's program enqueues, as 64-bit words, with a running hash. Reused from call
// to call (clear() keeps the capacity), so building it allocates nothing once warm.
class CallShape {
 public:
  void clear() {
    words_.clear();
    hash_ = kSeed;
  }
  void add(uint64_t word) {
    words_.push_back(word);
    hash_ = mix(hash_ ^ word);  // mixed after every word: the order of the words matters
  }
  uint64_t hash() const { return hash_; }
  const std::vector<uint64_t>& words() const { return words_; }
  friend bool operator==(const CallShape& a, const CallShape& b) { return a.words_ == b.words_; }

 private:
  static constexpr uint64_t kSeed = 0x9e3779b97f4a7c15ull;
  // splitmix64's finaliser: every input bit reaches every output bit, so addresses that differ in a few low bits
  // still land in different buckets.
  static uint64_t mix(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
  }
  std::vector<uint64_t> words_;
  uint64_t hash_ = kSeed;
};

// Fills `out` with the shape of rank `rank`'s program in a call of schedule `scheduleId` (Schedule::id) bound to
// `binding`: the id, the rank, then every rank's buffer addresses and, where the clique knows them
// (CallBinding::bufferIds), their allocation ids; a buffer the program does not touch counts as absent whatever its
// address. Returns false when the call must not be cached: a schedule without an id (hand-made), or a buffer whose
// allocation the backend could not name (a freed and re-allocated buffer at the same address would then be
// indistinguishable; such calls simply run eagerly).
// Streams are not part of the shape: a graph is launched into whatever stream the call names.
inline bool makeCallShape(uint64_t scheduleId, int rank, const CallBinding& binding, CallShape& out) {
  out.clear();
  if (scheduleId == 0) return false;
  out.add(scheduleId);
  out.add(static_cast<uint64_t>(rank));
  const bool idsKnown = !binding.bufferIds.empty();
  for (size_t r = 0; r < binding.buffers.size(); ++r) {
    const std::vector<void*>& buffers = binding.buffers[r];
    out.add(buffers.size());
    for (size_t b = 0; b < buffers.size(); ++b) {
      uint64_t id = kBufferNotUsed;
      if (idsKnown) {
        id = r < binding.bufferIds.size() && b < binding.bufferIds[r].size() ? binding.bufferIds[r][b] : kBufferNotUsed;
        if (id == kAllocationUnknown) return false;
        if (id == kBufferNotUsed) {
          out.add(0);
          out.add(0);
          continue;
        }
      }
      out.add(static_cast<uint64_t>(reinterpret_cast<uintptr_t>(buffers[b])));
      out.add(id);
    }
  }
  return true;
}

// At most `capacity` shapes, each with the number of calls seen and, once built, a Value (e.g. an instantiated CUDA
// graph, destroyed when its entry is evicted or the cache cleared). Not thread-safe: the CUDA executor keeps one per
// rank, used under that rank's mutex.
template <typename Value>
class CallShapeCache {
 public:
  struct Entry {
    CallShape shape;
    uint32_t uses = 0;     // calls seen with this shape, saturating
    bool refused = false;  // building the value failed once: the shape runs eagerly from then on
    std::optional<Value> value;
  };

  explicit CallShapeCache(size_t capacity) : capacity_(capacity == 0 ? 1 : capacity) {}

  // Records one call of `shape` and returns its entry, now the most recently used. A new shape gets a new entry
  // (uses 1), evicting the least recently used entry when the cache is full. Allocates only for a new shape.
  Entry& use(const CallShape& shape) {
    if (Entry* found = find(shape)) {
      if (found->uses != UINT32_MAX) ++found->uses;
      return *found;
    }
    if (lru_.size() >= capacity_) evictOldest();
    lru_.emplace_front();
    Entry& e = lru_.front();
    e.shape = shape;
    e.uses = 1;
    byHash_.emplace(shape.hash(), lru_.begin());
    ++inserted_;
    return e;
  }

  // The entry of `shape` without recording a call (nullptr when absent); marks it the most recently used.
  Entry* find(const CallShape& shape) {
    auto range = byHash_.equal_range(shape.hash());
    for (auto it = range.first; it != range.second; ++it) {
      if (it->second->shape == shape) {
        lru_.splice(lru_.begin(), lru_, it->second);
        return &*it->second;
      }
    }
    return nullptr;
  }

  // Drops every entry (and its value).
  void clear() {
    byHash_.clear();
    lru_.clear();
  }

  // Calls f(Value&) for every built value (e.g. to leak graphs that must not be destroyed).
  template <typename F>
  void forEachValue(F&& f) {
    for (Entry& e : lru_) {
      if (e.value) f(*e.value);
    }
  }

  size_t size() const { return lru_.size(); }
  size_t capacity() const { return capacity_; }
  size_t evictions() const { return evictions_; }
  size_t inserted() const { return inserted_; }

 private:
  void evictOldest() {
    auto oldest = std::prev(lru_.end());
    auto range = byHash_.equal_range(oldest->shape.hash());
    for (auto it = range.first; it != range.second; ++it) {
      if (it->second == oldest) {
        byHash_.erase(it);
        break;
      }
    }
    lru_.pop_back();
    ++evictions_;
  }

  size_t capacity_;
  std::list<Entry> lru_;  // most recently used first (splice keeps the map's iterators valid)
  std::unordered_multimap<uint64_t, typename std::list<Entry>::iterator> byHash_;
  size_t evictions_ = 0;
  size_t inserted_ = 0;
};

}  // namespace conccl::exec
