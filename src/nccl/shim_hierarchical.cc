// The drop-in's side of the hierarchical collectives (shim_hierarchical.h): NCCL arguments in, the shared engine
// (nccl/hier_exec.h) runs the phases, NCCL results out. The engine asks the drop-in's routing (CONCCL_NCCL_COLLS and
// friends) whether conccl runs each node phase.
#include "nccl/shim_hierarchical.h"

#include <string>

#include "nccl/routing.h"
#include "nccl/shim_comm.h"

namespace conccl::nccl {
namespace {

using sched::GroupKind;

Coll collOf(GroupKind k) {
  switch (k) {
    case GroupKind::kAllReduce:
      return Coll::kAllReduce;
    case GroupKind::kReduceScatter:
      return Coll::kReduceScatter;
    case GroupKind::kAllGather:
      return Coll::kAllGather;
    case GroupKind::kBroadcast:
      return Coll::kBroadcast;
    case GroupKind::kReduce:
      return Coll::kReduce;
    case GroupKind::kGather:
      return Coll::kGather;
    case GroupKind::kScatter:
      return Coll::kScatter;
    case GroupKind::kAllToAll:
      return Coll::kAllToAll;
    case GroupKind::kSendRecv:
    case GroupKind::kCopy:
      return Coll::kSendRecv;
  }
  return Coll::kSendRecv;
}

}  // namespace

HierPolicy shimHierPolicy() {
  HierPolicy p;
  p.scratchMaxBytes = shim().env.scratchMaxBytes;
  p.intraRefusal = [](GroupKind kind, int type, int op) {
    Decision d = routeCall(shim().env, Path::kConccl, collOf(kind), type, op);
    return d.path == Path::kConccl ? std::string() : d.reason;
  };
  p.info = [](const std::string& m) { logInfo(m); };
  p.warn = [](const std::string& m) { logWarn(m); };
  return p;
}

const RailApi* shimRailApi() {
  static const RailApi* api = new RailApi(loadRailApi([](const char* name) { return shim().real->symbol(name); }));
  return api;
}

bool hierarchicalCall(ncclComm_t comm, const HierArgs& a, ncclResult_t* result) {
  if (comm == nullptr || !isShimComm(comm) || comm->hier == nullptr || comm->real == nullptr) return false;
  HierArgs args = a;
  args.inGroup = groupDepth() > 0;
  const HierOutcome o = hierRun(comm->hier, args);
  if (!o.ran) return false;
  *result = o.error.failed() ? fail(comm, static_cast<ncclResult_t>(o.error.ncclCode), o.error.message) : ncclSuccess;
  return true;
}

}  // namespace conccl::nccl
