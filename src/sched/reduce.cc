// Reduce: the root is the only reducer. Every peer pushes its sendbuff into the root's scratch chunk by
// chunk and the root reduces each chunk over all n inputs into its recvbuff.
#include "sched/builder_util.h"

namespace conccl::sched::detail {

Schedule buildReduce(const CollectiveCall& call, const BuildOptions& options) {
  Schedule s = newSchedule(call, options);
  const int n = call.nranks;
  const size_t bytes = call.count * typeSize(call.dtype);
  if (n == 1) {
    std::vector<std::vector<Transfer>> transfers(1);
    const Location src = sendLoc(call, 0, 0), dst = recvLoc(call, 0, 0);
    if (!(src == dst)) transfers[0].push_back({src, dst, bytes});
    emitDirect(transfers, options, s);
    s.algorithm = "local";
    return s;
  }
  std::vector<ReduceShare> shares(static_cast<size_t>(n));
  ReduceShare& sh = shares[static_cast<size_t>(call.root)];
  sh.elems = call.count;
  for (int q = 0; q < n; ++q) sh.inputs.push_back(sendLoc(call, q, 0));
  sh.output = recvLoc(call, call.root, 0);
  emitReducePipeline(call, options, shares, s);
  return s;
}

}  // namespace conccl::sched::detail
