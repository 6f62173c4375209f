// Thread-per-rank timing (tools/bench/thread_team.h): ranks per thread, the
// per-iteration barrier, the slowest rank per iteration, the host time, and
// that a failing thread stops the team instead of deadlocking it.
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <thread>

#include "thread_team.h"

namespace conccl::bench {
namespace {

// A timer that reports `base + iter` microseconds for every iteration (base:
// the thread's first rank).
class ScriptedTimer final : public RankTimer {
 public:
  ScriptedTimer(int base, int iters) : base_(base), iters_(iters) {}
  void Start(int) override {}
  void Stop(int) override {}
  std::vector<double> Finish() override {
    std::vector<double> s(iters_);
    for (int i = 0; i < iters_; ++i) s[i] = (base_ + i) * 1e-6;
    return s;
  }

 private:
  int base_, iters_;
};

// Only what TimeThreads uses: the rank count and the timers; the collectives
// are never called.
class TimerOnlyBackend : public Backend {
 public:
  explicit TimerOnlyBackend(int nranks) : nranks_(nranks) {}
  std::string Name() const override { return "timer-only"; }
  int NumRanks() const override { return nranks_; }
  std::vector<std::string> Describe() const override { return {}; }
  bool Supports(CollKind, concclDataType_t, int) const override { return true; }
  SmUsage Sms(CollKind, size_t) const override { return {}; }
  void *Alloc(int, size_t) override { return nullptr; }
  void Free(int, void *) override {}
  void CopyIn(int, void *, const void *, size_t) override {}
  void CopyOut(int, void *, const void *, size_t) override {}
  void GroupStart() override {}
  void GroupEnd() override {}
  void AllGather(int, const void *, void *, size_t, concclDataType_t) override {}
  void ReduceScatter(int, const void *, void *, size_t, concclDataType_t, concclRedOp_t) override {}
  void AllReduce(int, const void *, void *, size_t, concclDataType_t, concclRedOp_t) override {}
  void Broadcast(int, const void *, void *, size_t, concclDataType_t, int) override {}
  void Reduce(int, const void *, void *, size_t, concclDataType_t, concclRedOp_t, int) override {}
  void AllToAll(int, const void *, void *, size_t, concclDataType_t) override {}
  void Gather(int, const void *, void *, size_t, concclDataType_t, int) override {}
  void Scatter(int, const void *, void *, size_t, concclDataType_t, int) override {}
  void Send(int, const void *, size_t, concclDataType_t, int) override {}
  void Recv(int, void *, size_t, concclDataType_t, int) override {}
  std::vector<double> Time(const std::function<void()> &, int iters, bool) override {
    return std::vector<double>(iters);
  }
  std::unique_ptr<RankTimer> MakeRankTimer(const std::vector<int> &ranks, int iters) override {
    return std::make_unique<ScriptedTimer>(ranks.front(), iters);
  }

 private:
  int nranks_;
};

TEST(BenchThreadTeam, RanksPerThread) {
  EXPECT_EQ(ThreadRanks(0, 2, 2), (std::vector<int>{0}));
  EXPECT_EQ(ThreadRanks(1, 2, 2), (std::vector<int>{1}));
  EXPECT_EQ(ThreadRanks(1, 2, 4), (std::vector<int>{2, 3}));
  EXPECT_EQ(ThreadRanks(2, 3, 6), (std::vector<int>{4, 5}));
}

TEST(BenchThreadTeam, SlowestRankPerIterationAndBarrier) {
  TimerOnlyBackend backend(4);
  const int threads = 2, iters = 50;
  std::atomic<int> launches{0};
  std::atomic<bool> overtaken{false};
  std::vector<int> seen(threads, 0);
  const TeamTiming t = TimeThreads(
      backend, threads,
      [&](int thread) {
        // The barrier: when a thread starts iteration i, every thread has
        // finished iteration i - 1.
        if (launches.load() < seen[thread] * threads) overtaken = true;
        ++seen[thread];
        if (thread == 1) std::this_thread::yield();
        ++launches;
      },
      iters);
  EXPECT_FALSE(overtaken);
  EXPECT_EQ(launches.load(), threads * iters);
  ASSERT_EQ(t.seconds.size(), static_cast<size_t>(iters));
  // Thread 1's first rank is 2: its timer reports 2 + i us, the larger of the
  // two.
  for (int i = 0; i < iters; ++i) EXPECT_DOUBLE_EQ(t.seconds[i], (2 + i) * 1e-6);
  EXPECT_GE(t.host_s, 0.0);
}

TEST(BenchThreadTeam, HostTimeIsPerRankMedianOfTheSlowestThread) {
  TimerOnlyBackend backend(2);
  const TeamTiming t = TimeThreads(
      backend, 2,
      [](int thread) {
        if (thread == 1) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      },
      5);
  EXPECT_GE(t.host_s, 2e-3);
  EXPECT_LT(t.host_s, 1.0);
}

TEST(BenchThreadTeam, FailingThreadStopsTheTeam) {
  TimerOnlyBackend backend(3);
  std::atomic<int> launches{0};
  EXPECT_THROW(TimeThreads(
                   backend, 3,
                   [&](int thread) {
                     ++launches;
                     if (thread == 2 && launches.load() > 4) throw std::runtime_error("boom");
                   },
                   1000),
               std::runtime_error);
  EXPECT_LT(launches.load(), 3000);
}

}  // namespace
}  // namespace conccl::bench
