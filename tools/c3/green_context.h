// A green context (an SM partition of one device) and a stream in it, for --sm-sweep's GEMM-vs-SM-budget rows.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

namespace conccl::c3 {

// Holds `sms` SMs of `device`, rounded as the driver requires (multiples of 8 on compute capability 9.0,
// FACTS.md). The driver functions are resolved at run time (cudaGetDriverEntryPointByVersion) so that the tool
// does not link libcuda.so and starts, and says that it needs a GPU, on machines without a driver.
class GreenContext {
 public:
  GreenContext(int device, int sms);
  ~GreenContext();
  GreenContext(const GreenContext&) = delete;
  GreenContext& operator=(const GreenContext&) = delete;
  cudaStream_t stream() const { return reinterpret_cast<cudaStream_t>(stream_); }
  int sms() const { return sms_; }

 private:
  decltype(cuGreenCtxDestroy)* destroy_ = nullptr;
  CUgreenCtx ctx_ = nullptr;
  CUstream stream_ = nullptr;
  int sms_ = 0;
};

}  // namespace conccl::c3
