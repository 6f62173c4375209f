// The few CUDA driver API functions the executor needs, resolved at run time through
// cudaGetDriverEntryPointByVersion instead of linking libcuda.so: the library (and its tests) must load and
// run on CI machines that have no GPU driver at all, where the CUDA backend simply reports no device.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

namespace conccl::exec {

struct DriverApi {
  // v2 semantics (CUDA 11.7+): the stream memory operations the runtime itself uses.
  PFN_cuStreamWaitValue32_v11070 streamWaitValue32 = nullptr;
  PFN_cuStreamWriteValue32_v11070 streamWriteValue32 = nullptr;
  // Several waits (and their resets) in one call: a rank waiting for 7 peers issues 1 call instead of 14.
  PFN_cuStreamBatchMemOp_v11070 streamBatchMemOp = nullptr;
  PFN_cuMemGetAddressRange_v3020 memGetAddressRange = nullptr;
  // Several attributes of a pointer in one call (type, device, allocation range, allocation id): checking and
  // exporting a buffer costs one driver call.
  PFN_cuPointerGetAttributes_v7000 pointerGetAttributes = nullptr;
  // VMM memory shared with peer processes (vmm_export.h): the owner's side, then the importer's.
  PFN_cuMemRetainAllocationHandle_v11000 memRetainAllocationHandle = nullptr;
  PFN_cuMemGetAllocationPropertiesFromHandle_v10020 memGetAllocationPropertiesFromHandle = nullptr;
  PFN_cuMemExportToShareableHandle_v10020 memExportToShareableHandle = nullptr;
  PFN_cuMemRelease_v10020 memRelease = nullptr;
  PFN_cuMemImportFromShareableHandle_v10020 memImportFromShareableHandle = nullptr;
  PFN_cuMemAddressReserve_v10020 memAddressReserve = nullptr;
  PFN_cuMemAddressFree_v10020 memAddressFree = nullptr;
  PFN_cuMemMap_v10020 memMap = nullptr;
  PFN_cuMemUnmap_v10020 memUnmap = nullptr;
  PFN_cuMemSetAccess_v10020 memSetAccess = nullptr;
  // The init probe's own VMM allocation (vmm_probe.cc).
  PFN_cuMemCreate_v10020 memCreate = nullptr;
  PFN_cuMemGetAllocationGranularity_v10020 memGetAllocationGranularity = nullptr;
  // A graph's memory allocated inside a capture (graph_memory.h): the runtime's node type query failed on a node of a
  // PyTorch capture (cudaErrorUnknown); the driver's knows every node type.
  PFN_cuGraphNodeGetType_v10000 graphNodeGetType = nullptr;
  PFN_cuGraphMemAllocNodeGetParams_v11040 graphMemAllocNodeGetParams = nullptr;
  PFN_cuGetErrorName_v6000 getErrorName = nullptr;
  PFN_cuGetErrorString_v6000 getErrorString = nullptr;
};

// Resolves the entry points once (thread-safe) and returns them. Throws Error(concclUnhandledCudaError) when
// the driver is missing or lacks one of them. Only call after a CUDA device was found.
const DriverApi& driverApi();

}  // namespace conccl::exec
