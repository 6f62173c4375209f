// See capture_watch.h.
#include "exec/cuda/capture_watch.h"

#include "exec/executor.h"

namespace conccl::exec {
namespace {

// The stream's capture: its id, or 0 when it is not capturing (or CUDA cannot say: a stream destroyed since).
unsigned long long activeCaptureOf(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  unsigned long long id = 0;
  if (cudaStreamGetCaptureInfo(stream, &status, &id) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return status == cudaStreamCaptureStatusActive ? id : 0;
}

}  // namespace

CaptureWatch& CaptureWatch::instance() {
  static CaptureWatch* watch = new CaptureWatch;  // never destroyed: used by detached threads until the process ends
  return *watch;
}

bool CaptureWatch::noteCall(cudaStream_t stream) {
  const unsigned long long id = activeCaptureOf(stream);
  if (id == 0 && known_.load(std::memory_order_acquire) == 0) return false;  // the common case: one query, no lock
  std::lock_guard<std::mutex> lock(mutex_);
  if (id != 0) {
    capturing_[stream] = id;
  } else {
    capturing_.erase(stream);
  }
  known_.store(capturing_.size(), std::memory_order_release);
  return id != 0;
}

bool CaptureWatch::noKnownCapture() {
  if (known_.load(std::memory_order_acquire) == 0) return true;
  std::lock_guard<std::mutex> lock(mutex_);
  bool none = true;
  for (auto it = capturing_.begin(); it != capturing_.end();) {
    if (activeCaptureOf(it->first) == it->second) {
      none = false;
      ++it;
    } else {
      it = capturing_.erase(it);
    }
  }
  known_.store(capturing_.size(), std::memory_order_release);
  return none;
}

bool noteCallStream(cudaStream_t stream) { return CaptureWatch::instance().noteCall(stream); }

}  // namespace conccl::exec
