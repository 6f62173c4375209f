// Device queries and allocations the API needs outside an executor (concclCommInitRank, concclMemAlloc), and the
// capture mode of conccl's own threads.
#include <cuda_runtime_api.h>

#include "base/error.h"
#include "exec/cuda/cuda_check.h"
#include "exec/executor.h"

namespace conccl::exec {

int cudaCurrentDevice() {
  if (cudaDeviceCount() == 0) {
    CONCCL_THROW(concclNotSupported, "no CUDA device is visible to this process");
  }
  int device = -1;
  CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

void* cudaAllocate(size_t bytes) {
  cudaCurrentDevice();  // a clear error without a device
  void* p = nullptr;
  // cudaMalloc, not a stream-ordered pool: only whole cudaMalloc allocations can be exported with CUDA IPC, and
  // the allocation is 256-byte aligned, which the copy engines and the reduction kernel like.
  CUDA_CHECK(cudaMalloc(&p, bytes));
  return p;
}

void cudaRelease(void* ptr) { CUDA_CHECK(cudaFree(ptr)); }

namespace {
// Sets the calling thread's capture interaction mode to `mode`; false (and `mode` unchanged) when CUDA refused,
// else `mode` is the thread's previous mode.
bool exchangeCaptureMode(cudaStreamCaptureMode& mode) {
  if (cudaThreadExchangeStreamCaptureMode(&mode) == cudaSuccess) return true;
  (void)cudaGetLastError();
  return false;
}
}  // namespace

CaptureStatus captureStatusOf(cudaStream_t stream) {
  cudaStreamCaptureStatus raw = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &raw) != cudaSuccess) {
    (void)cudaGetLastError();
    return CaptureStatus::kNone;
  }
  if (raw == cudaStreamCaptureStatusActive) return CaptureStatus::kActive;
  return raw == cudaStreamCaptureStatusInvalidated ? CaptureStatus::kInvalidated : CaptureStatus::kNone;
}

void relaxCaptureModeOfThisThread() {
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  (void)exchangeCaptureMode(mode);
}

RelaxedCaptureScope::RelaxedCaptureScope(bool active) : active_(active) {
  if (!active_) return;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  active_ = exchangeCaptureMode(mode);
  previousMode_ = static_cast<int>(mode);
}

RelaxedCaptureScope::~RelaxedCaptureScope() {
  if (!active_) return;
  auto mode = static_cast<cudaStreamCaptureMode>(previousMode_);
  (void)exchangeCaptureMode(mode);
}

}  // namespace conccl::exec
