// Gather, direct push: every rank copies its sendbuff into slot `rank` of the root's recvbuff.
#include "sched/builder_util.h"

namespace conccl::sched::detail {

Schedule buildGather(const CollectiveCall& call, const BuildOptions& options) {
  Schedule s = newSchedule(call, options);
  const int n = call.nranks;
  const size_t bytes = call.count * typeSize(call.dtype);
  std::vector<std::vector<Transfer>> transfers(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    const Location src = sendLoc(call, r, 0);
    const Location dst = recvLoc(call, call.root, static_cast<size_t>(r) * bytes);
    if (src == dst) continue;  // root in place
    transfers[static_cast<size_t>(r)].push_back({src, dst, bytes});
  }
  emitMovement(call, transfers, options, s);
  return s;
}

}  // namespace conccl::sched::detail
