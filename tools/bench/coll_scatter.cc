// Scatter from a root. size = the root's input (n x recvcount); busbw = algbw x (n-1)/n (nccl-tests).
#include "coll.h"

namespace conccl::bench {
namespace {

CollCounts Counts(size_t count, int n) {
  const size_t per = count / n;
  return {.send = per * n, .recv = per, .param = per, .size = per * n};
}

size_t RecvOffset(const CaseArgs& a, int rank) { return static_cast<size_t>(rank) * a.counts.param; }

std::optional<Bytes> Reference(const CaseArgs& a, const std::vector<Bytes>& inputs, int rank,
                               std::vector<double>* /*scale*/) {
  const size_t chunk = a.counts.param * ElemSize(a);
  const auto begin = inputs[a.root].begin() + static_cast<std::ptrdiff_t>(rank * chunk);
  return Bytes(begin, begin + static_cast<std::ptrdiff_t>(chunk));
}

void Run(Backend& b, const CaseArgs& a, int rank, const void* send, void* recv) {
  b.Scatter(rank, send, recv, a.counts.param, a.type, a.root);
}

}  // namespace

const CollDesc kScatterColl = {CollKind::kScatter, "scatter",  false,      true,      true, Counts,
                               FactorNm1OverN,     ZeroOffset, RecvOffset, Reference, Run};

}  // namespace conccl::bench
