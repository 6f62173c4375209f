// CUDA helpers of the GPU backends: checked calls, a device guard, and per-iteration timing with CUDA events
// (optionally of a loop captured in one CUDA graph that spans every rank's stream).
#ifndef CONCCL_TOOLS_BENCH_CUDA_TIMER_H_
#define CONCCL_TOOLS_BENCH_CUDA_TIMER_H_

#include <cuda_runtime.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend.h"

namespace conccl::bench {

void CudaCheck(cudaError_t err, const char* call, const char* file, int line);
#define BENCH_CUDA_CHECK(call) ::conccl::bench::CudaCheck((call), #call, __FILE__, __LINE__)

// Sets the current device for a scope and restores the previous one.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

// One non-blocking stream per rank, owned.
class RankStreams {
 public:
  explicit RankStreams(const std::vector<int>& devices);
  ~RankStreams();
  RankStreams(const RankStreams&) = delete;
  RankStreams& operator=(const RankStreams&) = delete;
  cudaStream_t operator[](int rank) const { return streams_[rank]; }
  const std::vector<int>& devices() const { return devices_; }
  void SynchronizeAll() const;

 private:
  std::vector<int> devices_;
  std::vector<cudaStream_t> streams_;
};

// Times `launch` (one collective on every rank's stream) per iteration: an event pair per rank and iteration,
// the slowest rank's elapsed time per iteration. With `graph`, the `iters` iterations are captured into one
// graph (rank 0's stream forks to the others, events are recorded as external event nodes) and launched once.
std::vector<double> TimeWithEvents(const RankStreams& streams, const std::function<void()>& launch, int iters,
                                   bool graph);

// Thread-per-rank mode (-t): an event pair per rank of `ranks` and iteration on those ranks' streams; Finish
// waits for those streams and returns the slowest of these ranks per iteration. Use it on one thread only;
// it makes the first rank's device current on that thread (as nccl-tests' threads do).
std::unique_ptr<RankTimer> MakeEventTimer(const RankStreams& streams, const std::vector<int>& ranks, int iters);

// True when some device appears more than once.
bool HasRepeats(const std::vector<int>& devices);

}  // namespace conccl::bench

#endif  // CONCCL_TOOLS_BENCH_CUDA_TIMER_H_
