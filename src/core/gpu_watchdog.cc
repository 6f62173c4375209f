#include "core/gpu_watchdog.h"

#include <algorithm>

namespace conccl {
namespace {

// Wrap-safe "a is after b" for 32-bit launch counts.
bool after(uint32_t a, uint32_t b) { return static_cast<int32_t>(a - b) > 0; }

}  // namespace

GpuWatchdog::GpuWatchdog(int nranks, std::chrono::milliseconds timeout, Progress progress, OnTimeout onTimeout,
                         bool startThread, CheckPeers checkPeers, ReopenAfterFailure reopenAfterFailure,
                         Housekeeping housekeeping)
    : timeout_(timeout),
      period_(std::clamp<std::chrono::milliseconds>(timeout / 8, std::chrono::milliseconds(1),
                                                    std::chrono::milliseconds(100))),
      progress_(std::move(progress)),
      onTimeout_(std::move(onTimeout)),
      checkPeers_(std::move(checkPeers)),
      reopenAfterFailure_(std::move(reopenAfterFailure)),
      housekeeping_(std::move(housekeeping)) {
  ranks_.resize(static_cast<size_t>(nranks > 0 ? nranks : 0));
  if (startThread) thread_ = std::thread([this] { run(); });
}

GpuWatchdog::~GpuWatchdog() { stop(); }

void GpuWatchdog::stop() {
  {
    std::lock_guard<std::mutex> lock(stopMutex_);
    stopping_ = true;
  }
  stopCv_.notify_all();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

void GpuWatchdog::launched(int rank, const std::string& what) {
  if (rank < 0 || rank >= static_cast<int>(ranks_.size())) return;
  uint32_t launchedCount = 0, completed = 0;
  if (!progress_(rank, &launchedCount, &completed)) return;
  std::lock_guard<std::mutex> lock(mutex_);
  RankWatch& w = ranks_[static_cast<size_t>(rank)];
  if (!after(launchedCount, w.lastRecorded)) return;  // nothing eager was launched (e.g. captured)
  w.lastRecorded = launchedCount;
  if (after(launchedCount, completed)) w.calls.emplace_back(launchedCount, what);
}

std::optional<std::string> GpuWatchdog::poll(Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (fired_) return std::nullopt;
  anyPending_ = false;
  std::vector<int> stalled;
  for (size_t r = 0; r < ranks_.size(); ++r) {
    RankWatch& w = ranks_[r];
    uint32_t launchedCount = 0, completed = 0;
    if (!progress_(static_cast<int>(r), &launchedCount, &completed)) continue;  // busy or gone: next time
    while (!w.calls.empty() && !after(w.calls.front().first, completed)) w.calls.pop_front();
    if (!after(launchedCount, completed)) {
      w.pending = false;
      w.lastCompleted = completed;
      continue;
    }
    anyPending_ = true;
    if (!w.pending || completed != w.lastCompleted) {
      w.pending = true;
      w.lastCompleted = completed;
      w.since = now;
      continue;
    }
    if (now - w.since >= timeout_ + period_) stalled.push_back(static_cast<int>(r));
  }
  if (stalled.empty()) return std::nullopt;
  fired_ = true;
  auto callOf = [&](int r) {
    const RankWatch& w = ranks_[static_cast<size_t>(r)];
    return w.calls.empty() ? std::string("a call") : w.calls.front().second;
  };
  std::string ranks;
  for (int r : stalled) {
    ranks += (ranks.empty() ? "" : ", ") + std::string("rank ") + std::to_string(r) + " (" + callOf(r) + ")";
  }
  return "the GPU work of " + callOf(stalled.front()) + " did not complete within " +
         std::to_string(timeout_.count()) + " ms: no progress on " + ranks +
         " (a rank whose stream never reached the call, or work queued before it that never finishes); the "
         "communicator is out of service: abort it (concclCommAbort)";
}

bool GpuWatchdog::workPending() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return anyPending_;
}

void GpuWatchdog::watchCapturedWork() { captured_.store(true, std::memory_order_release); }

bool GpuWatchdog::pendingNow() const {
  for (size_t r = 0; r < ranks_.size(); ++r) {
    uint32_t launchedCount = 0, completed = 0;
    if (progress_(static_cast<int>(r), &launchedCount, &completed) && after(launchedCount, completed)) return true;
  }
  return false;
}

void GpuWatchdog::run() {
  std::unique_lock<std::mutex> lock(stopMutex_);
  bool reported = false;  // reported once: the communicator is out of service, nothing more to report
  std::optional<Clock::time_point> drainingSince;
  std::chrono::milliseconds period = period_;
  Clock::time_point lastHousekeeping = Clock::now();
  while (!stopping_) {
    stopCv_.wait_for(lock, period, [this] { return stopping_; });
    if (stopping_) break;
    lock.unlock();
    if (!reported) {
      std::optional<std::string> report = poll(Clock::now());
      if (report) onTimeout_(*report);
      const bool captured = captured_.load(std::memory_order_acquire);
      const bool peerGone = !report && checkPeers_ && (workPending() || captured) && checkPeers_();
      reported = report.has_value() || peerGone;
      if (!reported && housekeeping_ && Clock::now() - lastHousekeeping >= kHousekeepingPeriod) {
        housekeeping_();
        lastHousekeeping = Clock::now();
      }
    }
    // After a failure, keep the rank's waits open until its GPU work drains (ReopenAfterFailure), within a timeout.
    period = period_;
    const auto now = Clock::now();
    const bool mayWait = pendingNow() || captured_.load(std::memory_order_acquire);  // a replay may wait, unseen
    if (reopenAfterFailure_ && (!drainingSince || now - *drainingSince < timeout_) && mayWait &&
        reopenAfterFailure_()) {
      if (!drainingSince) drainingSince = now;
      period = std::chrono::milliseconds(1);
    }
    lock.lock();
  }
}

}  // namespace conccl
