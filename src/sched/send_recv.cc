// A group of Send/Recv operations, direct push: each Send is one copy from the sender's buffer into the
// buffer of the Recv it matches (in posting order per (sender, receiver) pair). Self-sends are local copies. Pairs
// whose receiver cannot be written to by its peers (P2POp::viaScratch) go through the receiver's scratch instead.
#include "sched/builder_util.h"

namespace conccl::sched::detail {

Schedule buildSendRecv(const CollectiveCall& call, const BuildOptions& options) {
  Schedule s = newSchedule(call, options);
  const int n = call.nranks;
  const size_t es = typeSize(call.dtype);
  const auto match = matchP2P(call);
  // A pair (sender, receiver) goes through the receiver's scratch when any of its receives asks for it
  // (P2POp::viaScratch): both ranks of the pair see the same receives, so they decide alike.
  std::vector<std::vector<bool>> pairViaScratch(static_cast<size_t>(n), std::vector<bool>(static_cast<size_t>(n)));
  for (int r = 0; r < n; ++r) {
    for (const P2POp& op : call.p2p[static_cast<size_t>(r)]) {
      if (!op.isSend && op.viaScratch && op.peer != r) {
        pairViaScratch[static_cast<size_t>(op.peer)][static_cast<size_t>(r)] = true;
      }
    }
  }
  std::vector<std::vector<Transfer>> direct(static_cast<size_t>(n)), staged(static_cast<size_t>(n));
  bool anyStaged = false;
  for (int r = 0; r < n; ++r) {
    const auto& ops = call.p2p[static_cast<size_t>(r)];
    for (size_t i = 0; i < ops.size(); ++i) {
      if (!ops[i].isSend) continue;
      const P2PMatch m = match[static_cast<size_t>(r)][i];
      const P2POp& recv = call.p2p[static_cast<size_t>(m.rank)][static_cast<size_t>(m.index)];
      const bool viaScratch = pairViaScratch[static_cast<size_t>(r)][static_cast<size_t>(m.rank)];
      anyStaged = anyStaged || viaScratch;
      (viaScratch ? staged : direct)[static_cast<size_t>(r)].push_back(
          {Location{r, ops[i].buffer, 0}, Location{m.rank, recv.buffer, 0}, ops[i].count * es});
    }
  }
  // Self-sends stay local copies: routing them through a peer would involve a rank that may not be in the group.
  BuildOptions local = options;
  local.ownBlockViaPeer = false;
  emitDirect(direct, local, s);
  // After every direct transfer: a direct part waits only on direct parts, so the two cannot wait on each other.
  if (anyStaged) {
    const std::string directAlgorithm = s.algorithm;
    emitStaged(staged, local, s, {}, /*sizeIndependentChunks=*/true);
    s.algorithm = directAlgorithm + "+" + s.algorithm;
  }
  return s;
}

}  // namespace conccl::sched::detail
