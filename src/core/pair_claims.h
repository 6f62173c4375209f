// Who moves the data of each pair of ranks in a call that takes the pair-owned route (ProcessClique, "late calls":
// sched::CollectiveCall::pairOwner): the later of the two to call. It knows both ranks' buffers (the earlier one
// published its exports), so it issues both directions on its copy engines; the earlier one only signals "ready" and
// waits for "done", whatever the size, and needs nothing of its peer to launch.
//
// The claim: each rank publishes its entry first, then (after a sequentially consistent fence) for each peer p: if p
// has published the call, it claims the pair with a compare-and-swap on the pair's word (whoever wins owns it); if p
// has not, it leaves the pair to p, which publishes later and will see this rank's entry and claim the pair. With
// the fence after each rank's publish, two ranks cannot both miss each other, so no pair is left unowned, and the
// compare-and-swap gives none two owners. A rank whose buffers no peer can map (CUDA IPC refuses VMM and pool
// memory) claims every one of its pairs before it publishes (`claimAll`): no peer can then claim one, and it moves
// everything it shares with its peers itself.
//
// A pair's word is reused call after call (the mailbox ring's slot): it holds ((seq + 1) << kOwnerBits) | owner once
// claimed for call seq, and an older call's value (or 0) before.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "base/error.h"

namespace conccl {

inline constexpr int kPairClaimOwnerBits = 16;
inline constexpr int kPairClaimMaxRanks = 1 << kPairClaimOwnerBits;

// Claims `word` for `rank` in call `seq` unless a rank claimed it first; returns the owner that holds.
inline int claimPairWord(std::atomic<uint64_t>& word, uint64_t seq, int rank) {
  const uint64_t tag = seq + 1;
  const uint64_t mine = (tag << kPairClaimOwnerBits) | static_cast<uint64_t>(rank);
  uint64_t seen = word.load(std::memory_order_acquire);
  for (;;) {
    if ((seen >> kPairClaimOwnerBits) == tag) return static_cast<int>(seen & (kPairClaimMaxRanks - 1));
    CONCCL_ASSERT((seen >> kPairClaimOwnerBits) < tag);  // an earlier call's claim, read by every rank by now
    if (word.compare_exchange_weak(seen, mine, std::memory_order_acq_rel, std::memory_order_acquire)) return rank;
  }
}

// This rank's claims for call `seq`, made after it published the call (or before, with `claimAll`). `published(p)`:
// whether peer p has published the call; `wordOf(p)`: the claim word of the pair (rank, p), the same object for
// (p, rank). Returns the owner of each of this rank's pairs, [p] for peer p ([rank] = rank).
template <typename Published, typename WordOf>
std::vector<int> claimPairs(int rank, int nranks, uint64_t seq, bool claimAll, Published published, WordOf wordOf) {
  CONCCL_ASSERT(nranks > 0 && nranks <= kPairClaimMaxRanks && rank >= 0 && rank < nranks);
  // Orders this rank's publish (a release store) before its reads of the peers' (the store-buffering pattern: with
  // the peers' fence alike, at least one of two ranks sees the other).
  std::atomic_thread_fence(std::memory_order_seq_cst);
  std::vector<int> owner(static_cast<size_t>(nranks));
  for (int p = 0; p < nranks; ++p) {
    if (p == rank) {
      owner[static_cast<size_t>(p)] = rank;
    } else if (claimAll || published(p)) {
      owner[static_cast<size_t>(p)] = claimPairWord(wordOf(p), seq, rank);
    } else {
      owner[static_cast<size_t>(p)] = p;  // p publishes later, sees this rank's entry and claims the pair
    }
  }
  return owner;
}

}  // namespace conccl
