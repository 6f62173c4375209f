// Reduce to a root. size = count elements; busbw = algbw (factor 1). Only the root's output is checked.
#include "coll.h"

namespace conccl::bench {
namespace {

CollCounts Counts(size_t count, int /*n*/) { return {.send = count, .recv = count, .param = count, .size = count}; }

std::optional<Bytes> Reference(const CaseArgs& a, const std::vector<Bytes>& inputs, int rank,
                               std::vector<double>* scale) {
  if (rank != a.root) return std::nullopt;
  std::vector<const unsigned char*> in;
  for (const Bytes& b : inputs) in.push_back(b.data());
  Bytes out(a.counts.recv * ElemSize(a));
  ReduceRanks(a.type, a.op, in, 0, a.counts.param, out.data(), scale);
  return out;
}

void Run(Backend& b, const CaseArgs& a, int rank, const void* send, void* recv) {
  b.Reduce(rank, send, recv, a.counts.param, a.type, a.op, a.root);
}

}  // namespace

const CollDesc kReduceColl = {CollKind::kReduce, "reduce",   true,       true,      true, Counts,
                              FactorOne,         ZeroOffset, ZeroOffset, Reference, Run};

}  // namespace conccl::bench
