// Broadcast. size = count elements; busbw = algbw (factor 1).
#include "coll.h"

namespace conccl::bench {
namespace {

CollCounts Counts(size_t count, int /*n*/) { return {.send = count, .recv = count, .param = count, .size = count}; }

std::optional<Bytes> Reference(const CaseArgs& a, const std::vector<Bytes>& inputs, int /*rank*/,
                               std::vector<double>* /*scale*/) {
  return Bytes(inputs[a.root].begin(), inputs[a.root].begin() + a.counts.recv * ElemSize(a));
}

void Run(Backend& b, const CaseArgs& a, int rank, const void* send, void* recv) {
  b.Broadcast(rank, send, recv, a.counts.param, a.type, a.root);
}

}  // namespace

const CollDesc kBroadcastColl = {CollKind::kBroadcast, "broadcast", false,     true, true, Counts, FactorOne,
                                 ZeroOffset,           ZeroOffset,  Reference, Run};

}  // namespace conccl::bench
