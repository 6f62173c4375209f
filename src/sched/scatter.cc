// Scatter, direct push: the root copies slot q of its sendbuff into rank q's recvbuff.
#include "sched/builder_util.h"

namespace conccl::sched::detail {

Schedule buildScatter(const CollectiveCall& call, const BuildOptions& options) {
  Schedule s = newSchedule(call, options);
  const int n = call.nranks;
  const int root = call.root;
  const size_t bytes = call.count * typeSize(call.dtype);
  std::vector<std::vector<Transfer>> transfers(static_cast<size_t>(n));
  for (int q = 0; q < n; ++q) {
    const Location src = sendLoc(call, root, static_cast<size_t>(q) * bytes);
    const Location dst = recvLoc(call, q, 0);
    if (src == dst) continue;  // root in place
    transfers[static_cast<size_t>(root)].push_back({src, dst, bytes});
  }
  emitMovement(call, transfers, options, s);
  return s;
}

}  // namespace conccl::sched::detail
