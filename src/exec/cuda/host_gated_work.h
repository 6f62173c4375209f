// Work of this process on the GPU that waits for a later action of one of its own host threads: a deferred call's
// gate (deferred_launch.h) holds the caller's stream until the proxy thread has enqueued the call's program.
//
// Why it is counted: cudaIpcCloseMemHandle waits for the device while it holds a driver lock that every other CUDA
// call of the process needs. Run while a gate is pending, it waits for a stream that only the proxy can release,
// and the proxy's next CUDA call waits for the lock: a deadlock (two processes sharing one H200, 2026-12-02: every
// thread of both stuck, the closer in cuIpcCloseMemHandle, the proxy in cuMemcpyAsync, the caller in
// cuEventRecord). So such calls run through runUngated(): only at a moment when no gate is pending, and no new gate
// is enqueued while they run (a caller about to defer waits for them instead, bounded by the device draining work
// that is already enqueued and needs no host action).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>

namespace conccl::exec {

class HostGatedWork {
 public:
  static HostGatedWork& instance();
  // Before a gate wait is enqueued: waits while a runUngated() call runs.
  void enter();
  // Once the gate's release is enqueued (or done from the host): one enter() fewer.
  void leave(size_t n = 1);
  // Runs `fn` at a moment when no gate is pending, holding new ones off until it returns. Waits at most `limit`
  // for such a moment; false (and `fn` not run) if none came.
  bool runUngated(const std::function<void()>& fn, std::chrono::milliseconds limit);

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  size_t pending_ = 0;
  bool running_ = false;  // a runUngated() call is running its function
};

}  // namespace conccl::exec
