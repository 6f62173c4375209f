// The communicator's GPU watchdog (src/core/gpu_watchdog.h) against fake launch / completion counters: it
// reports once, after `timeout` (+ one polling period) without progress, naming the oldest uncompleted call and every stalled rank; it
// never reports a rank that keeps completing work, an idle rank, or captured launches.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "core/gpu_watchdog.h"

namespace conccl {
namespace {

using namespace std::chrono_literals;
using Clock = GpuWatchdog::Clock;

// Counters as the GPU would write them (atomics: the watchdog thread reads them while the test writes).
struct FakeGpu {
  std::vector<std::atomic<uint32_t>> launched, completed;
  std::vector<std::atomic<bool>> readable;
  explicit FakeGpu(int n)
      : launched(static_cast<size_t>(n)), completed(static_cast<size_t>(n)), readable(static_cast<size_t>(n)) {
    for (auto& r : readable) r = true;
  }
  GpuWatchdog::Progress progress() {
    return [this](int r, uint32_t* l, uint32_t* c) {
      if (!readable[static_cast<size_t>(r)]) return false;
      *l = launched[static_cast<size_t>(r)];
      *c = completed[static_cast<size_t>(r)];
      return true;
    };
  }
  void launch(GpuWatchdog& w, int r, const std::string& what) {
    ++launched[static_cast<size_t>(r)];
    w.launched(r, what);
  }
};

TEST(GpuWatchdog, ReportsAStalledCallOnceNamingItAndTheRanks) {
  FakeGpu gpu(3);
  GpuWatchdog w(3, 1000ms, gpu.progress(), [](const std::string&) {}, /*startThread=*/false);
  const auto t0 = Clock::now();
  for (int r = 0; r < 3; ++r) gpu.launch(w, r, "concclAllReduce #0");
  for (int r = 0; r < 3; ++r) gpu.completed[static_cast<size_t>(r)] = 1;
  EXPECT_FALSE(w.poll(t0));
  for (int r = 0; r < 3; ++r) gpu.launch(w, r, "concclAllReduce #1");
  gpu.completed[2] = 2;  // rank 2 finished #1; ranks 0 and 1 never do
  EXPECT_FALSE(w.poll(t0 + 10ms));    // first sight of the pending work
  EXPECT_FALSE(w.poll(t0 + 900ms));   // not yet a timeout
  EXPECT_FALSE(w.poll(t0 + 1050ms));  // within the grace of one polling period (100 ms)
  auto report = w.poll(t0 + 1111ms);
  ASSERT_TRUE(report);
  EXPECT_NE(report->find("concclAllReduce #1"), std::string::npos) << *report;
  EXPECT_NE(report->find("rank 0"), std::string::npos) << *report;
  EXPECT_NE(report->find("rank 1"), std::string::npos) << *report;
  EXPECT_EQ(report->find("rank 2"), std::string::npos) << *report;
  EXPECT_NE(report->find("1000 ms"), std::string::npos) << *report;
  EXPECT_FALSE(w.poll(t0 + 5000ms));  // once
}

TEST(GpuWatchdog, ProgressResetsTheClock) {
  FakeGpu gpu(1);
  GpuWatchdog w(1, 100ms, gpu.progress(), [](const std::string&) {}, false);
  const auto t0 = Clock::now();
  for (int i = 0; i < 5; ++i) gpu.launch(w, 0, "concclAllGather #" + std::to_string(i));
  EXPECT_FALSE(w.poll(t0));
  for (int step = 1; step <= 4; ++step) {
    gpu.completed[0] = static_cast<uint32_t>(step);  // one call completes every 90 ms
    EXPECT_FALSE(w.poll(t0 + step * 90ms)) << step;
  }
  EXPECT_FALSE(w.poll(t0 + 4 * 90ms + 100ms));  // timeout, but not yet the grace (12 ms)
  auto report = w.poll(t0 + 4 * 90ms + 113ms);
  ASSERT_TRUE(report);
  EXPECT_NE(report->find("concclAllGather #4"), std::string::npos) << *report;  // the oldest not completed
}

TEST(GpuWatchdog, IdleBusyOrCapturedRanksAreNotReported) {
  FakeGpu gpu(2);
  GpuWatchdog w(2, 10ms, gpu.progress(), [](const std::string&) {}, false);
  const auto t0 = Clock::now();
  EXPECT_FALSE(w.poll(t0));
  EXPECT_FALSE(w.poll(t0 + 1s));  // idle
  w.launched(0, "captured");      // a captured launch does not move the count
  EXPECT_FALSE(w.poll(t0 + 2s));
  gpu.launch(w, 1, "concclBroadcast #0");
  gpu.readable[1] = false;  // busy: skipped
  EXPECT_FALSE(w.poll(t0 + 3s));
  EXPECT_FALSE(w.poll(t0 + 4s));
}

TEST(GpuWatchdog, CountersThatWrapAreHandled) {
  FakeGpu gpu(1);
  gpu.launched[0] = 0xfffffffeu;
  gpu.completed[0] = 0xfffffffeu;
  GpuWatchdog w(1, 10ms, gpu.progress(), [](const std::string&) {}, false);
  const auto t0 = Clock::now();
  gpu.launch(w, 0, "a");
  gpu.launch(w, 0, "b");
  gpu.launch(w, 0, "c");  // launched wraps to 1
  gpu.completed[0] = 0;   // a and b done
  EXPECT_FALSE(w.poll(t0));
  auto report = w.poll(t0 + 20ms);
  ASSERT_TRUE(report);
  EXPECT_NE(report->find("of c "), std::string::npos) << *report;
}

TEST(GpuWatchdog, TheThreadReportsAndStops) {
  FakeGpu gpu(1);
  std::atomic<int> reports{0};
  std::string text;
  {
    GpuWatchdog w(1, 20ms, gpu.progress(), [&](const std::string& r) {
      text = r;
      ++reports;
    });
    gpu.launch(w, 0, "concclReduceScatter #7");
    const auto deadline = Clock::now() + 5s;
    while (reports == 0 && Clock::now() < deadline) std::this_thread::sleep_for(1ms);
    std::this_thread::sleep_for(50ms);
  }  // destructor stops the thread
  EXPECT_EQ(reports.load(), 1);
  EXPECT_NE(text.find("concclReduceScatter #7"), std::string::npos) << text;
}

TEST(GpuWatchdog, AfterAFailureTheFlagsAreReopenedUntilTheWorkDrains) {
  // A pipelined program waits on the same flag many times: one opening after a failure released one wait only.
  FakeGpu gpu(1);
  std::atomic<bool> failed{false};
  std::atomic<int> reopens{0};
  {
    GpuWatchdog w(
        1, 2000ms, gpu.progress(), [](const std::string&) {}, /*startThread=*/true, /*checkPeers=*/{},
        [&] {
          if (!failed) return false;
          // Each opening lets the fake program pass one more of its 20 waits.
          if (++reopens >= 20) gpu.completed[0] = gpu.launched[0].load();
          return true;
        });
    gpu.launch(w, 0, "concclAllReduce #3");
    std::this_thread::sleep_for(300ms);
    EXPECT_EQ(reopens.load(), 0) << "nothing failed: the flags are left alone";
    failed = true;  // e.g. a peer process was found dead
    const auto deadline = Clock::now() + 5s;
    while (gpu.completed[0] != gpu.launched[0] && Clock::now() < deadline) std::this_thread::sleep_for(1ms);
    EXPECT_EQ(gpu.completed[0].load(), gpu.launched[0].load()) << "reopened " << reopens.load() << " times";
    const int afterDrain = reopens.load();
    std::this_thread::sleep_for(300ms);
    EXPECT_EQ(reopens.load(), afterDrain) << "no work pending: no more openings";
  }
}

// A captured call's replays are the caller's launches: the counters never show them, so once a call was captured
// the peers are checked while idle too, and after a failure the flags are re-opened for the timeout.
TEST(GpuWatchdog, AfterACaptureAKilledPeerIsFoundWhileNothingIsPending) {
  FakeGpu gpu(1);
  std::atomic<int> checks{0};
  std::atomic<bool> peerDead{false};
  std::atomic<int> reopens{0};
  std::atomic<bool> failed{false};
  {
    GpuWatchdog w(
        1, 200ms, gpu.progress(), [](const std::string&) {}, /*startThread=*/true,
        [&] {
          ++checks;
          if (!peerDead) return false;
          failed = true;  // what ProcessClique's check does: fail the communicator
          return true;
        },
        [&] {
          if (!failed) return false;
          ++reopens;
          return true;
        });
    std::this_thread::sleep_for(150ms);
    EXPECT_EQ(checks.load(), 0) << "nothing pending and nothing captured: no look at the peers";
    w.watchCapturedWork();
    const auto deadline = Clock::now() + 5s;
    while (checks == 0 && Clock::now() < deadline) std::this_thread::sleep_for(1ms);
    EXPECT_GT(checks.load(), 0) << "after a capture the peers are checked while idle";
    peerDead = true;
    const auto found = Clock::now();
    while (!failed && Clock::now() < deadline) std::this_thread::sleep_for(1ms);
    ASSERT_TRUE(failed.load()) << "the dead peer was not found";
    EXPECT_LT(Clock::now() - found, 1s);
    while (reopens == 0 && Clock::now() < deadline) std::this_thread::sleep_for(1ms);
    EXPECT_GT(reopens.load(), 0) << "a replay may wait for the dead peer: its flags are re-opened";
    const int checksAfter = checks.load();
    std::this_thread::sleep_for(500ms);  // well past the 200 ms timeout
    const int reopensAfterTimeout = reopens.load();
    std::this_thread::sleep_for(200ms);
    EXPECT_EQ(reopens.load(), reopensAfterTimeout) << "the re-opening is bounded by the timeout";
    EXPECT_EQ(checks.load(), checksAfter) << "reported once: the peers are not checked again";
  }
}


TEST(GpuWatchdog, HousekeepingRunsEveryPeriodUntilAReport) {
  // The communicator's background chores (ProcessClique::housekeeping: freed exports swept) run while the GPU is
  // idle too, about every kHousekeepingPeriod, and stop once the watchdog has reported.
  FakeGpu gpu(1);
  std::atomic<int> chores{0}, reports{0};
  {
    GpuWatchdog w(1, 300ms, gpu.progress(), [&](const std::string&) { ++reports; }, /*startThread=*/true, {}, {},
                  [&] { ++chores; });
    std::this_thread::sleep_for(GpuWatchdog::kHousekeepingPeriod * 5);
    EXPECT_GE(chores.load(), 2) << "idle: housekeeping still runs";
    EXPECT_LE(chores.load(), 6) << "not more often than its period";
    gpu.launch(w, 0, "concclAllGather #3");  // never completes: a report after 300 ms
    const auto deadline = Clock::now() + 5s;
    while (reports == 0 && Clock::now() < deadline) std::this_thread::sleep_for(1ms);
    ASSERT_EQ(reports.load(), 1);
    const int atReport = chores.load();
    std::this_thread::sleep_for(GpuWatchdog::kHousekeepingPeriod * 4);
    EXPECT_EQ(chores.load(), atReport) << "out of service: no more chores";
  }
}

}  // namespace
}  // namespace conccl
