// ProcessClique (core/process_clique.h), part: the pair-owned route of late calls (Config::pairOwnedLateCalls). A rank
// whose peers have not called yet needs nothing of them: its program signals "ready", waits and ends with a "done",
// so it launches at once, with no staging copy and no SMs, and its length does not grow with the call's size.
// - Data movement (sched::CollectiveCall::pairOwner): the later rank of each pair moves the pair's data, both
//   directions, on its copy engines. Who owns which pair: core/pair_claims.h.
// - Reductions (sched::CollectiveCall::callOwner): the rank that calls last (the one that finds every peer published;
//   a compare-and-swap on the call's word decides between ranks that publish together) reduces every rank's input
//   and moves every rank's output; every other rank waits for its "done". The earlier ranks cannot know who that is,
//   and need not: their program is the same whichever peer owns the call.
#include "core/pair_claims.h"
#include "core/process_clique.h"
#include "core/process_segment.h"

#include <string>
#include <vector>

#include "base/host_laps.h"
#include "base/logging.h"

namespace conccl {

namespace {
// The most inputs one reduction of the CUDA executor takes (exec/cuda reduce kernel): the owner of a late reduction
// reduces every rank's input in one Reduce.
constexpr int kMaxOwnedReductionRanks = 8;
}  // namespace

ProcessClique::Route ProcessClique::lateRouteFor(const RankArgs& mine) const {
  if (!config_.pairOwnedLateCalls || mine.kind == sched::CollKind::kSendRecv || mine.pushInputs) return Route::kStaged;
  if (!sched::isReduction(mine.kind)) return nranks_ <= kPairClaimMaxRanks ? Route::kPairOwned : Route::kStaged;
  // The owner's reduction reads its peers' inputs in place: only where every process can (peer access, peerReduce;
  // agreed at init, so every rank proposes alike).
  return nranks_ <= kMaxOwnedReductionRanks && executor_->buildOptions().peerReads ? Route::kPairOwned
                                                                                    : Route::kStaged;
}

std::atomic<uint64_t>& ProcessClique::callClaim(uint64_t seq) const {
  return layout_->pairClaim(0, 0, seq);  // the "pair" (0, 0) is no pair: one word per call
}

void ProcessClique::claimAllPairsFirst(uint64_t seq, const std::string& what, bool reduction) {
  std::vector<int> owner;
  if (reduction) {
    owner.assign(static_cast<size_t>(nranks_), claimPairWord(callClaim(seq), seq, rank_));
  } else {
    owner = claimPairs(
        rank_, nranks_, seq, /*claimAll=*/true, [](int) { return true; },
        [&](int p) -> std::atomic<uint64_t>& { return layout_->pairClaim(rank_, p, seq); });
  }
  for (int p = 0; p < nranks_; ++p) {
    if (owner[static_cast<size_t>(p)] == rank_) continue;
    // Only a peer that also claimed everything first can have beaten this rank to one of its pairs (the others
    // claim a pair only once this rank has published): both passed memory the other cannot map.
    const std::string reason = "ranks " + std::to_string(rank_) + " and " + std::to_string(p) +
                               " both passed memory that CUDA IPC cannot share (VMM or pool memory) to " + what +
                               ", which a peer had launched before them: neither can move their pair's data; use "
                               "the same kind of memory on every rank";
    fail(concclInvalidUsage, reason);
    CONCCL_THROW(concclInvalidUsage, reason);
  }
}

std::vector<int> ProcessClique::claimOwners(const CallTicket& ticket, bool reduction, bool claimedAll) {
  const uint64_t seq = ticket.call->seq;
  const int n = nranks_;
  auto published = [&](int p) {
    return layout_->entry(p, seq).published.load(std::memory_order_acquire) == seq + 1;
  };
  if (claimedAll) {
    // This rank moves everything it shares with its peers: it needs every peer's buffers (a host wait, for peers
    // that are later still; documented in docs/multiprocess.md).
    for (int p = 0; p < n; ++p) {
      if (p != rank_) waitFor([&] { return published(p); }, p, ticket.what);
    }
    return std::vector<int>(static_cast<size_t>(n), rank_);
  }
  if (reduction) {
    // The call's owner is a rank that finds every peer published (the last to publish does); this rank's program
    // is the same whichever peer it is.
    std::atomic_thread_fence(std::memory_order_seq_cst);  // as in claimPairs: this rank's publish before its reads
    bool all = true;
    for (int p = 0; p < n && all; ++p) all = p == rank_ || published(p);
    const bool owns = all && claimPairWord(callClaim(seq), seq, rank_) == rank_;
    std::vector<int> owner(static_cast<size_t>(n));
    for (int p = 0; p < n; ++p) owner[static_cast<size_t>(p)] = owns ? rank_ : p;
    return owner;
  }
  return claimPairs(rank_, n, seq, /*claimAll=*/false, published,
                    [&](int p) -> std::atomic<uint64_t>& { return layout_->pairClaim(rank_, p, seq); });
}

ProcessClique::PeerParts ProcessClique::readOwnedPeers(PendingCall& pending, const std::vector<int>& owner) {
  // The call as this rank can know it: the real arguments of every peer whose pair it owns (they published), its own
  // arguments mirrored for the others (their programs are theirs; this rank's part with them is "ready" and "done").
  const int n = nranks_;
  const RankArgs& mine = *pending.args[static_cast<size_t>(rank_)];
  PeerParts peers;
  peers.exports.resize(static_cast<size_t>(2 * n));
  peers.windows.resize(static_cast<size_t>(2 * n));
  for (int p = 0; p < n; ++p) {
    if (p == rank_) continue;
    if (owner[static_cast<size_t>(p)] != rank_) {
      pending.args[static_cast<size_t>(p)] = mirrorOf(mine, p);
      continue;
    }
    const MailboxEntry& e = layout_->entry(p, pending.seq);
    if (e.errorCode != 0) {
      throw Error(static_cast<concclResult_t>(e.errorCode), "rank " + std::to_string(p) + ": " + e.error);
    }
    if (e.unshareable != 0) {
      throw Error(concclInvalidUsage, "rank " + std::to_string(p) +
                                          " passed memory that CUDA IPC cannot share, which rank " +
                                          std::to_string(rank_) +
                                          " would have to map; use the same kind of memory on every rank");
    }
    RankArgs real = argsOf(e, layout_->vectors(e), n);
    if (real.kind == sched::CollKind::kAllToAllv) {
      // Only its exchange with this rank and its own block (which this rank moves when it owns the peer's pair with
      // its next rank and own blocks go through peers): its other pairs are its own or another rank's business, and
      // with the mirrors of the peers that have not called they would not agree (assembleCall checks every pair).
      for (int q = 0; q < n; ++q) {
        if (q == rank_ || q == p || static_cast<size_t>(q) >= real.sendCounts.size()) continue;
        real.sendCounts[static_cast<size_t>(q)] = 0;
        real.recvCounts[static_cast<size_t>(q)] = 0;
      }
    }
    pending.args[static_cast<size_t>(p)] = std::move(real);
    for (int b = 0; b < 2; ++b) {
      peers.exports[static_cast<size_t>(2 * p + b)] = e.buffers[b];
      peers.windows[static_cast<size_t>(2 * p + b)] = WindowRef{e.windowId[b], e.windowOffset[b]};
    }
  }
  return peers;
}

void ProcessClique::buildOwnedCall(PendingCall& pending, const std::vector<int>& owner, bool reduction) {
  const int n = nranks_;
  assembleCall(pending, n);
  if (reduction) {
    // Not the owner: any peer as the owner gives this rank the same program.
    pending.call.callOwner = owner[static_cast<size_t>((rank_ + 1) % n)] == rank_ ? rank_ : (rank_ + 1) % n;
  } else {
    pending.call.pairOwner.assign(static_cast<size_t>(n) * static_cast<size_t>(n), 0);
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < n; ++j) {
        // This rank's pairs as claimed; the others' do not change its program: any valid owner will do.
        int o = std::min(i, j);
        if (i == rank_) o = owner[static_cast<size_t>(j)];
        if (j == rank_) o = owner[static_cast<size_t>(i)];
        pending.call.pairOwner[static_cast<size_t>(i * n + j)] = o;
      }
    }
  }
  pending.schedule = schedules_->get(pending.call, copyEnginesFor(pending.call));
}

