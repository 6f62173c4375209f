// Thread-per-rank timing (-t, nccl-tests semantics): `threads` host threads,
// thread t drives ranks [t*g, (t+1)*g) with g = nranks / threads, each on its
// own streams. Every iteration starts with a barrier of all threads (aligned
// enqueue), then each thread brackets its launch with its RankTimer (CUDA
// events per rank on the GPU backends). An iteration's time is that of the
// slowest rank. No CUDA types: unit-tested on the CPU.
#ifndef CONCCL_TOOLS_BENCH_THREAD_TEAM_H_
#define CONCCL_TOOLS_BENCH_THREAD_TEAM_H_

#include <functional>
#include <vector>

#include "backend.h"

namespace conccl::bench {

struct TeamTiming {
  std::vector<double> seconds;  // per iteration: the slowest rank of all threads
  double host_s = 0;            // per-rank host time of a launch: median per thread, the
                                // largest of the threads
};

// The ranks thread `thread` of `threads` drives among `nranks`.
std::vector<int> ThreadRanks(int thread, int threads, int nranks);

// Runs `launch(thread)` `iters` times on each of `threads` threads. The first
// exception of any thread is rethrown after every thread has stopped (the
// others stop at their next barrier; a thread blocked inside a call stays there
// until the call returns, e.g. at the library's timeout).
TeamTiming TimeThreads(Backend &backend, int threads, const std::function<void(int thread)> &launch, int iters);

}  // namespace conccl::bench

#endif  // CONCCL_TOOLS_BENCH_THREAD_TEAM_H_
