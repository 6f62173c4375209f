#include "green_context.h"

#include <string>

#include "c3_check.h"

namespace conccl::c3 {
namespace {

// Asked for with the ABI of the toolkit we compile against: green-context functions came in several releases
// (12.4, 12.5 for cuGreenCtxStreamCreate), and an older ABI version makes the newer ones "not found".
template <typename Fn>
Fn* driver(const char* symbol) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult status{};
  CUDA_CHECK(cudaGetDriverEntryPointByVersion(symbol, &fn, CUDART_VERSION, cudaEnableDefault, &status));
  CONCCL_REQUIRE(fn != nullptr && status == cudaDriverEntryPointSuccess,
                 std::string("the CUDA driver has no ") + symbol + " (green contexts need a CUDA 12.5+ driver)");
  return reinterpret_cast<Fn*>(fn);
}
// decltype only: naming the function's address would make the linker want libcuda.so again.
#define C3_DRIVER(name) driver<decltype(name)>(#name)

}  // namespace

GreenContext::GreenContext(int device, int sms) {
  exec::DeviceGuard guard(device);  // initialises the runtime and the device's primary context
  const CUdevice dev = device;      // a CUdevice is the device ordinal
  CUdevResource all;
  CU_CHECK(C3_DRIVER(cuDeviceGetDevResource)(dev, &all, CU_DEV_RESOURCE_TYPE_SM));
  CUdevResource part;
  CUdevResource rest;
  unsigned groups = 1;
  CU_CHECK(C3_DRIVER(cuDevSmResourceSplitByCount)(&part, &groups, &all, &rest, 0, unsigned(sms)));
  sms_ = int(part.sm.smCount);
  CUdevResourceDesc desc;
  CU_CHECK(C3_DRIVER(cuDevResourceGenerateDesc)(&desc, &part, 1));
  destroy_ = C3_DRIVER(cuGreenCtxDestroy);  // looked up now: the destructor must not throw
  CU_CHECK(C3_DRIVER(cuGreenCtxCreate)(&ctx_, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM));
  CU_CHECK(C3_DRIVER(cuGreenCtxStreamCreate)(&stream_, ctx_, CU_STREAM_NON_BLOCKING, 0));
}

GreenContext::~GreenContext() {
  if (stream_) cudaStreamDestroy(reinterpret_cast<cudaStream_t>(stream_));
  if (ctx_) destroy_(ctx_);
}

}  // namespace conccl::c3
