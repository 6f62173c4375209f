// The real NCCL as the hierarchical path reaches it, without nccl.h: its entry points typed with plain ints (NCCL's
// enums are ints in its C ABI; nccl_abi.h holds the values) and its handles as void*, looked up by name in a loaded
// library. The C API loads the library itself (cross_node.cc); the drop-in fills the table from the library it
// forwards to (shim_hierarchical.cc).
#ifndef CONCCL_NCCL_RAIL_API_H_
#define CONCCL_NCCL_RAIL_API_H_

#include <conccl/conccl.h>

#include <cstddef>
#include <functional>
#include <string>

namespace conccl::nccl {

struct RailId {
  char internal[128];  // ncclUniqueId
};
using RailComm = void*;  // ncclComm_t

// The entry points the hierarchical path uses. ncclResult_t, ncclDataType_t and ncclRedOp_t are ints.
struct RailApi {
  int (*getUniqueId)(RailId*) = nullptr;
  int (*commInitRank)(RailComm*, int, RailId, int) = nullptr;
  int (*commDestroy)(RailComm) = nullptr;
  int (*commAbort)(RailComm) = nullptr;
  int (*commGetAsyncError)(RailComm, int*) = nullptr;
  const char* (*getLastError)(RailComm) = nullptr;
  int (*allReduce)(const void*, void*, size_t, int, int, RailComm, cudaStream_t) = nullptr;
  int (*reduceScatter)(const void*, void*, size_t, int, int, RailComm, cudaStream_t) = nullptr;
  int (*allGather)(const void*, void*, size_t, int, RailComm, cudaStream_t) = nullptr;
  int (*broadcast)(const void*, void*, size_t, int, int, RailComm, cudaStream_t) = nullptr;
  int (*reduce)(const void*, void*, size_t, int, int, int, RailComm, cudaStream_t) = nullptr;
  int (*gather)(const void*, void*, size_t, int, int, RailComm, cudaStream_t) = nullptr;
  int (*scatter)(const void*, void*, size_t, int, int, RailComm, cudaStream_t) = nullptr;
  int (*allToAll)(const void*, void*, size_t, int, RailComm, cudaStream_t) = nullptr;
  int (*send)(const void*, size_t, int, int, RailComm, cudaStream_t) = nullptr;
  int (*recv)(void*, size_t, int, int, RailComm, cudaStream_t) = nullptr;
  int (*groupStart)() = nullptr;
  int (*groupEnd)() = nullptr;
  std::string missing;  // the names the library lacks, comma-separated ("" = all found)
};
// Looks every entry point up through `symbol` (dlsym of the loaded library).
RailApi loadRailApi(const std::function<void*(const char*)>& symbol);

// ncclResult_t (int) -> concclResult_t, for the C API (ncclRemoteError: a peer failed -> concclSystemError).
concclResult_t concclFromNcclResult(int ncclResult);

}  // namespace conccl::nccl

#endif  // CONCCL_NCCL_RAIL_API_H_
