// The interface between the communicator (src/core) and the executors (src/exec/host, src/exec/cuda).
// Executors decide *how* a schedule's ops run, never *what* moves (that is src/sched's job).
#pragma once

#include <conccl/conccl.h>

#include <memory>
#include <vector>

#include "core/config.h"
#include "sched/schedule.h"

namespace conccl::exec {

// The pointers of one call, for every rank of the clique.
struct CallBinding {
  // [rank][buffer index] -> address (nullptr where the rank does not use that buffer). Indices as in
  // sched::bufferBytes(call, rank).
  std::vector<std::vector<void*>> buffers;
  // [rank] -> the stream the rank called with (host backend: null).
  std::vector<cudaStream_t> streams;
};

// One executor serves every rank of a clique (all in this process).
class Executor {
 public:
  virtual ~Executor() = default;

  // Options the schedule builders must use for this executor (scratch budget, lanes, depth). Stable for
  // the executor's life: flags and scratch are sized from them once.
  virtual sched::BuildOptions buildOptions() const = 0;

  // Checks that `ptr` (`bytes` long, bytes > 0) can be used by `rank` with this backend: e.g. device memory
  // of the rank's GPU on CUDA. Throws Error(concclInvalidArgument) naming `what` otherwise.
  virtual void checkBuffer(int rank, const void* ptr, size_t bytes, const char* what) const = 0;

  // Runs (host) or enqueues on binding.streams[rank] (CUDA) rank `rank`'s program. Called exactly once per
  // rank per call, possibly concurrently from one thread per rank, in the same call order on every rank.
  // Never blocks longer than the configured timeout; throws conccl::Error on failure.
  virtual void launch(const sched::Schedule& schedule, const CallBinding& binding, int rank) = 0;

  // Blocks until all work launched for `rank` has finished (used by destroy). Bounded by the timeout.
  virtual void synchronize(int rank) = 0;

  // Makes every current and future wait fail promptly (concclCommAbort, or a peer's fatal error).
  virtual void cancel() = 0;

  // Frees `rank`'s resources (called by destroy/abort of that rank; the executor itself goes with the
  // last rank).
  virtual void releaseRank(int rank) = 0;
};

std::unique_ptr<Executor> makeHostExecutor(int nranks, const Config& config);

// True when this build has the CUDA executor and at least one CUDA device is visible.
bool cudaAvailable();
// Number of visible CUDA devices (0 without CUDA).
int cudaDeviceCount();
// Throws Error(concclNotSupported) when built without CUDA.
std::unique_ptr<Executor> makeCudaExecutor(const std::vector<int>& devices, const Config& config);

}  // namespace conccl::exec
