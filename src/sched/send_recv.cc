// A group of Send/Recv operations, direct push: each Send is one copy from the sender's buffer into the
// buffer of the Recv it matches (in posting order per (sender, receiver) pair). Self-sends are local copies.
#include "sched/builder_util.h"

namespace conccl::sched::detail {

Schedule buildSendRecv(const CollectiveCall& call, const BuildOptions& options) {
  Schedule s = newSchedule(call, options);
  const int n = call.nranks;
  const size_t es = typeSize(call.dtype);
  const auto match = matchP2P(call);
  std::vector<std::vector<Transfer>> transfers(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    const auto& ops = call.p2p[static_cast<size_t>(r)];
    for (size_t i = 0; i < ops.size(); ++i) {
      if (!ops[i].isSend) continue;
      const P2PMatch m = match[static_cast<size_t>(r)][i];
      const P2POp& recv = call.p2p[static_cast<size_t>(m.rank)][static_cast<size_t>(m.index)];
      transfers[static_cast<size_t>(r)].push_back(
          {Location{r, ops[i].buffer, 0}, Location{m.rank, recv.buffer, 0}, ops[i].count * es});
    }
  }
  // Self-sends stay local copies: routing them through a peer would involve a rank that may not be in the group.
  BuildOptions local = options;
  local.ownBlockViaPeer = false;
  emitDirect(transfers, local, s);
  return s;
}

}  // namespace conccl::sched::detail
