// Work of this process on the GPU that waits for a later action of a host thread: a deferred call's gate
// (deferred_launch.h) holds the caller's stream until the proxy thread has enqueued the call's program, and a call
// launched before its peers called (staged, symmetric, late: core/process_clique.h) waits on the GPU for the peer
// processes' calls, seconds if a peer is late.
//
// Why it is counted: cudaIpcCloseMemHandle waits for the device while it holds a driver lock that every other CUDA
// call of the process needs. Run while a gate is pending, it waits for a stream that only the proxy can release,
// and the proxy's next CUDA call waits for the lock: a deadlock (two processes sharing one H200, 2026-12-02: every
// thread of both stuck, the closer in cuIpcCloseMemHandle, the proxy in cuMemcpyAsync, the caller in
// cuEventRecord). So such calls run through runUngated(): only at a moment when no gate is pending, and no new gate
// is enqueued while they run (a caller about to defer waits for them instead, bounded by the device draining work
// that is already enqueued and needs no host action).
// The same for conccl's own GPU work that waits for peers: run while it was pending, cudaIpcCloseMemHandle waited for
// a late peer's call and stalled the caller's next CUDA call for the whole 2 s of the peer's delay (one H200, two
// processes, 2026-12-04, docs/results/2026-12-04-h200-1gpu-liveness-spin/ run 5: the first call of a burst held the
// thread 2.0 s). So every executor registers a busy probe (GPU work of its ranks not completed), runUngated() waits
// for a moment when no probe says busy, and every launch enqueues between enter() and leave(), so that none starts
// while the function runs.
// The price: a call that arrives while the closer unmaps waits for the unmap. Peers' frees reach this process with
// their next call, and the unmap started once the GPU work of that call was done, often just as the caller made its
// next call: the first timed call of each new 64 MiB buffer under expandable segments waited 170-310 us for a VMM
// unit's unmap (one H100, two processes, 2026-12-06, docs/results/2026-12-06-h100-1gpu-whole/). So the closer asks
// for a quiet moment too (Quiet): no launch for a while, as between a burst of calls and the next. Counting launches
// alone left two cases (one H100, 2026-12-07, docs/results/2026-12-07-h100-1gpu-verify/, 4 of 612 calls waited
// 239-346 us): the caller resumes as its GPU work that waited for a late peer completes, the moment the gate opens;
// and a caller's own call queues the close (its bind learns of the peer's free) just before it launches. So a gated
// moment and the request count as activity too. Past a bound since the request any ungated moment will do, so that a
// peer's freed memory is not held for as long as this process's GPU work keeps waiting for peers; where a gate outlasts
// the bound (a peer seconds late), the unmap can still meet the caller as it resumes. None is asked for while a
// caller waits for the close (Hurry).
// Every call's laps show what is left of the wait as kCloseWaitLap (base/host_laps.h).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>

namespace conccl::exec {

// The lap (base/host_laps.h) a caller's enter() is timed under.
inline constexpr const char* kCloseWaitLap = "wait for a close of a peer's mapping";

class HostGatedWork {
 public:
  static HostGatedWork& instance();
  // Before a gate wait is enqueued: waits while a runUngated() call runs.
  void enter();
  // Once the gate's release is enqueued (or done from the host): one enter() fewer.
  void leave(size_t n = 1);
  // What a runUngated() caller that need not hurry asks for besides an ungated moment: that for `interval` (0: not
  // asked) no launch ended (leave()), no moment was gated and the request was not made; asked until `within` has
  // passed since the request (time spent gated counts: a late peer's seconds must not hold a peer's freed memory).
  struct Quiet {
    std::chrono::microseconds interval{0};
    std::chrono::milliseconds within{0};
  };
  // Runs `fn` at a moment when no gate is pending, no enqueue is between enter() and leave() and no busy probe says
  // busy (and `quiet` holds, while no Hurry lives), holding new ones off until it returns. Waits at most `limit` for
  // such a moment; false (and `fn` not run) if none came.
  bool runUngated(const std::function<void()>& fn, std::chrono::milliseconds limit, Quiet quiet);
  bool runUngated(const std::function<void()>& fn, std::chrono::milliseconds limit);  // no quiet interval asked

  // While one lives, runUngated() asks for no quiet interval: a thread waits for what it runs (a caller whose import
  // of a peer's buffer waits for a pending close), so the interval would only delay that thread.
  class Hurry {
   public:
    Hurry();
    ~Hurry();
    Hurry(const Hurry&) = delete;
    Hurry& operator=(const Hurry&) = delete;
  };

  // A probe says whether its owner has GPU work that may wait for another process (called under this class's lock:
  // it must not block or take a lock held around enter()). Returns a token for removeBusyProbe.
  using BusyProbe = std::function<bool()>;
  uint64_t addBusyProbe(BusyProbe probe);
  void removeBusyProbe(uint64_t token);

 private:
  bool anyBusyLocked() const;
  std::mutex mutex_;
  std::condition_variable changed_;
  size_t pending_ = 0;
  std::chrono::steady_clock::time_point lastLaunch_{};  // the last leave()
  // Hurry objects alive. Atomic, not under mutex_: a Hurry may be made under locks a busy probe could need;
  // runUngated() looks at it on every poll (each millisecond), so no wake-up is needed.
  std::atomic<int> hurries_{0};
  bool running_ = false;  // a runUngated() call is running its function
  uint64_t nextToken_ = 1;
  std::map<uint64_t, BusyProbe> probes_;
};

}  // namespace conccl::exec
