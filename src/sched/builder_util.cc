// The two program shapes every builder is made of:
//   * emitDirect: direct push. Each rank copies its data straight into the destination buffers of its
//     peers, after the destination said "ready" and followed by "done".
//   * emitReducePipeline: each reducer receives every peer's contribution to its share into bounded
//     scratch, chunk by chunk, and reduces chunk i (one Reduce over all n inputs, so each output byte is
//     written once and Avg is exact) while chunk i+1 is in flight; credits return scratch slots to senders.
#include "sched/builder_util.h"

#include <algorithm>
#include <set>
#include <string>

#include "base/error.h"

namespace conccl::sched::detail {

namespace {

// Remembers which lanes carried copies to each peer, so that "done" is signalled after all of them: on the
// one lane if there was only one (the signal is then ordered after the copies by stream order), otherwise
// on M after every involved lane has joined M through a self-signal.
class DoneTracker {
 public:
  DoneTracker(int nranks, int lanes) : lanes_(lanes), used_(static_cast<size_t>(nranks)) {}

  void noteCopy(int peer, int lane) {
    auto& v = used_[static_cast<size_t>(peer)];
    if (std::find(v.begin(), v.end(), lane) == v.end()) v.push_back(lane);
  }
  // A peer this rank's program is paired with whether or not it copies anything into it (a structural edge): it gets
  // a "done" all the same, from M when no copy was made.
  void noteTouch(int peer) { touched_.insert(peer); }

  // Appends the done signals of rank `me` to every peer it copied into.
  void emit(int nranks, int depth, int me, std::vector<Op>& ops) const {
    std::vector<bool> join(static_cast<size_t>(lanes_), false);
    bool anyJoin = false;
    for (const auto& v : used_) {
      if (v.size() > 1) {
        for (int l : v) join[static_cast<size_t>(l)] = true;
        anyJoin = true;
      }
    }
    if (anyJoin) {
      for (int l = 0; l < lanes_; ++l) {
        if (join[static_cast<size_t>(l)]) ops.push_back(Signal{me, joinSlot(nranks, depth, l), l});
      }
      for (int l = 0; l < lanes_; ++l) {
        if (join[static_cast<size_t>(l)]) ops.push_back(Wait{joinSlot(nranks, depth, l)});
      }
    }
    for (int o = 1; o < nranks; ++o) {
      const int q = (me + o) % nranks;
      const auto& v = used_[static_cast<size_t>(q)];
      if (v.empty() && touched_.count(q) == 0) continue;
      ops.push_back(Signal{q, doneSlot(nranks, me), v.size() == 1 ? v[0] : kMainStream});
    }
  }

