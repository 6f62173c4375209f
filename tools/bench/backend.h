// The small interface every conccl-bench backend implements (conccl CUDA, conccl host, NCCL, NCCL-CE).
// NCCL-shaped: one communicator per rank, all ranks driven from this thread with collectives issued between
// GroupStart/GroupEnd, or (-t) one host thread per rank or per group of ranks (thread_team.h). No CUDA types,
// so the driver and its tests build without CUDA.
#ifndef CONCCL_TOOLS_BENCH_BACKEND_H_
#define CONCCL_TOOLS_BENCH_BACKEND_H_

#include <conccl/conccl.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "rank_timer.h"

// The collective kinds are the schedule layer's (sched/schedule.h); declared here without the header.
namespace conccl::sched {
enum class CollKind;
}  // namespace conccl::sched

namespace conccl::bench {

using CollKind = sched::CollKind;

// A failure of a backend call; the driver reports it and moves on to the next case or backend.
class BackendError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The SMs a backend occupies for one collective: `sms` (-1 when unknown) and how that number was found.
struct SmUsage {
  int sms = -1;              // -1: unknown
  bool upper_bound = false;  // `sms` is a configured maximum, not a measured count
  bool sm_path = false;      // a copy-engine backend fell back to SM kernels for this collective
  std::string note;
  // The call also copies between two buffers of one GPU (a rank's own block, ranks sharing a GPU). On our driver
  // such a copy runs as CUDA's own copy kernel on SMs (FACTS.md, probe 1), whose size CUDA does not say: `sms`
  // then counts it as at least one SM (the label gets a '+': "1+" = one SM or more).
  bool copy_kernels = false;
  size_t same_device_copy_bytes = 0;  // the most bytes any rank copies so
};

class Backend {
 public:
  virtual ~Backend() = default;
  Backend() = default;
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  virtual std::string Name() const = 0;
  virtual int NumRanks() const = 0;
  // True when several ranks share one GPU (same-device copies run on SMs, not on copy engines).
  virtual bool GpusShared() const { return false; }
  // Lines for the '#' header: devices, versions, configuration.
  virtual std::vector<std::string> Describe() const = 0;
  // Whether this backend implements the collective / type / op at all (else the row is skipped).
  virtual bool Supports(CollKind kind, concclDataType_t type, int op) const = 0;
  // `bytes`: the row's size (nccl-tests convention), for backends whose path depends on it.
  virtual SmUsage Sms(CollKind kind, size_t bytes) const = 0;

  // Memory of rank `rank` (device memory on the GPU backends, host memory on the host backend).
  virtual void* Alloc(int rank, size_t bytes) = 0;
  virtual void Free(int rank, void* ptr) = 0;
  virtual void CopyIn(int rank, void* dst, const void* src, size_t bytes) = 0;
  virtual void CopyOut(int rank, void* dst, const void* src, size_t bytes) = 0;
  // Called once before the timed iterations of a case with all buffers of that case, per rank (NCCL-CE
  // registers them as symmetric windows; the i-th buffers of all ranks have the same size);
  // `Release` is called after the case.
  virtual void Prepare(const std::vector<std::vector<void*>>& /*buffers_per_rank*/) {}
  virtual void Release() {}

  // Collectives of one rank; NCCL argument conventions, counts in elements.
  virtual void GroupStart() = 0;
  virtual void GroupEnd() = 0;
  virtual void AllGather(int rank, const void* send, void* recv, size_t sendcount, concclDataType_t type) = 0;
  virtual void ReduceScatter(int rank, const void* send, void* recv, size_t recvcount, concclDataType_t type,
                             concclRedOp_t op) = 0;
  virtual void AllReduce(int rank, const void* send, void* recv, size_t count, concclDataType_t type,
                         concclRedOp_t op) = 0;
  virtual void Broadcast(int rank, const void* send, void* recv, size_t count, concclDataType_t type, int root) = 0;
  virtual void Reduce(int rank, const void* send, void* recv, size_t count, concclDataType_t type, concclRedOp_t op,
                      int root) = 0;
  virtual void AllToAll(int rank, const void* send, void* recv, size_t count, concclDataType_t type) = 0;
  virtual void Gather(int rank, const void* send, void* recv, size_t sendcount, concclDataType_t type, int root) = 0;
  virtual void Scatter(int rank, const void* send, void* recv, size_t recvcount, concclDataType_t type, int root) = 0;
  virtual void Send(int rank, const void* send, size_t count, concclDataType_t type, int peer) = 0;
  virtual void Recv(int rank, void* recv, size_t count, concclDataType_t type, int peer) = 0;

  // Runs `launch` (which issues one collective on every rank) `iters` times and returns the time of each
  // iteration in seconds (GPU backends: CUDA events per rank, the slowest rank per iteration). With
  // `graph`, the loop is captured once in a CUDA graph per rank and replayed. Waits for completion.
  virtual std::vector<double> Time(const std::function<void()>& launch, int iters, bool graph) = 0;
  // Thread-per-rank mode (-t): a timer of `ranks` for `iters` iterations, made and used on the one thread that
  // drives those ranks (GPU backends: CUDA events on the ranks' streams). Default: wall clock, right for
  // backends whose calls return when complete.
  virtual std::unique_ptr<RankTimer> MakeRankTimer(const std::vector<int>& /*ranks*/, int iters) {
    return std::make_unique<WallClockTimer>(iters);
  }
};

}  // namespace conccl::bench

#endif  // CONCCL_TOOLS_BENCH_BACKEND_H_
