// ReduceScatter: rank r reduces share r (recvcount elements at r*recvcount of every sendbuff). Peers push
// their part of share r into r's scratch chunk by chunk; r reduces each chunk in one Reduce over all n
// inputs (its own read in place from its sendbuff) straight into its output. With peer reads (and no pushInputs)
// the reducer reads the peers' parts where they lie instead (pull_reduce.cc). With a callOwner one rank reduces every
// share (owner_reduce.cc).
#include <utility>

#include "sched/builder_util.h"

namespace conccl::sched::detail {

Schedule buildReduceScatter(const CollectiveCall& call, const BuildOptions& options) {
  const int n = call.nranks;
  const size_t bytes = call.count * typeSize(call.dtype);
  if (n == 1) return localCopySchedule(call, options, bytes);
  Schedule s = newSchedule(call, options);
  if (call.callOwner >= 0) {
    // The owner reduces every block: the peers' first (o+1, o+2, ...), each through its scratch into the peer's
    // recvbuff, so that their copies overlap the reductions after them; its own last, straight into its recvbuff.
    const int owner = call.callOwner;
    std::vector<OwnedBlock> blocks;
    for (int o = 1; o <= n; ++o) {
      const int b = (owner + o) % n;
      OwnedBlock block;
      block.elems = call.count;
      for (int q = 0; q < n; ++q) block.inputs.push_back(sendLoc(call, q, static_cast<size_t>(b) * bytes));
      if (b == owner) {
        block.output = recvLoc(call, owner, 0);
      } else {
        block.copyTo.push_back(recvLoc(call, b, 0));
      }
      blocks.push_back(std::move(block));
    }
    emitOwnerReduce(call, options, blocks, s);
    return s;
  }
  std::vector<ReduceShare> shares(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    ReduceShare& sh = shares[static_cast<size_t>(r)];
    sh.elems = call.count;
    for (int q = 0; q < n; ++q) sh.inputs.push_back(sendLoc(call, q, static_cast<size_t>(r) * bytes));
    sh.output = recvLoc(call, r, 0);
  }
  // Inputs still being produced (concclReduceScatterChunked): only their owner can wait for them, so they are pushed.
  // (peerScratchOnly calls come here with peerReads off already: buildSchedule.)
  BuildOptions pushed = options;
  if (call.pushInputs) pushed.peerReads = false;
  emitReducePipeline(call, pushed, shares, s);
  return s;
}

}  // namespace conccl::sched::detail
