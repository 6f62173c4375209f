// Makes a device current for a scope and restores the caller's device on every exit path, without throwing: the
// drop-in and the hierarchical engine (hier_exec.cc) report errors as values, and allocate and launch on a
// communicator's device whatever device the caller has current, as NCCL allows. (exec/cuda/raii.h's DeviceGuard is the
// executor's, which throws.)
#ifndef CONCCL_NCCL_CUDA_DEVICE_GUARD_H_
#define CONCCL_NCCL_CUDA_DEVICE_GUARD_H_

#include <cuda_runtime_api.h>

namespace conccl::nccl {

class CudaDeviceGuard {
 public:
  explicit CudaDeviceGuard(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    // Only switch when needed: cudaSetDevice is cheap but not free, and this runs on every PreMulSum call.
    ok_ = previous_ == device || cudaSetDevice(device) == cudaSuccess;
    if (previous_ == device) previous_ = -1;
  }
  ~CudaDeviceGuard() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  CudaDeviceGuard(const CudaDeviceGuard&) = delete;
  CudaDeviceGuard& operator=(const CudaDeviceGuard&) = delete;
  bool ok() const { return ok_; }

 private:
  int previous_ = -1;
  bool ok_ = false;
};

}  // namespace conccl::nccl

#endif  // CONCCL_NCCL_CUDA_DEVICE_GUARD_H_
