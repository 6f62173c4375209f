// AllGather, direct push: every rank copies its sendcount elements into slot `rank` of every peer's
// recvbuff (and of its own, unless in place). Copy engines only. Each block is marked Ready where it is known to have
// landed (concclAllGatherChunked records its events there): a peer's block after the Wait for that peer's "done", the
// rank's own block at the start when in place (nothing moves it); an own block copied out of place lands on a lane
// and stays unmarked (recorded at the program's end).
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
  for (int r = 0; r < n; ++r) {
    const Location own = recvLoc(call, r, static_cast<size_t>(r) * bytes);
    if (bytes > 0 && sendLoc(call, r, 0) == own) s.programs[static_cast<size_t>(r)].ops.push_back(Ready{own, bytes, r});
  }
  // Peer p copies exactly its block into me, so once its "done" passed, block p is complete.
  auto markPeerBlock = [&](int me, int p, std::vector<Op>& ops) {
    ops.push_back(Ready{recvLoc(call, me, static_cast<size_t>(p) * bytes), bytes, p});
  };
  emitMovement(call, transfers, options, s, markPeerBlock);
  return s;
}

}  // namespace conccl::sched::detail
