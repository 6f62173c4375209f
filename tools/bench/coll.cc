#include "coll.h"

#include "types.h"

namespace conccl::bench {

const std::vector<const CollDesc*>& AllColls() {
  static const std::vector<const CollDesc*> kColls = {&kAllGatherColl, &kAllToAllColl,  &kReduceScatterColl,
                                                      &kAllReduceColl, &kBroadcastColl, &kReduceColl,
                                                      &kGatherColl,    &kScatterColl,   &kSendRecvColl};
  return kColls;
}

const CollDesc* FindColl(std::string_view name) {
  for (const CollDesc* c : AllColls()) {
    if (name == c->name) return c;
  }
  return nullptr;
}

size_t ZeroOffset(const CaseArgs& /*args*/, int /*rank*/) { return 0; }
double FactorOne(int /*nranks*/) { return 1.0; }
double FactorNm1OverN(int nranks) { return static_cast<double>(nranks - 1) / nranks; }
size_t ElemSize(const CaseArgs& args) { return DTypeOf(args.type).size; }

}  // namespace conccl::bench
