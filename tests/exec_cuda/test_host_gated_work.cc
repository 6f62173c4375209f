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
