// When an owner may let go of an export it retired (several processes; exec/cuda/cuda_executor_buffers.cc).
//
// An owner retires an export when it stops using it (its memory was freed or its pieces replaced, the LRU bound, a
// deregistration) and tells its peers in the mailbox entry of its next call, S. A peer may still have to map it
// then: calls up to S may name it, and a late peer maps a buffer only when it reaches the call. So the owner keeps a
// retired VMM unit served (its handle server answers, its pieces stay retained) until no peer can map it any more.
// A peer makes its calls in order and reads call S + 1's entry only after it mapped everything call S needs, so once
// every peer has read past S + 1 (ProcessClique's `consumed` >= S + 2) none will. Before this rule the owner
// withdrew a unit at once, and a peer that reached an earlier call naming it afterwards failed ("the owner no longer
// exports it": PyTorch's graphs case with expandable segments, one H200, 2026-12-05).
//
// An owner whose communicator makes no further call tells its peers through its retirement log instead
// (core/retire_log.h): a peer reads a record only once it has finished every call that may name the id, so once every
// peer has read past the record none will map it.
//
// Pure bookkeeping of ids (no CUDA), unit-tested on the CPU (tests/unit/test_retire_after_peers.cc).
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace conccl::exec {

class RetireAfterPeers {
 public:
  // `id` was retired; the next call's entry carries it.
  void retired(uint64_t id) { uncarried_.push_back(id); }

  // The retirements so far go out in the entry of call `seq`.
  void carriedBy(uint64_t seq) {
    for (uint64_t id : uncarried_) carried_.emplace_back(id, seq);
    uncarried_.clear();
  }

  // Ids handed to a call's entry but sent with a later one (the entry was full): they wait for that call.
  void notCarried(const std::vector<uint64_t>& ids) {
    for (uint64_t id : ids) {
      auto it = std::find_if(carried_.begin(), carried_.end(), [&](const auto& c) { return c.first == id; });
      if (it == carried_.end()) continue;
      carried_.erase(it);
      uncarried_.push_back(id);
    }
  }

  // Of `ids` (retired ids of every kind), those retired here went out in the retirement log, as records firstIndex,
  // firstIndex + 1, ...
  void logged(const std::vector<uint64_t>& ids, uint64_t firstIndex) {
    for (size_t i = 0; i < ids.size(); ++i) {
      if (std::erase(uncarried_, ids[i]) > 0) logged_.emplace_back(ids[i], firstIndex + i);
    }
  }

  // The ids no peer can map any more, given the least `consumed` of the peers (calls seq + 1 each has read) and the
  // least count of log records they have read (`peersLogRead`); they are forgotten here.
  std::vector<uint64_t> releasable(uint64_t peersConsumed, uint64_t peersLogRead = 0) {
    std::vector<uint64_t> out;
    takeIf(carried_, out, [&](uint64_t seq) { return peersConsumed >= seq + 2; });
    takeIf(logged_, out, [&](uint64_t index) { return peersLogRead >= index + 1; });
    return out;
  }

  // Every id still held (at destroy, when no peer maps anything any more).
  std::vector<uint64_t> takeAll() {
    std::vector<uint64_t> out = std::move(uncarried_);
    uncarried_.clear();
    for (const auto& [id, seq] : carried_) out.push_back(id);
    carried_.clear();
    for (const auto& [id, index] : logged_) out.push_back(id);
    logged_.clear();
    return out;
  }

  bool empty() const { return uncarried_.empty() && carried_.empty() && logged_.empty(); }

 private:
  using Held = std::vector<std::pair<uint64_t, uint64_t>>;
  template <typename Done>
  static void takeIf(Held& held, std::vector<uint64_t>& out, Done done) {
    for (auto it = held.begin(); it != held.end();) {
      if (done(it->second)) {
        out.push_back(it->first);
        it = held.erase(it);
      } else {
        ++it;
      }
    }
  }
  std::vector<uint64_t> uncarried_;  // retired, not yet in an entry or the log
  Held carried_;                     // (id, seq of the call whose entry carries it)
  Held logged_;                      // (id, index of its retirement log record)
};

}  // namespace conccl::exec
