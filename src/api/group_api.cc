// concclGroupDiscard (conccl.h): a group ended without launching, for the NCCL drop-in's ncclGroupSimulateEnd.
// concclGroupStart / concclGroupEnd are in comm_api.cc.
#include "api/api_guard.h"
#include "api/cross_node.h"
#include "core/group.h"

extern "C" {

concclResult_t concclGroupDiscard(size_t* dropped) {
  return conccl::api::apiCall(nullptr, "concclGroupDiscard", [&] {
    const size_t n = conccl::groupDiscard();
    // Calls on a communicator across hosts were handed to the real NCCL when made: its group ends and runs them.
    conccl::api::crossNodeGroupEnd();
    if (dropped != nullptr) *dropped = n;
  });
}

}  // extern "C"
