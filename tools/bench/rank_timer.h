// Per-iteration timing of the ranks one host thread drives (thread-per-rank
// mode, -t): the thread calls Start(i) before and Stop(i) after its calls of
// iteration i, then Finish() once. No CUDA types; the GPU backends implement it
// with CUDA events on their ranks' streams (cuda_timer.h).
#ifndef CONCCL_TOOLS_BENCH_RANK_TIMER_H_
#define CONCCL_TOOLS_BENCH_RANK_TIMER_H_

#include <chrono>
#include <vector>

namespace conccl::bench {

class RankTimer {
 public:
  virtual ~RankTimer() = default;
  RankTimer() = default;
  RankTimer(const RankTimer &) = delete;
  RankTimer &operator=(const RankTimer &) = delete;

  virtual void Start(int iter) = 0;
  virtual void Stop(int iter) = 0;
  // Waits for the ranks' work; seconds per iteration, the slowest of the
  // thread's ranks.
  virtual std::vector<double> Finish() = 0;
};

// Wall clock between Start and Stop: right for backends whose calls return when
// complete (host backend).
class WallClockTimer final : public RankTimer {
 public:
  explicit WallClockTimer(int iters) : starts_(iters), seconds_(iters, 0.0) {}
  void Start(int iter) override { starts_[iter] = std::chrono::steady_clock::now(); }
  void Stop(int iter) override {
    seconds_[iter] = std::chrono::duration<double>(std::chrono::steady_clock::now() - starts_[iter]).count();
  }
  std::vector<double> Finish() override { return seconds_; }

 private:
  std::vector<std::chrono::steady_clock::time_point> starts_;
  std::vector<double> seconds_;
};

}  // namespace conccl::bench

#endif  // CONCCL_TOOLS_BENCH_RANK_TIMER_H_