 private:
  int lanes_;
  std::vector<std::vector<int>> used_;
  std::set<int> touched_;
};

}  // namespace

int dataSlot(int nranks, int fromPeer, int k, int depth) { return firstFreeSlot(nranks) + fromPeer * depth + k; }
int creditSlot(int nranks, int fromPeer, int k, int depth) {
  return firstFreeSlot(nranks) + nranks * depth + fromPeer * depth + k;
}
int joinSlot(int nranks, int depth, int lane) { return firstFreeSlot(nranks) + 2 * nranks * depth + lane; }

PipelineChunking pipelineChunking(const BuildOptions& options, size_t peers, size_t longestBytes) {
  PipelineChunking c;
  c.depth = std::max(1, options.pipelineDepth);
  auto slotFor = [&](int d) { return options.scratchBudget / (peers * static_cast<size_t>(d)) / kAlign * kAlign; };
  while (c.depth > 1 && slotFor(c.depth) < options.minChunkBytes) --c.depth;
  c.slotBytes = slotFor(c.depth);
  const auto targets = static_cast<size_t>(std::max(options.targetChunks, 1));
  c.pieceBytes = std::max(options.minChunkBytes, roundUp(ceilDiv(longestBytes, targets), kAlign));
  return c;
}

Schedule newSchedule(const CollectiveCall& call, const BuildOptions& options) {
  Schedule s;
  s.nranks = call.nranks;
  s.lanes = options.lanes;
  s.programs.resize(static_cast<size_t>(call.nranks));
  s.algorithm = "direct";
  return s;
}

Schedule localCopySchedule(const CollectiveCall& call, const BuildOptions& options, size_t bytes) {
  Schedule s = newSchedule(call, options);
  std::vector<std::vector<Transfer>> transfers(1);
  const Location src = sendLoc(call, 0, 0), dst = recvLoc(call, 0, 0);
  if (!(src == dst)) transfers[0].push_back({src, dst, bytes});
  emitDirect(transfers, options, s);
  s.algorithm = "local";
  return s;
}

void finalizeSlots(Schedule& schedule) {
  int top = -1;
  for (const RankProgram& p : schedule.programs) {
    for (const Op& op : p.ops) {
      if (const auto* sig = std::get_if<Signal>(&op)) top = std::max(top, sig->slot);
      if (const auto* w = std::get_if<Wait>(&op)) top = std::max(top, w->slot);
    }
  }
  schedule.slots = top + 1;
}

namespace {

// The rank other than `issuer` that copy `t` touches (`issuer` itself for a local copy).
int otherRank(const Transfer& t, int issuer) { return t.src.rank != issuer ? t.src.rank : t.dst.rank; }

// The programs of ranks that each issue the copies of issued[r]: every copy touches its issuer (source or
// destination) and at most one other rank. Per pair of ranks, the one whose copies touch the other's memory waits for
// the other's "ready" before the first of them and signals "done" after the last; the other waits for that "done"
// before its program ends. Local copies need no handshake.
void emitIssued(const std::vector<std::vector<Transfer>>& issued, const BuildOptions& options, Schedule& schedule,
                const AfterDoneHook& afterDone, const std::vector<std::pair<int, int>>& forcedEdges = {}) {
  const int n = schedule.nranks;
  const int lanes = options.lanes;
  const size_t minPiece = std::max(options.minChunkBytes, kAlign);
  // touches[p][q]: p issues a copy that reads or writes q's memory (q != p).
  std::vector<std::vector<bool>> touches(static_cast<size_t>(n), std::vector<bool>(static_cast<size_t>(n), false));
  for (int r = 0; r < n; ++r) {
    for (const Transfer& t : issued[static_cast<size_t>(r)]) {
      CONCCL_ASSERT(t.src.rank == r || t.dst.rank == r);
      // An own block routed on (`then`) returns to the rank it came from; the pair's owner may issue it (pair-owned).
      CONCCL_ASSERT(!t.then || t.then->rank == t.src.rank);
      const int other = otherRank(t, r);
      if (t.bytes > 0 && other != r) touches[static_cast<size_t>(r)][static_cast<size_t>(other)] = true;
    }
  }
  // (issuer, other): the issuer waits for the other's "ready" and sends it "done" whatever it copies.
  for (const auto& [issuer, other] : forcedEdges) {
    CONCCL_ASSERT(issuer != other);
    touches[static_cast<size_t>(issuer)][static_cast<size_t>(other)] = true;
  }
  for (int me = 0; me < n; ++me) {
    std::vector<Op>& ops = schedule.programs[static_cast<size_t>(me)].ops;
    const auto& mine = issued[static_cast<size_t>(me)];
    DoneTracker done(n, lanes);
    for (const auto& [issuer, other] : forcedEdges) {
      if (issuer == me) done.noteTouch(other);
    }
    int numTargets = 0;
    for (int q = 0; q < n; ++q) numTargets += touches[static_cast<size_t>(me)][static_cast<size_t>(q)] ? 1 : 0;
    // With fewer targets than lanes a single copy is split so that every lane (copy engine) has work.
    const size_t split =
        static_cast<size_t>(std::max(1, (lanes + std::max(1, numTargets) - 1) / std::max(1, numTargets)));
    auto pushCopies = [&](const Transfer& t, int baseLane) {
      const bool fixed = t.lane >= 0 || t.mainStream;
      const size_t pieces = fixed ? 1 : std::max<size_t>(1, std::min(split, t.bytes / minPiece));
      const size_t pieceBytes = pieces == 1 ? t.bytes : roundUp(ceilDiv(t.bytes, pieces), kAlign);
      const int other = otherRank(t, me);
      int j = 0;
      for (size_t off = 0; off < t.bytes; off += pieceBytes, ++j) {
        const int lane = t.mainStream ? kMainStream : t.lane >= 0 ? t.lane : (baseLane + j) % lanes;
        const size_t len = std::min(pieceBytes, t.bytes - off);
        ops.push_back(Copy{plus(t.src, off), plus(t.dst, off), len, lane});
        // Routed own block: pull the piece on from where it landed, behind it on the same lane.
        if (t.then) ops.push_back(Copy{plus(t.dst, off), plus(*t.then, off), len, lane});
        if (other != me) done.noteCopy(other, lane);
      }
    };
    auto isLocal = [me](const Transfer& t) { return t.src.rank == me && t.dst.rank == me; };

    // 1. Tell every peer whose copies touch this rank's memory that the program has started.
    for (int o = 1; o < n; ++o) {
      const int p = (me + o) % n;
      if (touches[static_cast<size_t>(p)][static_cast<size_t>(me)])
        ops.push_back(Signal{p, readySlot(n, me), kMainStream});
    }
    // 2. Local copies need no handshake: issue them first so that they overlap the waits below.
    for (const Transfer& t : mine) {
      if (t.bytes > 0 && isLocal(t)) pushCopies(t, numTargets % lanes);
    }
    // 3. Per peer touched: wait until it is ready, then copy (lanes start as soon as M passed the wait).
    int targetIdx = 0;
    for (int o = 1; o < n; ++o) {
      const int q = (me + o) % n;
      if (!touches[static_cast<size_t>(me)][static_cast<size_t>(q)]) continue;
      ops.push_back(Wait{readySlot(n, q)});
      int base = targetIdx++;
      for (const Transfer& t : mine) {
        if (t.bytes > 0 && !isLocal(t) && otherRank(t, me) == q) pushCopies(t, base++ % lanes);
      }
    }
    // 4. Done to every peer touched, then wait for the done of every peer whose copies touch this rank.
    done.emit(n, options.pipelineDepth, me, ops);
    for (int o = 1; o < n; ++o) {
      const int p = (me + o) % n;
      if (!touches[static_cast<size_t>(p)][static_cast<size_t>(me)]) continue;
      ops.push_back(Wait{doneSlot(n, p)});
      if (afterDone) afterDone(me, p, ops);
    }
  }
}

}  // namespace

void emitDirect(const std::vector<std::vector<Transfer>>& given, const BuildOptions& options, Schedule& schedule,
                const AfterDoneHook& afterDone) {
  std::vector<std::vector<Transfer>> transfers = given;
  if (options.ownBlockViaPeer) routeOwnBlocksThroughPeers(transfers, options, schedule);
  for (size_t r = 0; r < transfers.size(); ++r) {
    for (const Transfer& t : transfers[r]) CONCCL_ASSERT(t.src.rank == static_cast<int>(r));
  }
  emitIssued(transfers, options, schedule, afterDone);
}

void emitPairOwned(const std::vector<std::vector<Transfer>>& transfers, const std::vector<int>& pairOwner,
                   const BuildOptions& options, Schedule& schedule, const AfterDoneHook& afterDone,
                   OwnBlockBounce bounce) {
  const int n = schedule.nranks;
  CONCCL_ASSERT(pairOwner.size() == static_cast<size_t>(n) * static_cast<size_t>(n));
  std::vector<std::vector<Transfer>> routed = transfers;
  for (int r = 0; r < n; ++r) {
    for (const Transfer& t : routed[static_cast<size_t>(r)]) CONCCL_ASSERT(t.src.rank == r && !t.then && t.lane < 0);
  }
  if (options.ownBlockViaPeer) {
    routeOwnBlocks(routed, options, schedule, [&](int r) { return std::vector<int>{(r + 1) % n}; });
  }
  std::vector<std::vector<Transfer>> issued(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    for (const Transfer& t : routed[static_cast<size_t>(r)]) {
      const int q = t.dst.rank;
      const int issuer = q == r ? r : pairOwner[static_cast<size_t>(r) * static_cast<size_t>(n) + static_cast<size_t>(q)];
      issued[static_cast<size_t>(issuer)].push_back(t);
    }
  }
  // A rank that owns none of its pairs issues only its local copies (its own block, where it was not echoed): one copy
  // each on M, so that its program stays a handful of CUDA calls whatever the size (it has no remote copies to
  // overlap them with).
  for (std::vector<Transfer>& mine : issued) {
    const bool localOnly = std::all_of(mine.begin(), mine.end(), [](const Transfer& t) {
      return t.bytes == 0 || t.src.rank == t.dst.rank;
    });
    if (localOnly) {
      for (Transfer& t : mine) t.mainStream = true;
    }
  }
  // A structural edge per pair (r, r + 1), from its owner, so that whether it bounces r's block (known to the owner
  // and to r) never changes what the pair's other rank waits for.
  std::vector<std::pair<int, int>> forced;
  if (options.ownBlockViaPeer && n >= 2 && bounce == OwnBlockBounce::kWithStructuralEdges) {
    for (int r = 0; r < n; ++r) {
      const int next = (r + 1) % n;
      const int o = pairOwner[static_cast<size_t>(r) * static_cast<size_t>(n) + static_cast<size_t>(next)];
      forced.emplace_back(o, o == r ? next : r);
    }
  }
  emitIssued(issued, options, schedule, afterDone, forced);
  schedule.algorithm = "pair-owned";
}

void emitReducePipeline(const CollectiveCall& call, const BuildOptions& options, const std::vector<ReduceShare>& shares,
                        Schedule& schedule) {
  const int n = call.nranks;
  CONCCL_ASSERT(n >= 2 && shares.size() == static_cast<size_t>(n));
  const size_t es = typeSize(call.dtype);
  const int lanes = options.lanes;
  const int layoutDepth = options.pipelineDepth;
  if (options.peerReads) {
    emitPullReduce(call, options, shares, schedule);
    return;
  }
  const auto peers = static_cast<size_t>(n - 1);
  size_t maxElems = 0;
  for (const ReduceShare& s : shares) maxElems = std::max(maxElems, s.elems);
  if (maxElems == 0) {
    schedule.algorithm = "direct-reduce(empty)";
    return;
  }
  // Chunks in elements (es divides the 256-byte alignment of the slots).
  const PipelineChunking chunking = pipelineChunking(options, peers, maxElems * es);
  const int depth = chunking.depth;
  CONCCL_REQUIRE(chunking.slotBytes >= kAlign, std::string(collKindName(call.kind)) + ": scratch budget of " +
                                                   std::to_string(options.scratchBudget) + " bytes is too small for " +
                                                   std::to_string(n) + " ranks");
  const size_t chunkElems = std::min(std::min(chunking.slotBytes, chunking.pieceBytes) / es, maxElems);
  std::vector<size_t> nchunks(static_cast<size_t>(n));
  size_t maxN = 0;
  for (int r = 0; r < n; ++r) {
    nchunks[static_cast<size_t>(r)] = ceilDiv(shares[static_cast<size_t>(r)].elems, chunkElems);
    maxN = std::max(maxN, nchunks[static_cast<size_t>(r)]);
  }
  const size_t depthEff = std::min(static_cast<size_t>(depth), maxN);
  const size_t stride = roundUp(chunkElems * es, kAlign);
  schedule.scratchBytes = peers * depthEff * stride;
  schedule.algorithm = "direct-pipelined(chunks=" + std::to_string(maxN) + ",depth=" + std::to_string(depthEff) +
                       ",chunkBytes=" + std::to_string(chunkElems * es) + ")";

  auto N = [&](int r) { return nchunks[static_cast<size_t>(r)]; };
  auto elemsOf = [&](int r, size_t c) {
    return std::min(chunkElems, shares[static_cast<size_t>(r)].elems - c * chunkElems);
  };
  // Scratch slot on reducer r for chunk c from sender p.
  auto slotLoc = [&](int r, int p, size_t c) {
    const auto o = static_cast<size_t>((p - r + n) % n);
    return Location{r, kScratch, ((o - 1) * depthEff + c % depthEff) * stride};
  };
  auto laneOf = [&](int o, size_t c) {
    return static_cast<int>((static_cast<size_t>(o - 1) + c) % static_cast<size_t>(lanes));
  };
  auto gathers = [&](int r) { return !shares[static_cast<size_t>(r)].gatherTo.empty() && N(r) > 0; };

  for (int me = 0; me < n; ++me) {
    std::vector<Op>& ops = schedule.programs[static_cast<size_t>(me)].ops;
    const ReduceShare& share = shares[static_cast<size_t>(me)];
    DoneTracker done(n, lanes);
    // Who writes into this rank's memory: every peer into its scratch when it reduces something, and the
    // reducers of other shares into its recvbuff (AllReduce).
    for (int o = 1; o < n; ++o) {
      const int p = (me + o) % n;
      if (N(me) > 0 || gathers(p)) ops.push_back(Signal{p, readySlot(n, me), kMainStream});
    }
    for (int o = 1; o < n; ++o) {
      const int r = (me + o) % n;
      if (N(r) > 0 || gathers(me)) ops.push_back(Wait{readySlot(n, r)});
    }
    auto sendChunk = [&](size_t c) {
      for (int o = 1; o < n; ++o) {
        const int r = (me + o) % n;
        if (c >= N(r)) continue;
        const int k = static_cast<int>(c % depthEff);
        // The slot is free again once r's Reduce of chunk c - depth has consumed it.
        if (c >= depthEff) ops.push_back(Wait{creditSlot(n, r, k, layoutDepth)});
        const int lane = laneOf(o, c);
        const Location src = plus(shares[static_cast<size_t>(r)].inputs[static_cast<size_t>(me)], c * chunkElems * es);
        ops.push_back(Copy{src, slotLoc(r, me, c), elemsOf(r, c) * es, lane});
        // Same lane as the copy: the flag is set only after the chunk landed.
        ops.push_back(Signal{r, dataSlot(n, me, k, layoutDepth), lane});
      }
    };
    // Prologue: fill the pipeline, then in step c send chunk c + depth - 1 before reducing chunk c, so the
    // Reduce of chunk c overlaps the copies of the following chunks.
    for (size_t c = 0; c + 1 < depthEff; ++c) sendChunk(c);
    for (size_t c = 0; c < maxN; ++c) {
      if (c + depthEff - 1 < maxN) sendChunk(c + depthEff - 1);
      if (c >= N(me)) continue;
      const int k = static_cast<int>(c % depthEff);
      for (int o = 1; o < n; ++o) ops.push_back(Wait{dataSlot(n, (me + o) % n, k, layoutDepth)});
      const size_t off = c * chunkElems * es;
      Reduce red;
      red.inputs.reserve(static_cast<size_t>(n));
      // Inputs in rank order, so that every reducer combines in the same order.
      for (int q = 0; q < n; ++q) {
        red.inputs.push_back(q == me ? plus(share.inputs[static_cast<size_t>(me)], off) : slotLoc(me, q, c));
      }
      red.output = plus(share.output, off);
      red.count = elemsOf(me, c);
      red.dtype = call.dtype;
      red.op = call.op;
      ops.push_back(std::move(red));
      if (c + depthEff < N(me)) {
        for (int o = 1; o < n; ++o) ops.push_back(Signal{(me + o) % n, creditSlot(n, me, k, layoutDepth), kMainStream});
      }
      if (gathers(me)) {
        for (int o = 1; o < n; ++o) {
          const int p = (me + o) % n;
          const int lane = laneOf(o, c);
          ops.push_back(Copy{plus(share.output, off), plus(share.gatherTo[static_cast<size_t>(p)], off),
                             elemsOf(me, c) * es, lane});
          done.noteCopy(p, lane);
        }
      }
    }
    // Scratch writers need no done: this rank's M waited for each of their data signals, which follow their
    // copies. The all-gather writes do.
    done.emit(n, layoutDepth, me, ops);
    for (int o = 1; o < n; ++o) {
      const int p = (me + o) % n;
      if (gathers(p)) ops.push_back(Wait{doneSlot(n, p)});
    }
  }
}

}  // namespace conccl::sched::detail
