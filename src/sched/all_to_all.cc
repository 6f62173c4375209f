// AllToAll and AllToAllv, direct push: rank r copies its block for peer q straight into q's recvbuff (or, with
// peerScratchOnly, through q's scratch: emitStaged).
// Never in place (validated), so the local block is a plain local copy.
#include "sched/builder_util.h"

namespace conccl::sched::detail {

Schedule buildAllToAll(const CollectiveCall& call, const BuildOptions& options) {
  Schedule s = newSchedule(call, options);
  const int n = call.nranks;
  const size_t bytes = call.count * typeSize(call.dtype);
  std::vector<std::vector<Transfer>> transfers(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    for (int q = 0; q < n; ++q) {
      transfers[static_cast<size_t>(r)].push_back(
          {Location{r, 0, static_cast<size_t>(q) * bytes}, Location{q, 1, static_cast<size_t>(r) * bytes}, bytes});
    }
  }
  emitMovement(call, transfers, options, s);
  return s;
}

Schedule buildAllToAllv(const CollectiveCall& call, const BuildOptions& options) {
  Schedule s = newSchedule(call, options);
  const int n = call.nranks;
  const size_t es = typeSize(call.dtype);
  std::vector<std::vector<Transfer>> transfers(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    const auto ur = static_cast<size_t>(r);
    for (int q = 0; q < n; ++q) {
      const auto uq = static_cast<size_t>(q);
      transfers[ur].push_back({Location{r, 0, call.sendDispls[ur][uq] * es},
                               Location{q, 1, call.recvDispls[uq][ur] * es}, call.sendCounts[ur][uq] * es});
    }
  }
  // Every rank's program is built from the whole count matrix, so a staged AllToAllv chunks alike on every rank.
  emitMovement(call, transfers, options, s);
  return s;
}

}  // namespace conccl::sched::detail
