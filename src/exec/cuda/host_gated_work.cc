// See host_gated_work.h.
#include "exec/cuda/host_gated_work.h"

#include "base/error.h"

namespace conccl::exec {

HostGatedWork& HostGatedWork::instance() {
  static HostGatedWork* work = new HostGatedWork;  // never destroyed: detached threads use it until the process ends
  return *work;
}

void HostGatedWork::enter() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [this] { return !running_; });
  ++pending_;
}

void HostGatedWork::leave(size_t n) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    CONCCL_ASSERT(pending_ >= n);
    pending_ -= n;
  }
  changed_.notify_all();
}

bool HostGatedWork::runUngated(const std::function<void()>& fn, std::chrono::milliseconds limit) {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!changed_.wait_for(lock, limit, [this] { return pending_ == 0 && !running_; })) return false;
    running_ = true;
  }
  try {
    fn();
  } catch (...) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      running_ = false;
    }
    changed_.notify_all();
    throw;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    running_ = false;
  }
  changed_.notify_all();
  return true;
}

}  // namespace conccl::exec
