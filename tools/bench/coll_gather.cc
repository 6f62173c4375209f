// Gather to a root. size = the root's output (n x sendcount); busbw = algbw x (n-1)/n (nccl-tests).
// Only the root's output is checked.
#include <cstring>

#include "coll.h"

namespace conccl::bench {
namespace {

CollCounts Counts(size_t count, int n) {
  const size_t per = count / n;
  return {.send = per, .recv = per * n, .param = per, .size = per * n};
}

size_t SendOffset(const CaseArgs& a, int rank) { return static_cast<size_t>(rank) * a.counts.param; }

std::optional<Bytes> Reference(const CaseArgs& a, const std::vector<Bytes>& inputs, int rank,
                               std::vector<double>* /*scale*/) {
  if (rank != a.root) return std::nullopt;
  const size_t chunk = a.counts.param * ElemSize(a);
  Bytes out(a.counts.recv * ElemSize(a));
  for (int p = 0; p < a.nranks; ++p) {
    if (chunk) std::memcpy(out.data() + p * chunk, inputs[p].data(), chunk);
  }
  return out;
}

void Run(Backend& b, const CaseArgs& a, int rank, const void* send, void* recv) {
  b.Gather(rank, send, recv, a.counts.param, a.type, a.root);
}

}  // namespace

const CollDesc kGatherColl = {CollKind::kGather, "gather",   false,      true,      true, Counts,
                              FactorNm1OverN,    SendOffset, ZeroOffset, Reference, Run};

}  // namespace conccl::bench
