// Which CUDA graph captures in this process conccl's calls have seen, for conccl's background threads.
//
// Why: while any thread captures in cudaStreamCaptureModeGlobal (PyTorch's torch.cuda.graph), a device-wide wait
// (cudaDeviceSynchronize) from any thread, even one in relaxed mode, fails and invalidates that capture (one H200,
// 2026-12-04: test_gpu_capture_mode). The closer of retired peer mappings waits for the device before it unmaps, so
// it holds its work back while a capture is in progress. CUDA offers no process-wide "is anything capturing" query, so every call across processes reports its
// stream here (noteCall) and the closer asks about the captures seen (noKnownCapture). A capture that contains no
// conccl call is not seen; PyTorch waits for the device before it begins one (torch.cuda.graph), so a closer that
// started before has finished its wait by then.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <map>
#include <mutex>

#include "exec/executor.h"

namespace conccl::exec {

class CaptureWatch {
 public:
  static CaptureWatch& instance();
  // From a thread making a call on `stream`: remembers its capture if it is being captured, forgets it if not.
  CaptureStatus noteCall(cudaStream_t stream);
  // From a background thread in relaxed capture mode: true when none of the captures seen is still in progress (the
  // ones that ended are forgotten).
  bool noKnownCapture();

 private:
  std::mutex mutex_;
  std::map<cudaStream_t, unsigned long long> capturing_;  // stream -> id of the capture seen on it
  std::atomic<size_t> known_{0};                          // capturing_.size(), read without the lock
};

}  // namespace conccl::exec
