// All-to-all. size = the per-rank buffer (n x count); busbw = algbw x (n-1)/n (the own chunk stays local).
// conccl's all-to-all is not in place, so there is no in-place variant.
#include <cstring>

#include "coll.h"

namespace conccl::bench {
namespace {

CollCounts Counts(size_t count, int n) {
  const size_t per = count / n;
  return {.send = per * n, .recv = per * n, .param = per, .size = per * n};
}

std::optional<Bytes> Reference(const CaseArgs& a, const std::vector<Bytes>& inputs, int rank,
                               std::vector<double>* /*scale*/) {
  const size_t chunk = a.counts.param * ElemSize(a);
  Bytes out(a.counts.recv * ElemSize(a));
  for (int p = 0; p < a.nranks; ++p) {
    if (chunk) std::memcpy(out.data() + p * chunk, inputs[p].data() + rank * chunk, chunk);
  }
  return out;
}

void Run(Backend& b, const CaseArgs& a, int rank, const void* send, void* recv) {
  b.AllToAll(rank, send, recv, a.counts.param, a.type);
}

}  // namespace

const CollDesc kAllToAllColl = {CollKind::kAllToAll, "all_to_all", false,      false,     false, Counts,
                                FactorNm1OverN,      ZeroOffset,   ZeroOffset, Reference, Run};

}  // namespace conccl::bench
