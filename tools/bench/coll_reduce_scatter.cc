// Reduce-scatter. size = the per-rank *input* (n x recvcount); busbw = algbw x (n-1)/n.
#include "coll.h"

namespace conccl::bench {
namespace {

CollCounts Counts(size_t count, int n) {
  const size_t per = count / n;
  return {.send = per * n, .recv = per, .param = per, .size = per * n};
}

size_t RecvOffset(const CaseArgs& a, int rank) { return static_cast<size_t>(rank) * a.counts.param; }

std::optional<Bytes> Reference(const CaseArgs& a, const std::vector<Bytes>& inputs, int rank,
                               std::vector<double>* scale) {
  std::vector<const unsigned char*> in;
  for (const Bytes& b : inputs) in.push_back(b.data());
  Bytes out(a.counts.recv * ElemSize(a));
  ReduceRanks(a.type, a.op, in, static_cast<size_t>(rank) * a.counts.param, a.counts.param, out.data(), scale);
  return out;
}

void Run(Backend& b, const CaseArgs& a, int rank, const void* send, void* recv) {
  b.ReduceScatter(rank, send, recv, a.counts.param, a.type, a.op);
}

}  // namespace

const CollDesc kReduceScatterColl = {CollKind::kReduceScatter, "reduce_scatter", true,       false,     true, Counts,
                                     FactorNm1OverN,           ZeroOffset,       RecvOffset, Reference, Run};

}  // namespace conccl::bench
