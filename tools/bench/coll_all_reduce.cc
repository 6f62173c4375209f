// All-reduce. size = count elements; busbw = algbw x 2(n-1)/n (a reduce-scatter plus an all-gather).
#include "coll.h"

namespace conccl::bench {
namespace {

CollCounts Counts(size_t count, int /*n*/) { return {.send = count, .recv = count, .param = count, .size = count}; }

double Factor(int n) { return 2.0 * (n - 1) / n; }

std::optional<Bytes> Reference(const CaseArgs& a, const std::vector<Bytes>& inputs, int /*rank*/,
                               std::vector<double>* scale) {
  std::vector<const unsigned char*> in;
  for (const Bytes& b : inputs) in.push_back(b.data());
  Bytes out(a.counts.recv * ElemSize(a));
  ReduceRanks(a.type, a.op, in, 0, a.counts.param, out.data(), scale);
  return out;
}

void Run(Backend& b, const CaseArgs& a, int rank, const void* send, void* recv) {
  b.AllReduce(rank, send, recv, a.counts.param, a.type, a.op);
}

}  // namespace

const CollDesc kAllReduceColl = {CollKind::kAllReduce, "all_reduce", true,      false, true, Counts, Factor,
                                 ZeroOffset,           ZeroOffset,   Reference, Run};

}  // namespace conccl::bench
