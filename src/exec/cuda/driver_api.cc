#include "exec/cuda/driver_api.h"

#include <cuda_runtime_api.h>

#include <mutex>
#include <string>

#include "base/error.h"
#include "exec/cuda/cuda_check.h"

namespace conccl::exec {
namespace {

// Requesting the ABI of CUDA 12.0 pins each function's semantics: a newer driver keeps serving that version.
constexpr unsigned int kDriverAbiVersion = 12000;

template <typename Fn>
void resolve(const char* symbol, Fn& out) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
  CUDA_CHECK(cudaGetDriverEntryPointByVersion(symbol, &fn, kDriverAbiVersion, cudaEnableDefault, &status));
  if (status != cudaDriverEntryPointSuccess || fn == nullptr) {
    CONCCL_THROW(concclUnhandledCudaError,
                 std::string("the CUDA driver does not provide ") + symbol + " (entry point query status " +
                     std::to_string(static_cast<int>(status)) + "); a driver for CUDA 12.0 or newer is required");
  }
  out = reinterpret_cast<Fn>(fn);
}

}  // namespace

const DriverApi& driverApi() {
  static DriverApi api;
  static std::once_flag once;
  static bool loaded = false;
  // call_once re-runs the lambda after a throw, so a transient failure is reported again, not cached.
  std::call_once(once, [] {
    DriverApi a;
    resolve("cuStreamWaitValue32", a.streamWaitValue32);
    resolve("cuStreamWriteValue32", a.streamWriteValue32);
    resolve("cuStreamBatchMemOp", a.streamBatchMemOp);
    resolve("cuMemGetAddressRange", a.memGetAddressRange);
    resolve("cuPointerGetAttributes", a.pointerGetAttributes);
    resolve("cuMemRetainAllocationHandle", a.memRetainAllocationHandle);
    resolve("cuMemGetAllocationPropertiesFromHandle", a.memGetAllocationPropertiesFromHandle);
    resolve("cuMemExportToShareableHandle", a.memExportToShareableHandle);
    resolve("cuMemRelease", a.memRelease);
    resolve("cuMemImportFromShareableHandle", a.memImportFromShareableHandle);
    resolve("cuMemAddressReserve", a.memAddressReserve);
    resolve("cuMemAddressFree", a.memAddressFree);
    resolve("cuMemMap", a.memMap);
    resolve("cuMemUnmap", a.memUnmap);
    resolve("cuMemSetAccess", a.memSetAccess);
    resolve("cuMemCreate", a.memCreate);
    resolve("cuMemGetAllocationGranularity", a.memGetAllocationGranularity);
    resolve("cuGraphNodeGetType", a.graphNodeGetType);
    resolve("cuGraphMemAllocNodeGetParams", a.graphMemAllocNodeGetParams);
    resolve("cuGetErrorName", a.getErrorName);
    resolve("cuGetErrorString", a.getErrorString);
    api = a;
    loaded = true;
  });
  CONCCL_ASSERT(loaded);
  return api;
}

namespace detail {

void throwCudaError(cudaError_t error, const char* call, const char* file, int line) {
  throw Error(concclUnhandledCudaError, std::string(call) + " failed: " + cudaGetErrorName(error) + " (" +
                                            cudaGetErrorString(error) + ")" +
                                            ::conccl::detail::formatLocation(file, line));
}

void throwCuError(CUresult error, const char* call, const char* file, int line) {
  const char* name = nullptr;
  const char* text = nullptr;
  // A CUresult only comes from a driver function, so the table is loaded by now; the try is belt and braces.
  try {
    const DriverApi& api = driverApi();
    if (api.getErrorName(error, &name) != CUDA_SUCCESS) name = nullptr;
    if (api.getErrorString(error, &text) != CUDA_SUCCESS) text = nullptr;
  } catch (const Error&) {
  }
  std::string shownName = name != nullptr ? name : "CUresult " + std::to_string(static_cast<int>(error));
  throw Error(concclUnhandledCudaError, std::string(call) + " failed: " + shownName + " (" +
                                            (text != nullptr ? text : "unknown error") + ")" +
                                            ::conccl::detail::formatLocation(file, line));
}

}  // namespace detail
}  // namespace conccl::exec
