// emitStaged: movement where no rank touches a peer's call buffers (CollectiveCall::peerScratchOnly).
//
// Why: a rank of a process clique knows its peers' scratch (mapped once at init) but not their call buffers; learning
// those means waiting on the host until every peer has called (docs/multiprocess.md). When every byte that crosses
// ranks lands in the receiver's scratch and the receiver copies it into place, a rank's program follows from its own
// arguments and it launches at once. The price is one local copy of each received byte (SMs on our GPUs, FACTS.md),
// which is why process cliques stage only calls up to Config::stagedMaxBytes.
//
// Shape (the pipelined exchange of emitReducePipeline, with a copy where that one reduces):
//   * Sender r streams the bytes of all its transfers to receiver q in chunks through a region of q's scratch that
//     belongs to r (depth slots). Chunk c goes on a lane into slot c % depth, and the same lane then sets q's
//     "staged data" flag for (r, slot).
//   * Receiver q waits for that flag on M, copies the chunk out of its scratch into place on M, and hands the slot
//     back to r with a "staged credit" (only if r will use the slot again in this call, so that every flag is
//     consumed before the call ends and schedules replay in graphs).
//   * In step c every rank first sends chunk c + depth - 1 to each target (waiting for the credit of chunk c - 1),
//     then receives chunk c from each sender: each wait depends only on steps already taken by its peer.
//   * Ready: a receiver tells its senders at program start that its scratch is free (its previous program ended).
//     No "done" is needed: the receiver waits for every data flag, which follows the copy into its scratch.
//   * Local transfers (a rank's own block) are plain copies on lanes, issued first.
// Flags come after the reduce pipeline's and the join flags, so an AllReduce can run a reduce pipeline and then a
// staged exchange in one program.
#include <algorithm>
#include <string>

#include "base/error.h"
#include "sched/builder_util.h"

