// HostGatedWork (exec/cuda/host_gated_work.h) on the CPU: a function that must not run while this process has GPU
// work waiting for a host action (an IPC close) runs only at a moment with no gate pending, no launch between enter()
// and leave() and no busy probe saying busy, and holds new launches off while it runs. No GPU needed: the class makes
// no CUDA call.
#include "exec/cuda/host_gated_work.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

using conccl::exec::HostGatedWork;
using namespace std::chrono_literals;

namespace {

// The process-wide instance is shared by every test of this binary: each test leaves it idle (probes removed,
// enter() balanced by leave()).
HostGatedWork& gated() { return HostGatedWork::instance(); }

}  // namespace

TEST(HostGatedWork, RunsAtOnceWhenNothingIsPending) {
  bool ran = false;
  EXPECT_TRUE(gated().runUngated([&] { ran = true; }, 1000ms));
  EXPECT_TRUE(ran);
}

TEST(HostGatedWork, WaitsWhileAProbeSaysBusy) {
  std::atomic<bool> busy{true};
  const uint64_t token = gated().addBusyProbe([&] { return busy.load(); });
  std::thread release([&] {
    std::this_thread::sleep_for(80ms);
    busy = false;  // the GPU work completed: nothing notifies, the waiter looks again
  });
  std::atomic<bool> ran{false};
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(gated().runUngated([&] { ran = !busy.load(); }, 5000ms));
  const auto waited = std::chrono::steady_clock::now() - t0;
  release.join();
  EXPECT_TRUE(ran) << "the function ran while the probe still said busy";
  EXPECT_GE(waited, 70ms);
  EXPECT_LT(waited, 2000ms);
  gated().removeBusyProbe(token);
}

TEST(HostGatedWork, GivesUpAfterItsLimitIfTheWorkNeverCompletes) {
  const uint64_t token = gated().addBusyProbe([] { return true; });
  bool ran = false;
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(gated().runUngated([&] { ran = true; }, 50ms));
  EXPECT_FALSE(ran);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2000ms);
  gated().removeBusyProbe(token);
  // Without the probe it runs again.
  EXPECT_TRUE(gated().runUngated([&] { ran = true; }, 1000ms));
  EXPECT_TRUE(ran);
}

TEST(HostGatedWork, WaitsForALaunchBeingEnqueued) {
  gated().enter();  // a launch is being enqueued
  std::atomic<bool> left{false};
  std::thread launcher([&] {
    std::this_thread::sleep_for(60ms);
    left = true;
    gated().leave();
  });
  std::atomic<bool> ranAfterLeave{false};
  EXPECT_TRUE(gated().runUngated([&] { ranAfterLeave = left.load(); }, 5000ms));
  launcher.join();
  EXPECT_TRUE(ranAfterLeave);
}

TEST(HostGatedWork, ALaunchWaitsWhileTheFunctionRuns) {
  std::atomic<bool> inside{false}, done{false};
  std::thread closer([&] {
    EXPECT_TRUE(gated().runUngated(
        [&] {
          inside = true;
          std::this_thread::sleep_for(80ms);
          done = true;
        },
        5000ms));
  });
  while (!inside) std::this_thread::sleep_for(1ms);
  gated().enter();  // must not return before the function has returned
  EXPECT_TRUE(done);
  gated().leave();
  closer.join();
}

namespace {

// Launches (enter() + leave()) every `period` until stopped, the way a caller's burst of calls looks to the closer.
class LaunchBurst {
 public:
  explicit LaunchBurst(std::chrono::microseconds period)
      : thread_([this, period] {
          while (!stop_) {
            gated().enter();
            lastEnter_ = std::chrono::steady_clock::now().time_since_epoch().count();
            gated().leave();
            std::this_thread::sleep_for(period);
          }
        }) {
    // Started once it has launched: before that, a test that runs alone (ctest) sees a process with no launch yet.
    while (lastEnter_.load() == 0) std::this_thread::sleep_for(100us);
  }
  ~LaunchBurst() { stop(); }
  void stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  bool running() const { return !stop_; }
  std::chrono::steady_clock::time_point lastEnter() const {
    return std::chrono::steady_clock::time_point(std::chrono::steady_clock::duration(lastEnter_.load()));
  }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<std::chrono::steady_clock::rep> lastEnter_{0};
  std::thread thread_;
};

}  // namespace

TEST(HostGatedWork, AQuietCallerWaitsForAPauseInTheLaunches) {
  LaunchBurst burst(200us);
  std::thread stopper([&] {
    std::this_thread::sleep_for(150ms);
    burst.stop();
  });
  std::atomic<bool> burstWasRunning{true};
  std::chrono::steady_clock::time_point ranAt;
  EXPECT_TRUE(gated().runUngated(
      [&] {
        burstWasRunning = burst.running();
        ranAt = std::chrono::steady_clock::now();
      },
      10000ms, HostGatedWork::Quiet{20ms, 10000ms}));
  stopper.join();
  EXPECT_FALSE(burstWasRunning) << "the function ran in the middle of the launches";
  EXPECT_GE(ranAt - burst.lastEnter(), 19ms) << "it ran before the quiet interval had passed";
}

