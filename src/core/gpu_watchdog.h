// The GPU-side watchdog of a communicator (issue 13, item 2). `timeoutMs` used to bound host waits only: a call
// whose GPU work never completed (a peer whose stream never reached the call, a kernel before it that never ends)
// hung the caller's stream silently. The watchdog polls each rank's launch / completion counters (the executor's
// pinned "done" counter, docs/cuda-executor.md "Program end"); when a rank has had launched but uncompleted work
// without any completion for `timeout`, it reports once, naming the oldest such call and every rank that made no
// progress. The communicator then fails with concclTimeout (concclCommGetAsyncError on every rank), which also
// cancels the executor so that its own waits drain; concclCommAbort releases the rest.
//
// The polling logic (poll) is separate from the thread, so that it is unit-tested on the CPU with fake counters.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace conccl {

class GpuWatchdog {
 public:
  using Clock = std::chrono::steady_clock;
  // (rank, launched, completed) -> false when there is nothing to read now (see Executor::gpuProgress).
  using Progress = std::function<bool(int, uint32_t*, uint32_t*)>;
  using OnTimeout = std::function<void(const std::string&)>;

  // Called every polling period while some rank has GPU work pending (or always, once watchCapturedWork() was
  // called); true when it found a dead peer and failed the communicator itself (the watchdog then stops). Lets a rank
  // whose stream waits on the GPU for a peer that was killed learn of it within a period instead of the timeout.
  using CheckPeers = std::function<bool()>;

  // Called every millisecond while some rank has GPU work pending (or always, once watchCapturedWork() was called)
  // once the communicator has failed (by this watchdog or anything else); true when it has failed, and it then
  // re-opens the rank's flags (Executor::cancel). One opening releases one Wait per flag, and a pipelined program
  // waits on the same flag many times (a 64 MiB staged AllReduce): opened once, the caller's stream stayed stuck
  // after a peer was killed (one H200, 2026-12-03). Bounded: at most `timeout` after the first failed look.
  using ReopenAfterFailure = std::function<bool()>;

  // Called on the watchdog's thread about every kHousekeepingPeriod until the watchdog reports (or finds a dead peer):
  // the communicator's background chores (ProcessClique::housekeeping). Must not throw.
  using Housekeeping = std::function<void()>;
  static constexpr std::chrono::milliseconds kHousekeepingPeriod{100};

  // Starts the polling thread when `startThread` (tests drive poll() themselves).
  GpuWatchdog(int nranks, std::chrono::milliseconds timeout, Progress progress, OnTimeout onTimeout,
              bool startThread = true, CheckPeers checkPeers = {}, ReopenAfterFailure reopenAfterFailure = {},
              Housekeeping housekeeping = {});
  ~GpuWatchdog();
  GpuWatchdog(const GpuWatchdog&) = delete;
  GpuWatchdog& operator=(const GpuWatchdog&) = delete;

  // After rank `rank` launched a call described by `what` ("concclAllReduce #3"): remembers the description for
  // the launch count it produced (a captured launch produces none and is not watched: its replays are the
  // caller's to synchronise).
  void launched(int rank, const std::string& what);

  // One look at every rank at time `now`; the report (once) when some rank has made no progress for `timeout`
  // (plus one polling period, see period_).
  std::optional<std::string> poll(Clock::time_point now);
  // Whether the last poll() saw a rank with launched but uncompleted work.
  bool workPending() const;

  // A call of the communicator was captured into a CUDA graph: its replays are the caller's launches, which the
  // counters never show. From now on the peers are checked every period even when nothing is pending, and after a
  // failure the flags are re-opened for `timeout` (a replay waiting for a killed peer then drains).
  void watchCapturedWork();

  // Stops the thread (idempotent); called before the executor goes away.
  void stop();

 private:
  struct RankWatch {
    bool pending = false;         // launched > completed at the last poll
    uint32_t lastCompleted = 0;
    uint32_t lastRecorded = 0;    // launch count of the last described launch
    Clock::time_point since{};    // when this rank last made progress (or became busy)
    std::deque<std::pair<uint32_t, std::string>> calls;  // (launch count, what) not yet completed
  };
  void run();
  // Whether any rank has launched but uncompleted GPU work now (read directly, not from the last poll).
  bool pendingNow() const;

  const std::chrono::milliseconds timeout_;
  // How often the thread looks (timeout / 8, 1..100 ms). A rank is reported once it has gone timeout + period
  // without progress: one period of grace, so that host-side checks that name a missing peer exactly (the
  // symmetric-call watchdog of ProcessClique, which fires at timeoutMs) report first where they apply.
  const std::chrono::milliseconds period_;
  Progress progress_;
  OnTimeout onTimeout_;
  CheckPeers checkPeers_;
  ReopenAfterFailure reopenAfterFailure_;
  Housekeeping housekeeping_;
  mutable std::mutex mutex_;  // ranks_, fired_, anyPending_
  bool anyPending_ = false;
  std::vector<RankWatch> ranks_;
  bool fired_ = false;
  std::atomic<bool> captured_{false};  // watchCapturedWork() was called
  std::mutex stopMutex_;
  std::condition_variable stopCv_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace conccl
