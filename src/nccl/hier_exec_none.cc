// hier_exec.h in a build without CUDA: a communicator across hosts cannot be made (its phases are CUDA streams), so
// makeHierState fails with the reason and no HierState ever exists for the other functions to see.
#include "nccl/hier_exec.h"

namespace conccl::nccl {

HierOutcome hierRun(HierState*, const HierArgs&) { return HierOutcome{}; }

HierState* makeHierState(const HierLayout&, int, int, HierPolicy, const RailApi*, const std::function<int(RailComm*)>&,
                         const concclUniqueId&, const concclConfig_t*, std::string* error) {
  *error = "a communicator across hosts needs conccl built with CUDA";
  return nullptr;
}

void watchLiveness(HierState*, std::shared_ptr<LivenessLink>, bool, std::vector<int>) {}
int linkRankOf(const HierState*, int r) { return r; }
HierError railAsyncError(HierState*, int* asyncError) {
  *asyncError = 0;
  return HierError{};
}
HierError intraAsyncError(HierState*, int* asyncError) {
  *asyncError = 0;
  return HierError{};
}
void abortFailedRail(HierState*, int) {}
HierError destroyHierState(HierState* h, bool) {
  delete h;
  return HierError{};
}

}  // namespace conccl::nccl
