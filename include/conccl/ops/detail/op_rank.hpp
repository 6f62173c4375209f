// conccl::ops::detail::OpRank: what every fused op (all_gather_matmul.hpp, matmul_reduce_scatter.hpp) owns for its
// rank: the rank's place in the communicator, a GEMM stream on the rank's device, one event to order that stream
// against the caller's, and the cuBLASLt state (row_major_gemm.hpp).
#pragma once

#include <conccl/conccl.h>
#include <conccl/ops/detail/row_major_gemm.hpp>
#include <cuda_runtime_api.h>

#include <memory>

namespace conccl::ops::detail {

// Makes `device` current for its scope and restores the previous device after.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    cudaGetDevice(&previous_);
    if (device >= 0) cudaSetDevice(device);
  }
  ~DeviceScope() { cudaSetDevice(previous_); }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = 0;
};

class OpRank {
 public:
  OpRank(concclComm_t comm, size_t workspaceBytes) : comm_(comm) {
    ok_ = concclCommCount(comm, &nranks_) == concclSuccess && concclCommUserRank(comm, &rank_) == concclSuccess &&
          concclCommCuDevice(comm, &device_) == concclSuccess && device_ >= 0;
    if (!ok_) return;
    DeviceScope scope(device_);
    ok_ = cudaEventCreateWithFlags(&order_, cudaEventDisableTiming) == cudaSuccess &&
          cudaStreamCreateWithFlags(&gemmStream_, cudaStreamNonBlocking) == cudaSuccess;
    gemm_ = std::make_unique<RowMajorGemm>(workspaceBytes);
    ok_ = ok_ && gemm_->ok();
  }
  ~OpRank() {
    // The caller has synchronised its stream before destroying the op (as for any CUDA resource it passed us).
    DeviceScope scope(device_);
    if (order_ != nullptr) cudaEventDestroy(order_);
    if (gemmStream_ != nullptr) cudaStreamDestroy(gemmStream_);
    gemm_.reset();  // frees its workspace on the rank's device
  }
  OpRank(const OpRank&) = delete;
  OpRank& operator=(const OpRank&) = delete;

  bool ok() const { return ok_; }
  concclComm_t comm() const { return comm_; }
  int nranks() const { return nranks_; }
  int rank() const { return rank_; }
  int device() const { return device_; }
  cudaStream_t gemmStream() const { return gemmStream_; }
  RowMajorGemm& gemm() { return *gemm_; }

  // The GEMM stream starts after the work queued on `stream` so far.
  bool gemmStreamFollows(cudaStream_t stream) {
    return cudaEventRecord(order_, stream) == cudaSuccess &&
           cudaStreamWaitEvent(gemmStream_, order_, 0) == cudaSuccess;
  }
  // `stream` continues after the work queued on the GEMM stream so far.
  bool streamJoinsGemm(cudaStream_t stream) {
    return cudaEventRecord(order_, gemmStream_) == cudaSuccess &&
           cudaStreamWaitEvent(stream, order_, 0) == cudaSuccess;
  }

 private:
  concclComm_t comm_ = nullptr;
  int nranks_ = 0, rank_ = 0, device_ = -1;
  bool ok_ = false;
  cudaEvent_t order_ = nullptr;
  cudaStream_t gemmStream_ = nullptr;
  std::unique_ptr<RowMajorGemm> gemm_;
};

}  // namespace conccl::ops::detail
