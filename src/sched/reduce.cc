// Reduce. With peer reads (sched::emitPullReduce): every rank reduces 1/n of the data, reading the peers' inputs in
// place, and the non-roots push their reduced share into the root's recvbuff. Otherwise the root is the only
// reducer: every peer pushes its sendbuff into the root's scratch chunk by chunk and the root reduces each chunk
// over all n inputs into its recvbuff. With a callOwner that rank is the only reducer, reading the inputs in place
// (owner_reduce.cc).
#include "sched/builder_util.h"

namespace conccl::sched::detail {

Schedule buildReduce(const CollectiveCall& call, const BuildOptions& options) {
  const int n = call.nranks;
  const size_t bytes = call.count * typeSize(call.dtype);
  if (n == 1) return localCopySchedule(call, options, bytes);
  Schedule s = newSchedule(call, options);
  if (call.callOwner >= 0) {
    // The owner reduces everything: into its recvbuff when it is the root, else through its scratch into the root's.
    OwnedBlock all;
    all.elems = call.count;
    for (int q = 0; q < n; ++q) all.inputs.push_back(sendLoc(call, q, 0));
    if (call.root == call.callOwner) {
      all.output = recvLoc(call, call.root, 0);
    } else {
      all.copyTo.push_back(recvLoc(call, call.root, 0));
    }
    emitOwnerReduce(call, options, {all}, s);
    return s;
  }
  std::vector<ReduceShare> shares(static_cast<size_t>(n));
  if (options.peerReads) {
    // Every rank reduces 1/n of the data reading the peers in place; the non-roots push their reduced share into
    // the root's recvbuff (staged through scratch, they have no output buffer of their own).
    const size_t es = typeSize(call.dtype);
    const size_t un = static_cast<size_t>(n);
    const size_t base = call.count / un, extra = call.count % un;
    size_t start = 0;
    for (size_t r = 0; r < un; ++r) {
      ReduceShare& share = shares[r];
      share.elems = base + (r < extra ? 1 : 0);
      for (int q = 0; q < n; ++q) share.inputs.push_back(sendLoc(call, q, start * es));
      if (static_cast<int>(r) == call.root) {
        share.output = recvLoc(call, call.root, start * es);
      } else {
        share.stagedInScratch = true;
        share.gatherTo.assign(un, Location{-1, 0, 0});
        share.gatherTo[static_cast<size_t>(call.root)] = recvLoc(call, call.root, start * es);
      }
      start += share.elems;
    }
    emitReducePipeline(call, options, shares, s);
    return s;
  }
  ReduceShare& sh = shares[static_cast<size_t>(call.root)];
  sh.elems = call.count;
  for (int q = 0; q < n; ++q) sh.inputs.push_back(sendLoc(call, q, 0));
  sh.output = recvLoc(call, call.root, 0);
  emitReducePipeline(call, options, shares, s);
  return s;
}

}  // namespace conccl::sched::detail
