// emitOwnerReduce: a whole reduction done by one rank, the call's owner (CollectiveCall::callOwner).
//
// Why: a rank of a process clique that calls before its peers cannot learn their buffers without waiting on the host.
// If the rank that calls last (which knows everyone's) reduces for all of them, reading every input in place and
// copying every output into place, the earlier ranks launch at once a program of signals and waits that needs nothing
// of their peers and does not grow with the size (core/process_clique_pair_owned.cc). The owner pays with all the
// reduction's reads on its SMs and all the outputs on its copy engines.
//
// Programs (flags: the usual ready and done slots, plus the owner's own credit flags for its scratch):
//   every rank  ready -> every peer; wait ready <- every peer
//   owner       per block: Reduce(every rank's input) into its recvbuff, then copy it to each peer's recvbuff; or,
//               for a block that is another rank's output, per piece: Reduce into a scratch slot, copy it to that
//               rank's recvbuff on a lane, the lane hands the slot back (a self-signal) for the piece `depth` later
//   every rank  done -> every peer; wait done <- every peer
// A non-owner does not know which peer owns the call, so it signals ready to every peer, and it must consume the ready
// of every peer. Its done to every peer (although it touches no one's memory) is what makes that consumption safe: a
// flag carries one signal, so rank r's next ready to p must be ordered after p consumed this one, and p's done (sent
// after its ready waits) is what r waits for before its program ends. Without it two non-owners are not ordered at
// all, and r's next call could set p's flag before p consumed it (the checker finds that back to back, n >= 3).
// The owner's done to p follows its last read of p's input (every Reduce on M) and every copy into p: all copies into
// p run on p's lane, and the done goes last on that lane, behind every earlier op of M.
#include <algorithm>
#include <string>

#include "base/error.h"
#include "sched/builder_util.h"

namespace conccl::sched::detail {

namespace {

// Ready to every peer, then wait for every peer's: from here on every rank's memory may be touched.
void readyBarrier(int n, int me, std::vector<Op>& ops) {
  for (int o = 1; o < n; ++o) ops.push_back(Signal{(me + o) % n, readySlot(n, me), kMainStream});
  for (int o = 1; o < n; ++o) ops.push_back(Wait{readySlot(n, (me + o) % n)});
}

void waitDoneOfEveryPeer(int n, int me, std::vector<Op>& ops) {
  for (int o = 1; o < n; ++o) ops.push_back(Wait{doneSlot(n, (me + o) % n)});
}

Reduce reduceOf(const CollectiveCall& call, const OwnedBlock& block, size_t firstElem, size_t count, Location output) {
  const size_t es = typeSize(call.dtype);
  Reduce red;
  red.inputs.reserve(block.inputs.size());
  for (const Location& in : block.inputs) red.inputs.push_back(plus(in, firstElem * es));
  red.output = output;
  red.count = count;
  red.dtype = call.dtype;
  red.op = call.op;
  return red;
}

}  // namespace

void emitOwnerReduce(const CollectiveCall& call, const BuildOptions& options, const std::vector<OwnedBlock>& blocks,
                     Schedule& schedule) {
  const int n = call.nranks;
  const int owner = call.callOwner;
  CONCCL_ASSERT(n >= 2 && owner >= 0 && owner < n);
  const size_t es = typeSize(call.dtype);
  schedule.peerReads = true;
  schedule.algorithm = "owner-reduces";

  // Every rank but the owner: the handshakes only, the same whichever peer owns the call.
  for (int me = 0; me < n; ++me) {
    if (me == owner) continue;
    std::vector<Op>& ops = schedule.programs[static_cast<size_t>(me)].ops;
    readyBarrier(n, me, ops);
    for (int o = 1; o < n; ++o) ops.push_back(Signal{(me + o) % n, doneSlot(n, me), kMainStream});
    waitDoneOfEveryPeer(n, me, ops);
  }

  // Staged blocks go through `depth` scratch slots, in pieces of about 1/targetChunks of all the staged bytes (so
  // that copying piece i out overlaps reducing piece i+1 even with one staged block: Reduce's non-owned root), never
  // more than a slot holds.
  size_t stagedBytes = 0, longestStaged = 0;
  for (const OwnedBlock& b : blocks) {
    if (b.output || b.elems == 0) continue;
    CONCCL_ASSERT(b.copyTo.size() == 1);
    stagedBytes += b.elems * es;
    longestStaged = std::max(longestStaged, b.elems);
  }
  size_t pieceElems = 1, pieces = 0;
  int depth = 1;
  if (stagedBytes > 0) {
    const PipelineChunking chunking = pipelineChunking(options, 1, stagedBytes);
    CONCCL_REQUIRE(chunking.slotBytes >= kAlign, std::string(collKindName(call.kind)) + ": scratch budget of " +
                                                     std::to_string(options.scratchBudget) +
                                                     " bytes is too small for the owner's staged pieces");
    depth = chunking.depth;
    pieceElems = std::min(std::min(chunking.slotBytes, chunking.pieceBytes) / es, longestStaged);
    for (const OwnedBlock& b : blocks) pieces += b.output ? 0 : ceilDiv(b.elems, pieceElems);
  }
  const size_t stride = roundUp(pieceElems * es, kAlign);
  const size_t slotsUsed = std::min(static_cast<size_t>(depth), pieces);
  schedule.scratchBytes = slotsUsed * stride;

  // Every copy into peer p on one lane, so that the done to p can follow them there.
  auto laneOf = [&](int p) { return ((p - owner + n) % n - 1) % options.lanes; };
  std::vector<bool> copiedInto(static_cast<size_t>(n), false);
  std::vector<Op>& ops = schedule.programs[static_cast<size_t>(owner)].ops;
  readyBarrier(n, owner, ops);
  size_t piece = 0;  // staged pieces emitted so far, over all blocks
  for (const OwnedBlock& block : blocks) {
    if (block.elems == 0) continue;
    if (block.output) {
      ops.push_back(reduceOf(call, block, 0, block.elems, *block.output));
      for (const Location& to : block.copyTo) {
        ops.push_back(Copy{*block.output, to, block.elems * es, laneOf(to.rank)});
        copiedInto[static_cast<size_t>(to.rank)] = true;
      }
      continue;
    }
    const Location to = block.copyTo.front();
    const int lane = laneOf(to.rank);
    copiedInto[static_cast<size_t>(to.rank)] = true;
    for (size_t first = 0; first < block.elems; first += pieceElems, ++piece) {
      const size_t count = std::min(pieceElems, block.elems - first);
      const size_t k = piece % slotsUsed;
      const int credit = creditSlot(n, owner, static_cast<int>(k), options.pipelineDepth);
      const Location slot{owner, kScratch, k * stride};
      // The slot's previous piece has left it (its copy's lane said so).
      if (piece >= slotsUsed) ops.push_back(Wait{credit});
      ops.push_back(reduceOf(call, block, first, count, slot));
      ops.push_back(Copy{slot, plus(to, first * es), count * es, lane});
      if (piece + slotsUsed < pieces) ops.push_back(Signal{owner, credit, lane});
    }
  }
  // Done to every peer: on its lane behind the copies into it (and, as a lane op, behind every Reduce on M), or on M.
  for (int o = 1; o < n; ++o) {
    const int p = (owner + o) % n;
    ops.push_back(Signal{p, doneSlot(n, owner), copiedInto[static_cast<size_t>(p)] ? laneOf(p) : kMainStream});
  }
  waitDoneOfEveryPeer(n, owner, ops);
}

}  // namespace conccl::sched::detail