namespace conccl::sched::detail {

int stagedDataSlot(int nranks, int fromPeer, int k, int depth, int lanes) {
  return joinSlot(nranks, depth, 0) + lanes + fromPeer * depth + k;
}
int stagedCreditSlot(int nranks, int fromPeer, int k, int depth, int lanes) {
  return joinSlot(nranks, depth, 0) + lanes + nranks * depth + fromPeer * depth + k;
}

namespace {

// One chunk of a sender's stream to one receiver: a piece of one transfer.
struct Chunk {
  Location src;
  Location dst;
  size_t bytes = 0;
};

}  // namespace

void emitStaged(const std::vector<std::vector<Transfer>>& transfers, const BuildOptions& options, Schedule& schedule,
                const AfterDoneHook& afterDone, bool sizeIndependentChunks, const StagedPlacement* placement) {
  const int n = schedule.nranks;
  const auto un = static_cast<size_t>(n);
  const int lanes = options.lanes;
  const int layoutDepth = std::max(1, options.pipelineDepth);
  // pairBytes[r][q]: bytes r sends to q (q != r).
  std::vector<std::vector<size_t>> pairBytes(un, std::vector<size_t>(un, 0));
  size_t maxPair = 0;
  for (int r = 0; r < n; ++r) {
    for (const Transfer& t : transfers[static_cast<size_t>(r)]) {
      CONCCL_ASSERT(t.src.rank == r && !t.then);
      if (t.dst.rank == r || t.bytes == 0) continue;
      size_t& b = pairBytes[static_cast<size_t>(r)][static_cast<size_t>(t.dst.rank)];
      b += t.bytes;
      maxPair = std::max(maxPair, b);
    }
  }
  // Chunks in bytes, as emitReducePipeline's (pipelineChunking), 256-byte aligned since they cut transfers.
  const size_t peers = un > 1 ? un - 1 : 1;
  const PipelineChunking chunking = pipelineChunking(options, peers, maxPair);
  const int depth = chunking.depth;
  size_t chunkBytes = chunking.slotBytes;
  if (maxPair > 0) {
    CONCCL_REQUIRE(chunkBytes >= kAlign, "scratch budget of " + std::to_string(options.scratchBudget) +
                                             " bytes is too small for " + std::to_string(n) + " ranks");
    if (!sizeIndependentChunks) chunkBytes = std::min(chunkBytes, roundUp(chunking.pieceBytes, kAlign));
  }
  // chunks[r][q]: r's stream to q, transfer by transfer, in chunks of at most chunkBytes.
  std::vector<std::vector<std::vector<Chunk>>> chunks(un, std::vector<std::vector<Chunk>>(un));
  size_t maxN = 0;
  for (int r = 0; r < n; ++r) {
    for (const Transfer& t : transfers[static_cast<size_t>(r)]) {
      if (t.dst.rank == r || t.bytes == 0) continue;
      auto& list = chunks[static_cast<size_t>(r)][static_cast<size_t>(t.dst.rank)];
      for (size_t off = 0; off < t.bytes; off += chunkBytes) {
        list.push_back(Chunk{plus(t.src, off), plus(t.dst, off), std::min(chunkBytes, t.bytes - off)});
      }
      maxN = std::max(maxN, list.size());
    }
  }
  const size_t depthEff =
      sizeIndependentChunks ? static_cast<size_t>(depth) : std::max<size_t>(1, std::min(static_cast<size_t>(depth), maxN));
  // Past an earlier phase's slots where both fit in the scratch (StagedPlacement); else from 0, with this exchange's
  // own ready, as without a placement.
  const bool placed =
      placement != nullptr && placement->scratchBase + peers * depthEff * chunkBytes <= options.scratchBudget;
  const size_t base = placed ? placement->scratchBase : 0;
  CONCCL_ASSERT(base % kAlign == 0);
  auto readyGiven = [&](int r) {
    return placed && !placement->readyGiven.empty() && placement->readyGiven[static_cast<size_t>(r)];
  };
  if (maxN > 0) {
    schedule.scratchBytes = std::max(schedule.scratchBytes, base + peers * depthEff * chunkBytes);
    schedule.algorithm = "staged(chunks=" + std::to_string(maxN) + ",depth=" + std::to_string(depthEff) +
                         ",chunkBytes=" + std::to_string(chunkBytes) + ")";
  } else {
    schedule.algorithm = "staged(local)";
  }
  auto N = [&](int r, int q) { return chunks[static_cast<size_t>(r)][static_cast<size_t>(q)].size(); };
  // Slot of chunk c from sender p in receiver r's scratch.
  auto slotLoc = [&](int r, int p, size_t c) {
    const auto o = static_cast<size_t>((p - r + n) % n);
    return Location{r, kScratch, base + ((o - 1) * depthEff + c % depthEff) * chunkBytes};
  };
  auto laneOf = [&](int o, size_t c) {
    return static_cast<int>((static_cast<size_t>(o - 1) + c) % static_cast<size_t>(lanes));
  };
  auto data = [&](int from, size_t c) {
    return stagedDataSlot(n, from, static_cast<int>(c % depthEff), layoutDepth, lanes);
  };
  auto credit = [&](int from, size_t c) {
    return stagedCreditSlot(n, from, static_cast<int>(c % depthEff), layoutDepth, lanes);
  };

  for (int me = 0; me < n; ++me) {
    std::vector<Op>& ops = schedule.programs[static_cast<size_t>(me)].ops;
    // 1. Ready to every sender: this program started, so this rank's previous use of its scratch is over (unless an
    // earlier phase of this program said so already: StagedPlacement).
    for (int o = 1; o < n; ++o) {
      const int p = (me + o) % n;
      if (N(p, me) > 0 && !readyGiven(me)) ops.push_back(Signal{p, readySlot(n, me), kMainStream});
    }
    // 2. Local transfers first, on lanes, so that they overlap everything below.
    int local = 0;
    for (const Transfer& t : transfers[static_cast<size_t>(me)]) {
      if (t.dst.rank == me && t.bytes > 0) ops.push_back(Copy{t.src, t.dst, t.bytes, local++ % lanes});
    }
    // 3. Every target's scratch must be free before the first chunk goes there.
    for (int o = 1; o < n; ++o) {
      const int q = (me + o) % n;
      if (N(me, q) > 0 && !readyGiven(q)) ops.push_back(Wait{readySlot(n, q)});
    }
    auto sendChunk = [&](size_t c) {
      for (int o = 1; o < n; ++o) {
        const int q = (me + o) % n;
        if (c >= N(me, q)) continue;
        if (c >= depthEff) ops.push_back(Wait{credit(q, c)});
        const Chunk& k = chunks[static_cast<size_t>(me)][static_cast<size_t>(q)][c];
        const int lane = laneOf(o, c);
        ops.push_back(Copy{k.src, slotLoc(q, me, c), k.bytes, lane});
        ops.push_back(Signal{q, data(me, c), lane});  // same lane: set once the chunk landed
      }
    };
    auto receiveChunk = [&](size_t c) {
      for (int o = 1; o < n; ++o) {
        const int p = (me + o) % n;
        if (c >= N(p, me)) continue;
        const Chunk& k = chunks[static_cast<size_t>(p)][static_cast<size_t>(me)][c];
        ops.push_back(Wait{data(p, c)});
        ops.push_back(Copy{slotLoc(me, p, c), k.dst, k.bytes, kMainStream});
        if (c + depthEff < N(p, me)) ops.push_back(Signal{p, credit(me, c), kMainStream});
        // Everything p sends here has been copied into place on M.
        if (c + 1 == N(p, me) && afterDone) afterDone(me, p, ops);
      }
    };
    for (size_t c = 0; c + 1 < depthEff; ++c) sendChunk(c);
    for (size_t c = 0; c < maxN; ++c) {
      if (c + depthEff - 1 < maxN) sendChunk(c + depthEff - 1);
      receiveChunk(c);
    }
  }
}

void emitMovement(const CollectiveCall& call, const std::vector<std::vector<Transfer>>& transfers,
                  const BuildOptions& options, Schedule& schedule, const AfterDoneHook& afterDone,
                  bool sizeIndependentChunks) {
  if (call.peerScratchOnly) {
    emitStaged(transfers, options, schedule, afterDone, sizeIndependentChunks);
  } else if (!call.pairOwner.empty()) {
    // Every rank's own block has a size every rank knows, and the pair with the next rank moves data, except in
    // AllToAllv (counts per pair; a pair may move nothing): there the pairs (r, r + 1) get an edge of their own.
    emitPairOwned(transfers, call.pairOwner, options, schedule, afterDone,
                  call.kind == CollKind::kAllToAllv ? OwnBlockBounce::kWithStructuralEdges
                                                    : OwnBlockBounce::kWhereThePairMoves);
  } else {
    emitDirect(transfers, options, schedule, afterDone);
  }
}

}  // namespace conccl::sched::detail
