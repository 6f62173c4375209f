// Broadcast, direct push: the root copies its buffer into every peer's recvbuff (and its own, unless in
// place). Copy engines only; with fewer peers than lanes each copy is split across lanes.
#include "sched/builder_util.h"

namespace conccl::sched::detail {

Schedule buildBroadcast(const CollectiveCall& call, const BuildOptions& options) {
  Schedule s = newSchedule(call, options);
  const int n = call.nranks;
  const int root = call.root;
  const size_t bytes = call.count * typeSize(call.dtype);
  std::vector<std::vector<Transfer>> transfers(static_cast<size_t>(n));
  const Location src = sendLoc(call, root, 0);
  for (int q = 0; q < n; ++q) {
    const Location dst = recvLoc(call, q, 0);
    if (q == root && src == dst) continue;
    transfers[static_cast<size_t>(root)].push_back({src, dst, bytes});
  }
  emitMovement(call, transfers, options, s);
  return s;
}

}  // namespace conccl::sched::detail
