// AllReduce = reduce-scatter phase + all-gather phase, fused: rank r reduces its 1/n share (the first
// count % n ranks get one extra element) chunk by chunk, and pushes each reduced chunk into every peer's
// recvbuff as soon as it is ready, so the all-gather overlaps the remaining reduction. With a callOwner that rank
// reduces the whole buffer and copies it to every peer (owner_reduce.cc).
#include <algorithm>
#include <utility>
#include <vector>

#include "base/error.h"
#include "sched/builder_util.h"

namespace conccl::sched::detail {

namespace {

// CollectiveCall::peerScratchOnly with two ranks: one shot. Each rank pushes its whole input into the other's scratch
// and reduces the whole buffer itself, inputs in rank order (both compute the same bits). The same bytes cross between
// the ranks as with a reduce-scatter and an all-gather (half of the buffer each way, twice), in one exchange instead of
// two: per rank one ready handshake, one copy, one data flag and one Reduce, no copy out of scratch. All on M: the
// copy of this rank's input must be done before an in-place Reduce overwrites it, and a single copy has nothing to
// overlap with on a lane. With more ranks each would push (n - 1) whole buffers instead of 2 (n - 1) / n of one.
Schedule buildStagedOneShotAllReduce(const CollectiveCall& call, const BuildOptions& options) {
  CONCCL_ASSERT(call.nranks == 2);
  const size_t bytes = call.count * typeSize(call.dtype);
  const int depth = std::max(1, options.pipelineDepth);
  Schedule s = newSchedule(call, options);
  s.scratchBytes = roundUp(bytes, kAlign);
  s.algorithm = "staged one-shot";
  for (int me = 0; me < 2; ++me) {
    const int peer = 1 - me;
    std::vector<Op>& ops = s.programs[static_cast<size_t>(me)].ops;
    // This rank's scratch is free (its previous program ended), and so is the peer's before anything goes there.
    ops.push_back(Signal{peer, readySlot(2, me), kMainStream});
    ops.push_back(Wait{readySlot(2, peer)});
    ops.push_back(Copy{sendLoc(call, me, 0), Location{peer, kScratch, 0}, bytes, kMainStream});
    ops.push_back(Signal{peer, stagedDataSlot(2, me, 0, depth, options.lanes), kMainStream});
    ops.push_back(Wait{stagedDataSlot(2, peer, 0, depth, options.lanes)});
    Reduce red;
    for (int q = 0; q < 2; ++q) red.inputs.push_back(q == me ? sendLoc(call, me, 0) : Location{me, kScratch, 0});
    red.output = recvLoc(call, me, 0);
    red.count = call.count;
    red.dtype = call.dtype;
    red.op = call.op;
    ops.push_back(std::move(red));
  }
  return s;
}

// CollectiveCall::peerScratchOnly: the reduce-scatter phase as above but without pushing the reduced chunks into the
// peers' recvbuffs (their addresses are unknown); each rank then sends its reduced share to every peer through the
// peer's scratch (emitStaged). The all-gather phase starts after the whole reduction, which costs overlap: these
// calls are the mid-size ones, where the host rendezvous they avoid weighs more.
Schedule buildStagedAllReduce(const CollectiveCall& call, const BuildOptions& options,
                              std::vector<ReduceShare> shares) {
  CONCCL_ASSERT(!options.peerReads);  // the push pipeline, whose ready the all-gather relies on below
  const int n = call.nranks;
  const size_t es = typeSize(call.dtype);
  std::vector<std::vector<Transfer>> gather(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    ReduceShare& sh = shares[static_cast<size_t>(r)];
    for (int q = 0; q < n; ++q) {
      if (q == r) continue;
      gather[static_cast<size_t>(r)].push_back({sh.output, sh.gatherTo[static_cast<size_t>(q)], sh.elems * es});
    }
    sh.gatherTo.clear();
  }
  // The reduce-scatter pipeline's ready (every rank with a share to reduce tells every peer at program start that its
  // scratch is free) covers the all-gather too when the all-gather's slots lie past the pipeline's: one handshake per
  // pair fewer (a signal and a wait each: one batched memory-operation node of the program, and a round trip between
  // the GPUs). Where both do not fit in the scratch, the all-gather reuses the pipeline's slots after its own ready.
  std::vector<bool> readyGiven(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) readyGiven[static_cast<size_t>(r)] = shares[static_cast<size_t>(r)].elems > 0;
  Schedule reduced = newSchedule(call, options);
  emitReducePipeline(call, options, shares, reduced);
  Schedule gathered = newSchedule(call, options);
  const StagedPlacement after{roundUp(reduced.scratchBytes, kAlign), std::move(readyGiven)};
  emitStaged(gather, options, gathered, {}, false, &after);
  Schedule s = newSchedule(call, options);
  s.scratchBytes = std::max(reduced.scratchBytes, gathered.scratchBytes);
  s.algorithm = "rs " + reduced.algorithm + " + ag " + gathered.algorithm;
  for (int r = 0; r < n; ++r) {
    auto& ops = s.programs[static_cast<size_t>(r)].ops;
    for (const auto* part : {&reduced, &gathered}) {
      const auto& more = part->programs[static_cast<size_t>(r)].ops;
      ops.insert(ops.end(), more.begin(), more.end());
    }
  }
  return s;
}

}  // namespace

Schedule buildAllReduce(const CollectiveCall& call, const BuildOptions& options) {
  const int n = call.nranks;
  const size_t es = typeSize(call.dtype);
  if (n == 1) return localCopySchedule(call, options, call.count * es);
  Schedule s = newSchedule(call, options);
  if (call.callOwner >= 0) {
    // The owner reduces everything into its recvbuff and copies the result to every peer's.
    OwnedBlock all;
    all.elems = call.count;
    for (int q = 0; q < n; ++q) {
      all.inputs.push_back(sendLoc(call, q, 0));
      if (q != call.callOwner) all.copyTo.push_back(recvLoc(call, q, 0));
    }
    all.output = recvLoc(call, call.callOwner, 0);
    emitOwnerReduce(call, options, {all}, s);
    return s;
  }
  const size_t un = static_cast<size_t>(n);
  const size_t base = call.count / un, extra = call.count % un;
  std::vector<ReduceShare> shares(un);
  size_t start = 0;  // in elements
  for (size_t r = 0; r < un; ++r) {
    ReduceShare& sh = shares[r];
    sh.elems = base + (r < extra ? 1 : 0);
    for (int q = 0; q < n; ++q) {
      sh.inputs.push_back(sendLoc(call, q, start * es));
      sh.gatherTo.push_back(recvLoc(call, q, start * es));
    }
    sh.output = recvLoc(call, static_cast<int>(r), start * es);
    start += sh.elems;
  }
  if (call.peerScratchOnly) {
    const size_t bytes = call.count * es;
    if (n == 2 && bytes > 0 && roundUp(bytes, kAlign) <= options.scratchBudget) {
      return buildStagedOneShotAllReduce(call, options);
    }
    return buildStagedAllReduce(call, options, std::move(shares));
  }
  emitReducePipeline(call, options, shares, s);
  s.algorithm = "rs+ag " + s.algorithm;
  return s;
}

}  // namespace conccl::sched::detail
