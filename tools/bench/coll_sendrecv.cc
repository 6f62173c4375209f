// Send/recv ring: every rank sends count elements to rank+1 and receives from rank-1, all in one group
// (nccl-tests' sendrecv_perf). size = count elements; busbw = algbw (factor 1). No in-place variant.
#include "coll.h"

namespace conccl::bench {
namespace {

CollCounts Counts(size_t count, int /*n*/) { return {.send = count, .recv = count, .param = count, .size = count}; }

std::optional<Bytes> Reference(const CaseArgs& a, const std::vector<Bytes>& inputs, int rank,
                               std::vector<double>* /*scale*/) {
  return inputs[(rank + a.nranks - 1) % a.nranks];
}

void Run(Backend& b, const CaseArgs& a, int rank, const void* send, void* recv) {
  b.Send(rank, send, a.counts.param, a.type, (rank + 1) % a.nranks);
  b.Recv(rank, recv, a.counts.param, a.type, (rank + a.nranks - 1) % a.nranks);
}

}  // namespace

const CollDesc kSendRecvColl = {CollKind::kSendRecv, "sendrecv", false,      false,     false, Counts,
                                FactorOne,           ZeroOffset, ZeroOffset, Reference, Run};

}  // namespace conccl::bench
