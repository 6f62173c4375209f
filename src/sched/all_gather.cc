// AllGather, direct push: every rank copies its sendcount elements into slot `rank` of every peer's
// recvbuff (and of its own, unless in place). Copy engines only.
#include "sched/builder_util.h"

namespace conccl::sched::detail {

Schedule buildAllGather(const CollectiveCall& call, const BuildOptions& options) {
  Schedule s = newSchedule(call, options);
  const int n = call.nranks;
  const size_t bytes = call.count * typeSize(call.dtype);
  std::vector<std::vector<Transfer>> transfers(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    const Location src = sendLoc(call, r, 0);
    for (int q = 0; q < n; ++q) {
      const Location dst = recvLoc(call, q, static_cast<size_t>(r) * bytes);
      if (q == r && src == dst) continue;  // in place: already there
      transfers[static_cast<size_t>(r)].push_back({src, dst, bytes});
    }
  }
  emitDirect(transfers, options, s);
  return s;
}

}  // namespace conccl::sched::detail
