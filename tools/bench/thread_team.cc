#include "thread_team.h"

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>

#include "host_clock.h"
#include "report.h"

namespace conccl::bench {
namespace {

// The per-iteration barrier of the team, which a failing thread can stop: then
// every waiting thread returns at once and no thread waits again (a plain
// std::barrier would leave the others waiting for the lost thread).
class TeamBarrier {
 public:
  explicit TeamBarrier(int threads) : threads_(threads) {}
  // Waits until every thread has arrived; false when the team was stopped.
  bool ArriveAndWait() {
    std::unique_lock<std::mutex> lock(mutex_);
    if (stopped_) return false;
    const long generation = generation_;
    if (++arrived_ == threads_) {
      arrived_ = 0;
      ++generation_;
      wake_.notify_all();
      return true;
    }
    wake_.wait(lock, [&] { return generation_ != generation || stopped_; });
    return !stopped_;
  }
  void Stop() {
    std::lock_guard<std::mutex> lock(mutex_);
    stopped_ = true;
    wake_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable wake_;
  const int threads_;
  int arrived_ = 0;
  long generation_ = 0;
  bool stopped_ = false;
};

}  // namespace

std::vector<int> ThreadRanks(int thread, int threads, int nranks) {
  const int per = nranks / threads;
  std::vector<int> ranks(per);
  for (int k = 0; k < per; ++k) ranks[k] = thread * per + k;
  return ranks;
}

TeamTiming TimeThreads(Backend &backend, int threads, const std::function<void(int thread)> &launch, int iters) {
  const int nranks = backend.NumRanks();
  TeamBarrier aligned(threads);
  std::mutex error_mutex;
  std::exception_ptr first_error;
  std::vector<std::vector<double>> seconds(threads);
  std::vector<double> host(threads, 0.0);

  auto body = [&](int t) {
    try {
      const std::vector<int> ranks = ThreadRanks(t, threads, nranks);
      std::unique_ptr<RankTimer> timer = backend.MakeRankTimer(ranks, iters);
      HostClock clock;
      for (int i = 0; i < iters; ++i) {
        if (!aligned.ArriveAndWait()) return;
        timer->Start(i);
        clock.Measure(static_cast<int>(ranks.size()), [&] { launch(t); });
        timer->Stop(i);
      }
      seconds[t] = timer->Finish();
      host[t] = ComputeStats(clock.samples()).p50_s;
    } catch (...) {
      {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!first_error) first_error = std::current_exception();
      }
      aligned.Stop();
    }
  };
  std::vector<std::thread> team;
  team.reserve(threads);
  for (int t = 0; t < threads; ++t) team.emplace_back(body, t);
  for (std::thread &th : team) th.join();
  if (first_error) std::rethrow_exception(first_error);

  TeamTiming timing;
  timing.seconds.assign(iters, 0.0);
  for (int t = 0; t < threads; ++t) {
    for (int i = 0; i < iters && i < static_cast<int>(seconds[t].size()); ++i) {
      timing.seconds[i] = std::max(timing.seconds[i], seconds[t][i]);
    }
    timing.host_s = std::max(timing.host_s, host[t]);
  }
  return timing;
}

}  // namespace conccl::bench