void ProcessClique::launchPairOwned(CallTicket& ticket, const OwnPart& own, bool claimedAll) {
  PendingCall& pending = *ticket.call;
  const int n = nranks_;
  // Every rank of this call launches without waiting for the others (the route is agreed): any error now ends the
  // communicator, or a peer's program would wait for this rank's part forever.
  auto failWith = [&](const Error& e) {
    Error withContext = Error(e).addContext(ticket.what + " on rank " + std::to_string(rank_));
    fail(withContext.code(), withContext.message() + " (a peer had already launched its part)");
    throw withContext;
  };
  if (own.error) failWith(*own.error);
  const bool reduction = sched::isReduction(pending.args[static_cast<size_t>(rank_)]->kind);
  // owner[p]: who moves what this rank and peer p exchange.
  const std::vector<int> owner = claimOwners(ticket, reduction, claimedAll);
  HostLaps::lap("pair claims");
  try {
    const PeerParts peers = readOwnedPeers(pending, owner);
    buildOwnedCall(pending, owner, reduction);
    bindTouchedPeerBuffers(pending, peers);
  } catch (const Error& e) {
    failWith(e);
  }
  HostLaps::lap("pair-owned build");
  int owned = 0;
  for (int p = 0; p < n; ++p) owned += p != rank_ && owner[static_cast<size_t>(p)] == rank_ ? 1 : 0;
  CONCCL_TRACE(rank_, device_,
               "call seq " + std::to_string(pending.seq) + " is pair-owned: this rank moves the data of " +
                   std::to_string(owned) + " of its " + std::to_string(n - 1) + " pairs" +
                   (reduction ? (owned > 0 ? " (it reduces for every rank)" : " (a peer reduces)") : ""));
  // The peers' arguments are compared as they arrive (the watchdog, or this rank's next call), as for symmetric calls.
  launchEarly(pending, ticket, {});
}

}  // namespace conccl
