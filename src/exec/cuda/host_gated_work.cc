// See host_gated_work.h.
#include "exec/cuda/host_gated_work.h"

#include <algorithm>

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

HostGatedWork::Hurry::Hurry() { instance().hurries_.fetch_add(1); }

HostGatedWork::Hurry::~Hurry() { instance().hurries_.fetch_sub(1); }

void HostGatedWork::leave(size_t n) {
  bool idle = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    CONCCL_ASSERT(pending_ >= n);
    pending_ -= n;
    // Only the end is stamped: while a launch is between enter() and leave(), pending_ holds runUngated() off anyway.
    lastLaunch_ = std::chrono::steady_clock::now();
    idle = pending_ == 0;
  }
  // Only runUngated() waits on pending_, and only for 0: no wake-up on every launch's leave.
  if (idle) changed_.notify_all();
}

uint64_t HostGatedWork::addBusyProbe(BusyProbe probe) {
  std::lock_guard<std::mutex> lock(mutex_);
  const uint64_t token = nextToken_++;
  probes_.emplace(token, std::move(probe));
  return token;
}

void HostGatedWork::removeBusyProbe(uint64_t token) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    probes_.erase(token);
  }
  changed_.notify_all();
}

bool HostGatedWork::anyBusyLocked() const {
  for (const auto& [token, probe] : probes_) {
    if (probe()) return true;
  }
  return false;
}

bool HostGatedWork::runUngated(const std::function<void()>& fn, std::chrono::milliseconds limit) {
  return runUngated(fn, limit, Quiet{});
}

bool HostGatedWork::runUngated(const std::function<void()>& fn, std::chrono::milliseconds limit, Quiet quiet) {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    // GPU work completes (and launches pass) without notifying anyone: look again every millisecond.
    const auto start = std::chrono::steady_clock::now();
    const auto until = start + limit;
    const auto quietUntil = start + quiet.within;
    // What counts against a quiet moment: a launch, a gated moment (a caller waiting for its GPU work resumes as it
    // completes, and calls again at once) and the request itself (it came with a call that is about to launch).
    auto lastActive = start;
    for (;;) {
      const auto now = std::chrono::steady_clock::now();
      const bool gatedNow = pending_ > 0 || running_ || anyBusyLocked();
      if (gatedNow) lastActive = now;
      lastActive = std::max(lastActive, lastLaunch_);
      const bool quietNow = quiet.interval.count() == 0 || hurries_.load() > 0 || now >= quietUntil ||
                            now - lastActive >= quiet.interval;
      if (!gatedNow && quietNow) break;
      if (now >= until) return false;
      changed_.wait_for(lock, std::chrono::milliseconds(1));
    }
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
