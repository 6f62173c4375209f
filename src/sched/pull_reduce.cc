// The reduction shape for ranks that can read each other's memory (GPUs with peer access, ranks of one GPU, the
// host): each reducer reads every rank's contribution to its share where it lies, in one Reduce per piece,
// instead of having the peers push their contributions into its scratch first (emitReducePipeline).
//
// Why: with two GPUs the push pipeline moves every received byte through HBM three times (the copy engine
// writes it into scratch, the kernel reads it, the kernel reads the local input beside it) and its reduction
// kernel must wait for each piece's data flag; reading the peer's buffer over NVLink in the kernel removes the
// scratch round trip, the per-piece handshakes and most of the CUDA calls (2 GPUs, 2026-11-30, see
// docs/cuda-executor.md). The reduced share still travels to the other ranks (AllReduce) on copy engines, piece by
// piece behind the reduction.
//
// Program of rank `me`:
//   ready -> every peer (my buffers may be read / written); wait ready <- every peer;
//   per piece c of my share: Reduce(all ranks' inputs of piece c) -> output; AllReduce: push piece c to every
//     peer's recvbuff on the lanes; Reduce: every rank reduces a share too, a non-root into its scratch (a few
//     slots, reused once their push finished) and pushes it into the root's recvbuff, so the root's kernel
//     reads 1/n of the data instead of all of it;
//   join the lanes used; done -> every peer (I no longer touch its memory); wait done <- every peer.
#include <algorithm>
#include <string>

#include "base/error.h"
#include "sched/builder_util.h"

