// The GPUs conccl-tp-bench drives from one host thread: one rank per GPU, an NCCL and a conccl communicator over
// all of them (ncclCommInitAll / concclCommInitAll), and per rank a main stream (where every strategy starts and
// ends), a communication and a compute stream (the hand-split strategy), ordering events and a cuBLASLt GEMM.
// Waits are bounded (--timeout) and watch NCCL's asynchronous errors, so a stuck collective ends in an error,
// never a hang.
#pragma once

#include <conccl/conccl.h>
#include <nccl.h>

#include <conccl/ops/detail/row_major_gemm.hpp>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "exec/cuda/raii.h"

namespace conccl::tp {

// A wait for the GPUs that took longer than --timeout. The GPUs may still be running: the tool reports it and
// leaves without freeing anything (freeing would wait for them).
class TimeoutError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct RankResources {
  int device = -1;
  ncclComm_t nccl = nullptr;
  concclComm_t conccl = nullptr;
  exec::Stream main, comm, compute;
  exec::Event fork, join, done;     // ordering: main -> comm/compute, back, and into rank 0's stream for timing
  std::vector<exec::Event> pieces;  // ordering: one per shard / block (the split strategy), nranks of them
  // The same cuBLASLt GEMM (and plan cache) as conccl's fused ops use, so that the strategies differ only in how
  // the GEMM and the collective are arranged, not in the GEMM.
  std::unique_ptr<ops::detail::RowMajorGemm> gemm;
};

// C[m, n] = A[m, k] @ B[k, n], bf16 row-major and contiguous, fp32 accumulation, on `stream` of rank `rank` (whose
// device must be current). Throws conccl::Error when cuBLASLt has no algorithm or the launch fails.
void enqueueGemm(RankResources& rank, const void* a, const void* b, void* c, int64_t m, int64_t n, int64_t k,
                 cudaStream_t stream);

class TpWorld {
 public:
  // engine: the conccl communicators' config.engine (concclEngineCopy beside a GEMM).
  TpWorld(const std::vector<int>& devices, concclEngine_t engine, double timeoutS);
  ~TpWorld();  // destroys the communicators, or aborts them after a failure (markBroken)
  TpWorld(const TpWorld&) = delete;
  TpWorld& operator=(const TpWorld&) = delete;

  int size() const { return int(ranks_.size()); }
  RankResources& rank(int r) { return ranks_[size_t(r)]; }
  std::string deviceName() const { return deviceName_; }

  // Waits for every rank's streams, at most timeoutS; throws TimeoutError past it, conccl::Error on a CUDA error
  // or an asynchronous NCCL error.
  void synchronize();

  // Runs `launch` (work on every rank, ending on each rank's main stream) warmup times, then `iters` timed times:
  // each after all GPUs have finished the previous one, between two events on rank 0's main stream, the second
  // after rank 0's stream has waited for every rank's main stream. Milliseconds per iteration.
  std::vector<double> time(const std::function<void()>& launch, int warmup, int iters);

  // After an error that may have left a collective half-launched: the destructor aborts instead of destroying.
  void markBroken() { broken_ = true; }

 private:
  std::vector<RankResources> ranks_;
  std::string deviceName_;
  double timeoutS_;
  bool broken_ = false;
  exec::Event start_, stop_;  // timing, on rank 0's device
};

}  // namespace conccl::tp