TEST(HostGatedWork, AQuietCallerGoesAheadOnceItsBoundHasPassed) {
  LaunchBurst burst(200us);  // never pauses for 500 ms
  const auto t0 = std::chrono::steady_clock::now();
  std::atomic<bool> burstWasRunning{false};
  EXPECT_TRUE(gated().runUngated([&] { burstWasRunning = burst.running(); }, 10000ms,
                                 HostGatedWork::Quiet{500ms, 50ms}));
  const auto waited = std::chrono::steady_clock::now() - t0;
  burst.stop();
  EXPECT_TRUE(burstWasRunning);
  EXPECT_GE(waited, 45ms);
  EXPECT_LT(waited, 5000ms);
}

TEST(HostGatedWork, AHurryDropsTheQuietInterval) {
  LaunchBurst burst(200us);  // never pauses for 500 ms
  std::atomic<bool> hurried{false}, ran{false};
  std::thread waiter([&] {
    std::this_thread::sleep_for(50ms);
    HostGatedWork::Hurry hurry;  // a caller now waits for what the function does
    hurried = true;
    const auto giveUp = std::chrono::steady_clock::now() + 3000ms;
    while (!ran && std::chrono::steady_clock::now() < giveUp) std::this_thread::sleep_for(1ms);
  });
  std::atomic<bool> ranInHurry{false};
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(gated().runUngated(
      [&] {
        ranInHurry = hurried.load();
        ran = true;
      },
      10000ms, HostGatedWork::Quiet{500ms, 60000ms}));
  const auto waited = std::chrono::steady_clock::now() - t0;
  burst.stop();
  waiter.join();
  EXPECT_TRUE(ranInHurry);
  EXPECT_LT(waited, 2500ms) << "it waited past the hurry";
}

namespace {

// One launch (enter() + leave()), marked done while it is between the two.
void launchOnce(std::atomic<bool>& launched) {
  gated().enter();
  launched = true;
  gated().leave();
}

}  // namespace

// The closer's request itself counts as activity: the call whose bind learned of a peer's free (and queued the close)
// launches right after, and must not find the unmap running.
TEST(HostGatedWork, AQuietCallerLeavesTheRequestingCallerTimeToLaunch) {
  std::this_thread::sleep_for(30ms);  // no launch for longer than the interval: quiet by launches alone
  std::atomic<bool> launched{false};
  std::thread caller([&] {
    std::this_thread::sleep_for(3ms);  // the requesting call goes on to its launch
    launchOnce(launched);
  });
  std::atomic<bool> ranAfterTheLaunch{false};
  EXPECT_TRUE(gated().runUngated([&] { ranAfterTheLaunch = launched.load(); }, 10000ms,
                                 HostGatedWork::Quiet{20ms, 10000ms}));
  caller.join();
  EXPECT_TRUE(ranAfterTheLaunch) << "it ran before the call that asked for it had launched";
}

// A gated moment counts as activity: a caller whose GPU work waited for a late peer resumes as that work completes and
// calls again at once.
TEST(HostGatedWork, AQuietCallerWaitsForTheCallerToResumeAfterGatedWork) {
  std::atomic<bool> busy{true};
  const uint64_t token = gated().addBusyProbe([&] { return busy.load(); });
  std::atomic<bool> launched{false};
  std::thread caller([&] {
    std::this_thread::sleep_for(40ms);  // longer than the interval: quiet by launches alone as the gate opens
    busy = false;                       // the GPU work that waited for the peer completed; the caller resumes
    std::this_thread::sleep_for(3ms);
    launchOnce(launched);
  });
  std::atomic<bool> ranAfterTheLaunch{false};
  EXPECT_TRUE(gated().runUngated([&] { ranAfterTheLaunch = launched.load(); }, 10000ms,
                                 HostGatedWork::Quiet{20ms, 10000ms}));
  caller.join();
  gated().removeBusyProbe(token);
  EXPECT_TRUE(ranAfterTheLaunch) << "it ran as the gate opened, before the resumed caller's launch";
}

// The bound counts from the request, time spent gated included: a peer late for longer than the bound does not hold a
// peer's freed memory until launches pause. The function runs at the first ungated moment after the bound.
TEST(HostGatedWork, AGateLongerThanTheBoundDoesNotPostponeTheClose) {
  std::atomic<bool> busy{true};
  const uint64_t token = gated().addBusyProbe([&] { return busy.load(); });
  LaunchBurst burst(200us);  // never pauses for the interval
  std::thread release([&] {
    std::this_thread::sleep_for(150ms);
    busy = false;
  });
  const auto t0 = std::chrono::steady_clock::now();
  std::atomic<bool> ranUngated{false};
  EXPECT_TRUE(gated().runUngated([&] { ranUngated = !busy.load(); }, 10000ms, HostGatedWork::Quiet{500ms, 60ms}));
  const auto waited = std::chrono::steady_clock::now() - t0;
  release.join();
  burst.stop();
  gated().removeBusyProbe(token);
  EXPECT_TRUE(ranUngated);
  EXPECT_GE(waited, 140ms);
  EXPECT_LT(waited, 195ms) << "the bound was counted from the gate's end, not from the request";
}
