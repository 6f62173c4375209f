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

// CollectiveCall::peerScratchOnly, small: one shot. Each rank pushes its whole input into every peer's scratch (slot
// q of rank r's scratch holds rank q's input, peers in rank order) and reduces the whole buffer itself, inputs in rank
// order (every rank computes the same bits). Per rank one ready handshake and one data flag per peer (consecutive
// signals and waits on M are one batched memory-operation node each), n - 1 copies and one Reduce, no copy out of
// scratch: a staged call up to a few MiB is bound by its launch and the round trips between the ranks, not by its
// bytes. With two ranks the same bytes cross as with a reduce-scatter and an all-gather; with n ranks each pushes
// (n - 1) whole buffers instead of 2 (n - 1) / n of one, so above two ranks only up to kOneShotMaxBytesAboveTwoRanks.
// All on M: the copies of this rank's input must be done before an in-place Reduce overwrites it.
constexpr size_t kOneShotMaxBytesAboveTwoRanks = size_t{1} << 20;
constexpr int kOneShotMaxRanks = 8;  // a Reduce of n inputs (the CUDA kernel takes 16), n - 1 slots of scratch

bool stagedOneShotFits(const CollectiveCall& call, const BuildOptions& options, size_t bytes) {
  const int n = call.nranks;
  if (n < 2 || n > kOneShotMaxRanks || bytes == 0) return false;
  if (n > 2 && bytes > kOneShotMaxBytesAboveTwoRanks) return false;
  return roundUp(bytes, kAlign) * static_cast<size_t>(n - 1) <= options.scratchBudget;
}

Schedule buildStagedOneShotAllReduce(const CollectiveCall& call, const BuildOptions& options) {
  const int n = call.nranks;
  const size_t bytes = call.count * typeSize(call.dtype);
  const size_t slot = roundUp(bytes, kAlign);
  const int depth = std::max(1, options.pipelineDepth);
  Schedule s = newSchedule(call, options);
  s.scratchBytes = slot * static_cast<size_t>(n - 1);
  s.algorithm = "staged one-shot";
  // Where rank q's input lands in rank r's scratch.
  auto slotOf = [&](int r, int q) { return static_cast<size_t>(q < r ? q : q - 1) * slot; };
  for (int me = 0; me < n; ++me) {
    std::vector<Op>& ops = s.programs[static_cast<size_t>(me)].ops;
    auto toEachPeer = [&](auto&& op) {
      for (int p = 0; p < n; ++p) {
        if (p != me) ops.push_back(op(p));
      }
    };
    // This rank's scratch is free (its previous program ended), and so is each peer's before anything goes there.
    toEachPeer([&](int p) -> Op { return Signal{p, readySlot(n, me), kMainStream}; });
    toEachPeer([&](int p) -> Op { return Wait{readySlot(n, p)}; });
    toEachPeer([&](int p) -> Op {
      return Copy{sendLoc(call, me, 0), Location{p, kScratch, slotOf(p, me)}, bytes, kMainStream};
    });
    toEachPeer([&](int p) -> Op { return Signal{p, stagedDataSlot(n, me, 0, depth, options.lanes), kMainStream}; });
    toEachPeer([&](int p) -> Op { return Wait{stagedDataSlot(n, p, 0, depth, options.lanes)}; });
    Reduce red;
    for (int q = 0; q < n; ++q) {
      red.inputs.push_back(q == me ? sendLoc(call, me, 0) : Location{me, kScratch, slotOf(me, q)});
    }
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
  if (call.peerScratchOnly && stagedOneShotFits(call, options, call.count * es)) {
    return buildStagedOneShotAllReduce(call, options);
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
  if (call.peerScratchOnly) return buildStagedAllReduce(call, options, std::move(shares));
  emitReducePipeline(call, options, shares, s);
  s.algorithm = "rs+ag " + s.algorithm;
  return s;
}

}  // namespace conccl::sched::detail
