// concclGroupDiscard (conccl.h): a group ended without launching, for the NCCL drop-in's ncclGroupSimulateEnd.
// concclGroupStart / concclGroupEnd are in comm_api.cc.
#include "api/api_guard.h"
#include "core/group.h"

extern "C" {

concclResult_t concclGroupDiscard(size_t* dropped) {
  return conccl::api::apiCall(nullptr, "concclGroupDiscard", [&] {
    const size_t n = conccl::groupDiscard();
    if (dropped != nullptr) *dropped = n;
  });
}

}  // extern "C"
