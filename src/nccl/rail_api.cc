#include "nccl/rail_api.h"

#include "nccl/nccl_abi.h"

namespace conccl::nccl {

RailApi loadRailApi(const std::function<void*(const char*)>& symbol) {
  RailApi api;
  // A function pointer from a data pointer (dlsym's contract): reinterpret_cast through the exact entry type.
  auto take = [&](auto& slot, const char* name) {
    void* p = symbol(name);
    slot = reinterpret_cast<std::remove_reference_t<decltype(slot)>>(p);
    if (p == nullptr) api.missing += (api.missing.empty() ? "" : ", ") + std::string(name);
  };
  take(api.getUniqueId, "ncclGetUniqueId");
  take(api.commInitRank, "ncclCommInitRank");
  take(api.commDestroy, "ncclCommDestroy");
  take(api.commAbort, "ncclCommAbort");
  take(api.commGetAsyncError, "ncclCommGetAsyncError");
  take(api.getLastError, "ncclGetLastError");
  take(api.allReduce, "ncclAllReduce");
  take(api.reduceScatter, "ncclReduceScatter");
  take(api.allGather, "ncclAllGather");
  take(api.broadcast, "ncclBroadcast");
  take(api.reduce, "ncclReduce");
  take(api.gather, "ncclGather");
  take(api.scatter, "ncclScatter");
  take(api.allToAll, "ncclAlltoAll");
  take(api.send, "ncclSend");
  take(api.recv, "ncclRecv");
  take(api.groupStart, "ncclGroupStart");
  take(api.groupEnd, "ncclGroupEnd");
  return api;
}

concclResult_t concclFromNcclResult(int ncclResult) {
  switch (ncclResult) {
    case kSuccess:
      return concclSuccess;
    case kUnhandledCudaError:
      return concclUnhandledCudaError;
    case kInternalError:
      return concclInternalError;
    case kInvalidArgument:
      return concclInvalidArgument;
    case kInvalidUsage:
      return concclInvalidUsage;
    case kSystemError:
    case kRemoteError:  // a peer or the network failed
    default:
      return concclSystemError;
  }
}

}  // namespace conccl::nccl