namespace conccl::sched::detail {

void emitPullReduce(const CollectiveCall& call, const BuildOptions& options, const std::vector<ReduceShare>& shares,
                    Schedule& schedule) {
  const int n = call.nranks;
  CONCCL_ASSERT(n >= 2 && shares.size() == static_cast<size_t>(n));
  const size_t es = typeSize(call.dtype);
  const int lanes = options.lanes;
  size_t maxElems = 0;
  for (const ReduceShare& s : shares) maxElems = std::max(maxElems, s.elems);
  // Pieces only matter where a reduced share is pushed on (AllReduce): piece c travels while c+1 is reduced. Each
  // piece costs a kernel launch and a copy per peer, so none is smaller than minChunkBytes.
  bool anyGather = false;
  for (const ReduceShare& s : shares) anyGather = anyGather || !s.gatherTo.empty();
  size_t pieceElems = std::max<size_t>(maxElems, 1);
  if (anyGather) {
    const size_t target = roundUp(ceilDiv(maxElems * es, static_cast<size_t>(std::max(options.targetChunks, 1))), kAlign);
    pieceElems = std::max<size_t>(1, std::min(maxElems, std::max(options.minChunkBytes, target) / es));
  }
  // Staged shares reduce piece c into scratch slot c % stageSlots; the slot is reused once the push of piece
  // c - stageSlots (on a lane) has finished, which that lane signals to the rank itself.
  bool anyStaged = false;
  for (const ReduceShare& s : shares) anyStaged = anyStaged || (s.stagedInScratch && s.elems > 0);
  const int stageSlots = std::max(options.pipelineDepth, 1);
  if (anyStaged) {
    const size_t slotBytes = options.scratchBudget / static_cast<size_t>(stageSlots) / kAlign * kAlign;
    CONCCL_REQUIRE(slotBytes >= es, "Reduce: scratch budget of " + std::to_string(options.scratchBudget) +
                                        " bytes is too small to stage pieces");
    pieceElems = std::max<size_t>(1, std::min(pieceElems, slotBytes / es));
  }
  const size_t stride = roundUp(pieceElems * es, kAlign);
  size_t maxPieces = 0;
  for (const ReduceShare& s : shares) maxPieces = std::max(maxPieces, ceilDiv(s.elems, pieceElems));
  schedule.scratchBytes = anyStaged ? static_cast<size_t>(std::min<size_t>(stageSlots, maxPieces)) * stride : 0;
  schedule.peerReads = true;
  schedule.algorithm = "pull-reduce(pieces=" + std::to_string(maxPieces) +
                       ",pieceBytes=" + std::to_string(std::min(pieceElems, maxElems) * es) + ")";

  // reads(me, q): me's reductions read q's memory; writes(me, q): me pushes into q's memory.
  auto reads = [&](int me, int q) { return q != me && shares[static_cast<size_t>(me)].elems > 0; };
  auto pushesTo = [&](const ReduceShare& share, int q) {
    return !share.gatherTo.empty() && share.gatherTo[static_cast<size_t>(q)].rank >= 0;
  };
  auto writes = [&](int me, int q) {
    const ReduceShare& share = shares[static_cast<size_t>(me)];
    return q != me && share.elems > 0 && pushesTo(share, q);
  };
  auto touches = [&](int me, int q) { return reads(me, q) || writes(me, q); };

  for (int me = 0; me < n; ++me) {
    std::vector<Op>& ops = schedule.programs[static_cast<size_t>(me)].ops;
    const ReduceShare& share = shares[static_cast<size_t>(me)];
    // Start: tell every peer that touches my memory that my program started; wait for every peer I touch.
    for (int o = 1; o < n; ++o) {
      const int p = (me + o) % n;
      if (touches(p, me)) ops.push_back(Signal{p, readySlot(n, me), kMainStream});
    }
    for (int o = 1; o < n; ++o) {
      const int q = (me + o) % n;
      if (touches(me, q)) ops.push_back(Wait{readySlot(n, q)});
    }
    std::vector<bool> laneUsed(static_cast<size_t>(lanes), false);
    const size_t pieces = ceilDiv(share.elems, pieceElems);
    for (size_t c = 0; c < pieces; ++c) {
      const size_t off = c * pieceElems;
      const size_t count = std::min(pieceElems, share.elems - off);
      const int slot = static_cast<int>(c % static_cast<size_t>(stageSlots));
      const Location out = share.stagedInScratch ? Location{me, kScratch, static_cast<size_t>(slot) * stride}
                                                 : plus(share.output, off * es);
      if (share.stagedInScratch && c >= static_cast<size_t>(stageSlots)) {
        ops.push_back(Wait{creditSlot(n, me, slot, options.pipelineDepth)});
      }
      Reduce red;
      red.inputs.reserve(static_cast<size_t>(n));
      for (int q = 0; q < n; ++q) red.inputs.push_back(plus(share.inputs[static_cast<size_t>(q)], off * es));
      red.output = out;
      red.count = count;
      red.dtype = call.dtype;
      red.op = call.op;
      ops.push_back(std::move(red));
      if (share.gatherTo.empty()) continue;
      for (int o = 1; o < n; ++o) {
        const int p = (me + o) % n;
        if (!pushesTo(share, p)) continue;
        const int lane = static_cast<int>((static_cast<size_t>(o - 1) + c) % static_cast<size_t>(lanes));
        ops.push_back(Copy{out, plus(share.gatherTo[static_cast<size_t>(p)], off * es), count * es, lane});
        laneUsed[static_cast<size_t>(lane)] = true;
        // Staged: one target only (the root); its lane frees the slot for piece c + stageSlots.
        if (share.stagedInScratch && c + static_cast<size_t>(stageSlots) < pieces) {
          ops.push_back(Signal{me, creditSlot(n, me, slot, options.pipelineDepth), lane});
        }
      }
    }
    // End: M joins the lanes that pushed (each signals this rank itself), so that "done" follows every read (the
    // reductions on M) and every write; then done to every peer I touched, and wait for every peer touching me.
    for (int l = 0; l < lanes; ++l) {
      if (laneUsed[static_cast<size_t>(l)]) ops.push_back(Signal{me, joinSlot(n, options.pipelineDepth, l), l});
    }
    for (int l = 0; l < lanes; ++l) {
      if (laneUsed[static_cast<size_t>(l)]) ops.push_back(Wait{joinSlot(n, options.pipelineDepth, l)});
    }
    for (int o = 1; o < n; ++o) {
      const int q = (me + o) % n;
      if (touches(me, q)) ops.push_back(Signal{q, doneSlot(n, me), kMainStream});
    }
    for (int o = 1; o < n; ++o) {
      const int p = (me + o) % n;
      if (touches(p, me)) ops.push_back(Wait{doneSlot(n, p)});
    }
  }
}

}  // namespace conccl::sched::detail
