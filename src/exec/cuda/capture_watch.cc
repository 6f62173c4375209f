// See capture_watch.h.
#include "exec/cuda/capture_watch.h"

#include "exec/executor.h"

namespace conccl::exec {
namespace {

// The stream's capture: its id (0 when it is not capturing, or CUDA cannot say: a stream destroyed since) and status.
unsigned long long captureOf(cudaStream_t stream, CaptureStatus* status) {
  cudaStreamCaptureStatus raw = cudaStreamCaptureStatusNone;
  unsigned long long id = 0;
  *status = CaptureStatus::kNone;
  if (cudaStreamGetCaptureInfo(stream, &raw, &id) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  if (raw == cudaStreamCaptureStatusInvalidated) *status = CaptureStatus::kInvalidated;
  if (raw != cudaStreamCaptureStatusActive) return 0;
  *status = CaptureStatus::kActive;
  return id;
}

}  // namespace

CaptureWatch& CaptureWatch::instance() {
  static CaptureWatch* watch = new CaptureWatch;  // never destroyed: used by detached threads until the process ends
  return *watch;
}

CaptureStatus CaptureWatch::noteCall(cudaStream_t stream) {
  CaptureStatus status;
  const unsigned long long id = captureOf(stream, &status);
  if (id == 0 && known_.load(std::memory_order_acquire) == 0) return status;  // the common case: one query, no lock
  std::lock_guard<std::mutex> lock(mutex_);
  if (id != 0) {
    capturing_[stream] = id;
  } else {
    capturing_.erase(stream);
  }
  known_.store(capturing_.size(), std::memory_order_release);
  return status;
}

bool CaptureWatch::noKnownCapture() {
  if (known_.load(std::memory_order_acquire) == 0) return true;
  std::lock_guard<std::mutex> lock(mutex_);
  bool none = true;
  CaptureStatus status;
  for (auto it = capturing_.begin(); it != capturing_.end();) {
    if (captureOf(it->first, &status) == it->second) {
      none = false;
      ++it;
    } else {
      it = capturing_.erase(it);
    }
  }
  known_.store(capturing_.size(), std::memory_order_release);
  return none;
}

CaptureStatus noteCallStream(cudaStream_t stream) { return CaptureWatch::instance().noteCall(stream); }

CaptureStatus captureStatusOf(cudaStream_t stream) {
  CaptureStatus status;
  (void)captureOf(stream, &status);
  return status;
}

}  // namespace conccl::exec
