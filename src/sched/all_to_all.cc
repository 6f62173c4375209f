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
  // Staged, the chunks do not depend on the sizes: a rank's program then follows from its own row and column of the
  // count matrix alone, so a rank that launches before its peers have called (core/process_clique.h, "Late peers")
  // builds the same program as one that read every rank's counts.
  emitMovement(call, transfers, options, s, {}, /*sizeIndependentChunks=*/true);
  return s;
}

}  // namespace conccl::sched::detail
