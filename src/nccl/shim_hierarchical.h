// Communicators of the drop-in whose ranks span hosts, the same number on each (docs/hierarchical.md,
// docs/nccl-shim.md "Communicators across hosts"). Besides the flat real-NCCL communicator (path kNccl, `real`),
// such a communicator holds a HierState (nccl/hier_exec.h, the engine the C API shares): a conccl communicator of
// the ranks of its host and a real-NCCL communicator of the ranks with its local index (the rail). Its collectives
// run as the phases of sched/hierarchical.h; what the phases cannot express goes to the flat communicator
// (hierarchicalCall returns false). This file holds the drop-in's side: NCCL types, its switches, its errors.
#ifndef CONCCL_NCCL_SHIM_HIERARCHICAL_H_
#define CONCCL_NCCL_SHIM_HIERARCHICAL_H_

#include <conccl/conccl.h>
#include <nccl.h>

#include <string>
#include <vector>

#include "nccl/hier_answer.h"
#include "nccl/hier_exec.h"

namespace conccl::nccl {

// ---- setup (shim_hier_init.cc) ----

// The rendezvous root's answer for ranks on several hosts (hier_answer.h) with the drop-in's switches
// (CONCCL_NCCL_HIERARCHICAL, CONCCL_NCCL_HIER_CHUNKS): false when it does not apply (*why) or failed (*error).
bool shimHierarchicalAnswer(const std::vector<uint64_t>& hosts, std::string* answer, std::string* why,
                            std::string* error);

// A rank's side of an 'H' answer: the flat real communicator (config: the caller's), then its rail's, then its
// node's conccl communicator, in that order on every rank (each init waits only for ranks that make the same one).
// On failure whatever was made is destroyed and *error says which step failed.
struct HierInit {
  ncclResult_t result = ncclSuccess;
  ncclComm_t flat = nullptr;
  HierState* hier = nullptr;
  std::string reason;
  std::string error;
};
HierInit initHierarchical(const std::string& answer, const std::vector<uint64_t>& hosts, int nranks, int rank,
                          ncclConfig_t* config, const std::string& call);

// A child of ncclCommSplit across hosts (shim_split.cc; `child` the real NCCL's, split from the flat parent): its rail
// by the real ncclCommSplit of the child (color = local index, key = node: collective over the child, no id to
// exchange), its node's conccl communicator from nodeIds[node] (a conccl id from the split's table). Every rank of
// the child must call it (the split's table decides identically everywhere). nullptr with *error on failure
// (what was made is destroyed; the child itself is left to the caller).
HierState* hierarchicalFromSplit(ncclComm_t child, const HierLayout& layout, int rank,
                                 const std::vector<concclUniqueId>& nodeIds, int chunks, const ncclConfig_t* config,
                                 std::string* error);

// ncclCommDestroy / ncclCommAbort of a communicator with a HierState (destroyHierState): the first failure, recorded.
ncclResult_t releaseShimHier(HierState* state, bool abort);

// ncclCommGetAsyncError of a communicator with a HierState: a rank of it whose process ended (the liveness link: it
// fails as ncclRemoteError), then the first error of the rail, the flat and the intra-node communicators (a peer node
// that fails shows on the rail first; PyTorch's watchdog polls only this handle). Either aborts the rail at once, so
// that the work queued behind it on this rank's stream drains.
ncclResult_t hierAsyncError(ncclComm_t comm, ncclResult_t* asyncError);

// ---- collectives (shim_hierarchical.cc) ----

// Runs the call hierarchically when comm has a HierState and the call decomposes (hierRun; inside ncclGroupStart/End
// it does not): returns true with *result set. Returns false (nothing enqueued) to send the call to the flat
// communicator.
bool hierarchicalCall(ncclComm_t comm, const HierArgs& args, ncclResult_t* result);

// The shim's policy for its HierStates (its switches, its log) and the real NCCL it forwards to, as a RailApi.
HierPolicy shimHierPolicy();
const RailApi* shimRailApi();

}  // namespace conccl::nccl

#endif  // CONCCL_NCCL_SHIM_HIERARCHICAL_H_
