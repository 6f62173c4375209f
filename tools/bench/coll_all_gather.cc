// All-gather. size = the per-rank *output* (n x sendcount); busbw = algbw x (n-1)/n: each rank receives
// (n-1)/n of its output over the bus.
#include <cstring>

#include "coll.h"

namespace conccl::bench {
namespace {

CollCounts Counts(size_t count, int n) {
  const size_t per = count / n;
  return {.send = per, .recv = per * n, .param = per, .size = per * n};
}

size_t SendOffset(const CaseArgs& a, int rank) { return static_cast<size_t>(rank) * a.counts.param; }

std::optional<Bytes> Reference(const CaseArgs& a, const std::vector<Bytes>& inputs, int /*rank*/,
                               std::vector<double>* /*scale*/) {
  const size_t chunk = a.counts.param * ElemSize(a);
  Bytes out(a.counts.recv * ElemSize(a));
  for (int p = 0; p < a.nranks; ++p) {
    if (chunk) std::memcpy(out.data() + p * chunk, inputs[p].data(), chunk);
  }
  return out;
}

void Run(Backend& b, const CaseArgs& a, int rank, const void* send, void* recv) {
  b.AllGather(rank, send, recv, a.counts.param, a.type);
}

}  // namespace

const CollDesc kAllGatherColl = {CollKind::kAllGather, "all_gather", false,      false,     true, Counts,
                                 FactorNm1OverN,       SendOffset,   ZeroOffset, Reference, Run};

}  // namespace conccl::bench
