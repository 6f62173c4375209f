// ReduceScatter: rank r reduces share r (recvcount elements at r*recvcount of every sendbuff). Peers push
// their part of share r into r's scratch chunk by chunk; r reduces each chunk in one Reduce over all n
// inputs (its own read in place from its sendbuff) straight into its output. With peer reads (and no pushInputs)
// the reducer reads the peers' parts where they lie instead (pull_reduce.cc).
#include "sched/builder_util.h"

namespace conccl::sched::detail {

Schedule buildReduceScatter(const CollectiveCall& call, const BuildOptions& options) {
  const int n = call.nranks;
  const size_t bytes = call.count * typeSize(call.dtype);
  if (n == 1) return localCopySchedule(call, options, bytes);
  Schedule s = newSchedule(call, options);
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
