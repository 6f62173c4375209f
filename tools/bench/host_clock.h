// Host enqueue time of collective calls (the `host_us` column): wall time spent
// inside one launch (a thread's calls, with GroupStart/End when it issues
// several ranks) divided by the ranks it issued, one sample per launch. Tells
// host cost apart from GPU time: a call that returns before the GPU finishes
// costs only this.
#ifndef CONCCL_TOOLS_BENCH_HOST_CLOCK_H_
#define CONCCL_TOOLS_BENCH_HOST_CLOCK_H_

#include <chrono>
#include <vector>

namespace conccl::bench {

class HostClock {
 public:
  template <class F>
  void Measure(int ranks, F &&launch) {
    const auto t0 = std::chrono::steady_clock::now();
    launch();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    samples_.push_back(ranks > 0 ? s / ranks : s);
  }
  const std::vector<double> &samples() const { return samples_; }
  void Clear() { samples_.clear(); }

 private:
  std::vector<double> samples_;
};

}  // namespace conccl::bench

#endif  // CONCCL_TOOLS_BENCH_HOST_CLOCK_H_
