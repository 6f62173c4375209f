// The copy-engine path of the CUDA executor: one rank's schedule program enqueued on the caller's stream M and
// the rank's copy lanes, as the execution model of src/sched/schedule.h asks (docs/cuda-executor.md, "launch()").
//
//   Copy   -> cudaMemcpyAsync on its lane (or M)           Signal -> a 32-bit stream write into the peer's flag
//   Wait   -> stream wait for 1, then write 0 (on M)       Reduce -> the reduction kernel on M
//
// Lanes are forked off M with one event when M moved since the lane last synchronised, and joined back at the
// end; consecutive memory operations on M share one cuStreamBatchMemOp, and consecutive copies on M that continue each
// other in the same two buffers (a transfer the builder cut into pieces for lanes, run on M alone) are one copy.
// Everything is capturable.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "exec/cuda/rank_state.h"
#include "exec/executor.h"
#include "sched/schedule.h"

namespace conccl::exec {

struct CopyEngineSetup {
  cudaStream_t main = nullptr;  // the caller's stream M
  bool eager = true;            // false while M is being captured: no done marker
  bool singleStream = false;    // every op on M (small programs: lanes would only add fork/join calls)
  int reduceCtas = 0;           // config.reduceCtas (0: auto)
  int smBudget = 1;             // config.smBudget: no reduction gets more CTAs (exec/call_path.h, reductionCtas)
  int kernelPriority = 0;       // launch priority of the reduction kernel (0: the stream's)
  // concclAllGatherChunked: [block] -> event recorded on M once the block is in place (null entries skipped), or
  // null: at the program's Ready op tagged with the block (the builder marks where it has landed and the checker
  // proves it), else at the end.
  const std::vector<cudaEvent_t>* chunkEvents = nullptr;
  // concclReduceScatterChunked: when the pieces of this rank's sendbuff become readable, or null. Every op that reads
  // a piece (a Copy from it, a Reduce over it) first makes its stream wait for the piece's event, once per stream.
  const InputPieces* inputPieces = nullptr;
  int slots = 0;                // flags per rank
  const std::vector<CUdeviceptr>* flagTable = nullptr;  // [rank] -> flags as the GPUs address them
};

class CopyEngineProgram {
 public:
  CopyEngineProgram(RankState& state, const CopyEngineSetup& setup, const LocationResolver& resolve);
  // Enqueues every op of `program`, then the program end (lane joins, the done marker).
  void enqueue(const sched::RankProgram& program);

 private:
  void copy(const sched::Copy& op);
  // Whether `op` (a copy on M) continues the pending copy (sched::copyContinues).
  bool continuesPendingCopy(const sched::Copy& op) const;
  void flushCopy();  // issues the pending copy on M, if any
  void signal(const sched::Signal& op);
  void wait(const sched::Wait& op);
  void reduce(const sched::Reduce& op);
  void ready(const sched::Ready& op);
  bool recordsChunk(const sched::Ready& op) const;  // the mark records a chunk event (else it is nothing)
  void finish();
  // concclAllGatherChunked: records block `block`'s event on M (once).
  void recordChunk(size_t block);
  // concclReduceScatterChunked: makes `stream` (stream index: 0 = M, 1 + l = lane l) wait for every piece of this
  // rank's sendbuff that [loc, loc + bytes) overlaps and that it has not waited for yet in this call.
  void awaitInput(const sched::Location& loc, size_t bytes, cudaStream_t stream, size_t streamIndex);

  bool onMain(int lane) const { return lane == sched::kMainStream || setup_.singleStream; }
  // The stream an op of `lane` runs on; forks the lane off M first when M moved since the lane last waited on it.
  cudaStream_t streamFor(int lane);
  CUdeviceptr flagAddress(int rank, int slot) const;
  // Whether the caller's capture this program is enqueued into has been invalidated (false when eager).
  bool captureInvalidated() const;
  [[noreturn]] void throwCaptureInvalidated(const std::string& where) const;
  void flushBatch();

  RankState& s_;
  const CopyEngineSetup& setup_;
  const LocationResolver& resolve_;
  int64_t mainOps_ = 0;          // ops put on M so far in this call
  int64_t forkRecordedAt_ = -1;  // mainOps_ when the fork event was last recorded
  std::vector<bool> chunkRecorded_;  // [block]: its chunk event was recorded in this call
  std::vector<std::vector<bool>> inputAwaited_;  // [stream index][piece]: that stream waited for the piece's event
  // A copy on M not issued yet, so that the next one can extend it (no input pieces: those are awaited per copy).
  std::optional<sched::Copy> pendingCopy_;
};

}  // namespace conccl::exec
