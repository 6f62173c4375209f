// See copy_engine_program.h.
#include "exec/cuda/copy_engine_program.h"

#include <algorithm>
#include <string>
#include <variant>

#include "base/error.h"
#include "exec/call_path.h"
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/driver_api.h"
#include "base/types.h"
#include "exec/cuda/reduce_kernel.h"
#include "sched/checker.h"

namespace conccl::exec {
namespace {

// Operations per cuStreamBatchMemOp call (the driver bounds the count; 256 is the documented maximum).
constexpr size_t kMaxBatchMemOps = 128;

CUstreamBatchMemOpParams writeOp(CUdeviceptr address, uint32_t value) {
  CUstreamBatchMemOpParams op{};
  op.writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
  op.writeValue.address = address;
  op.writeValue.value = value;
  // The default (not NO_MEMORY_BARRIER): the stream's earlier writes are visible before the flag is.
  op.writeValue.flags = CU_STREAM_WRITE_VALUE_DEFAULT;
  return op;
}

CUstreamBatchMemOpParams waitOp(CUdeviceptr address, uint32_t value) {
  CUstreamBatchMemOpParams op{};
  op.waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
  op.waitValue.address = address;
  op.waitValue.value = value;
  op.waitValue.flags = CU_STREAM_WAIT_VALUE_GEQ;
  return op;
}

}  // namespace

CopyEngineProgram::CopyEngineProgram(RankState& state, const CopyEngineSetup& setup, const LocationResolver& resolve)
    : s_(state), setup_(setup), resolve_(resolve) {
  std::fill(s_.laneSyncedAt.begin(), s_.laneSyncedAt.end(), -1);
  std::fill(s_.laneUsed.begin(), s_.laneUsed.end(), false);
  s_.pendingWaits.clear();
}

bool CopyEngineProgram::captureInvalidated() const {
  // Under a caller's capture (not eager): an op that breaks the capture is named by the caller of this, rather than
  // reported later as an opaque CUDA_ERROR_STREAM_CAPTURE_INVALIDATED by whichever call comes next.
  if (setup_.eager) return false;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(setup_.main, &status) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return status == cudaStreamCaptureStatusInvalidated;
}

void CopyEngineProgram::throwCaptureInvalidated(const std::string& where) const {
  CONCCL_THROW(concclUnhandledCudaError, "the caller's graph capture was invalidated " + where);
}

void CopyEngineProgram::enqueue(const sched::RankProgram& program) {
  if (setup_.chunkEvents != nullptr) chunkRecorded_.assign(setup_.chunkEvents->size(), false);
  if (captureInvalidated()) throwCaptureInvalidated("before the call's program was enqueued");
  for (size_t index = 0; index < program.ops.size(); ++index) {
    const sched::Op& op = program.ops[index];
    // Consecutive memory operations on M (Waits, and Signals that run on M) are enqueued together: one
    // cuStreamBatchMemOp, executed in order. The batch is flushed before any other op, so the ordering rules of
    // the execution model are unchanged; only the number of CUDA calls drops (each costs ~3-4 us in our VM).
    const auto* signalOp = std::get_if<sched::Signal>(&op);
    const auto* mark = std::get_if<sched::Ready>(&op);
    const bool batched = std::holds_alternative<sched::Wait>(op) || (signalOp != nullptr && onMain(signalOp->lane));
    // A mark is nothing unless the caller asked for chunk events (an AllGather's early program on 4 ranks has three,
    // which split its signals and waits into three batches).
    const bool nothing = mark != nullptr && !recordsChunk(*mark);
    // A pending copy goes before anything else is enqueued, unless this op is a copy that extends it.
    const auto* copyOp = std::get_if<sched::Copy>(&op);
    if (!nothing && !(copyOp != nullptr && continuesPendingCopy(*copyOp))) flushCopy();
    if (!batched && !nothing) flushBatch();
    if (copyOp != nullptr) {
      copy(*copyOp);
    } else if (signalOp != nullptr) {
      signal(*signalOp);
    } else if (const auto* w = std::get_if<sched::Wait>(&op)) {
      wait(*w);
    } else if (const auto* r = std::get_if<sched::Reduce>(&op)) {
      reduce(*r);
    } else if (mark != nullptr) {
      ready(*mark);
    }
    if (captureInvalidated()) {
      throwCaptureInvalidated("at op " + std::to_string(index) + " of " + std::to_string(program.ops.size()) + " (" +
                              sched::describeOp(op) + ")");
    }
  }
  finish();
  if (captureInvalidated()) throwCaptureInvalidated("at the end of the call's program");
}

cudaStream_t CopyEngineProgram::streamFor(int lane) {
  if (onMain(lane)) {
    ++mainOps_;
    return setup_.main;
  }
  CONCCL_ASSERT(lane >= 0 && lane < static_cast<int>(s_.lanes.size()));
  const size_t l = static_cast<size_t>(lane);
  // laneSyncedAt starts at -1, so the first op of each lane in a call forks the lane off M: that is the
  // "program start" rule, and under capture it is what pulls the lane into the caller's graph.
  if (s_.laneSyncedAt[l] != mainOps_) {
    if (forkRecordedAt_ != mainOps_) {
      CUDA_CHECK(cudaEventRecord(s_.forkEvent.get(), setup_.main));
      forkRecordedAt_ = mainOps_;
    }
    CUDA_CHECK(cudaStreamWaitEvent(s_.lanes[l].get(), s_.forkEvent.get(), 0));
    s_.laneSyncedAt[l] = mainOps_;
  }
  s_.laneUsed[l] = true;
  return s_.lanes[l].get();
}

CUdeviceptr CopyEngineProgram::flagAddress(int rank, int slot) const {
  CONCCL_ASSERT(slot >= 0 && slot < setup_.slots);
  return (*setup_.flagTable)[static_cast<size_t>(rank)] + sizeof(uint32_t) * static_cast<size_t>(slot);
}

void CopyEngineProgram::flushBatch() {
  std::vector<CUstreamBatchMemOpParams>& batch = s_.pendingWaits;
  if (batch.empty()) return;
  streamFor(sched::kMainStream);
  const DriverApi& cu = driverApi();
  for (size_t first = 0; first < batch.size(); first += kMaxBatchMemOps) {
    const auto count = static_cast<unsigned int>(std::min(kMaxBatchMemOps, batch.size() - first));
    CU_CHECK(cu.streamBatchMemOp(reinterpret_cast<CUstream>(setup_.main), count, batch.data() + first, 0));
  }
  batch.clear();
}

bool CopyEngineProgram::continuesPendingCopy(const sched::Copy& op) const {
  return pendingCopy_ && onMain(op.lane) && sched::copyContinues(*pendingCopy_, op);
}

void CopyEngineProgram::flushCopy() {
  if (!pendingCopy_) return;
  const sched::Copy p = *pendingCopy_;
  pendingCopy_.reset();
  CUDA_CHECK(cudaMemcpyAsync(resolve_(p.dst), resolve_(p.src), p.bytes, cudaMemcpyDefault, streamFor(p.lane)));
}

void CopyEngineProgram::copy(const sched::Copy& op) {
  if (op.bytes == 0) return;
  const bool hasPieces = setup_.inputPieces != nullptr && !setup_.inputPieces->events.empty();
  if (onMain(op.lane) && !hasPieces) {
    // Held back so that the next copy can extend it (a graph node or CUDA call fewer). enqueue() issued any pending
    // copy this one does not continue, and issues this one before any other op.
    if (pendingCopy_) {
      pendingCopy_->bytes += op.bytes;
    } else {
      pendingCopy_ = op;
    }
    return;
  }
  char* dst = resolve_(op.dst);
  const char* src = resolve_(op.src);
  cudaStream_t stream = streamFor(op.lane);
  awaitInput(op.src, op.bytes, stream, onMain(op.lane) ? 0 : 1 + static_cast<size_t>(op.lane));
  CUDA_CHECK(cudaMemcpyAsync(dst, src, op.bytes, cudaMemcpyDefault, stream));
}

void CopyEngineProgram::signal(const sched::Signal& op) {
  CONCCL_ASSERT(op.peer >= 0 && op.peer < static_cast<int>(setup_.flagTable->size()));
  const CUdeviceptr flag = flagAddress(op.peer, op.slot);
  if (onMain(op.lane)) {
    s_.pendingWaits.push_back(writeOp(flag, 1));
    return;
  }
  CU_CHECK(driverApi().streamWriteValue32(reinterpret_cast<CUstream>(streamFor(op.lane)), flag, 1,
                                          CU_STREAM_WRITE_VALUE_DEFAULT));
}

void CopyEngineProgram::wait(const sched::Wait& op) {
  const CUdeviceptr flag = flagAddress(s_.rank, op.slot);
  // Wait for the constant 1 and consume it by writing 0: no sequence numbers, so a captured graph replays
  // correctly any number of times.
  s_.pendingWaits.push_back(waitOp(flag, 1));
  s_.pendingWaits.push_back(writeOp(flag, 0));
}

bool CopyEngineProgram::recordsChunk(const sched::Ready& op) const {
  return setup_.chunkEvents != nullptr && op.tag >= 0;
}

void CopyEngineProgram::ready(const sched::Ready& op) {
  // The batch of memory operations before it was flushed (a mark that records is not batched), so the record follows
  // them on M.
  if (!recordsChunk(op)) return;
  recordChunk(static_cast<size_t>(op.tag));
}

void CopyEngineProgram::reduce(const sched::Reduce& op) {
  if (op.count == 0) return;
  if (op.inputs.size() > static_cast<size_t>(kMaxReduceInputs)) {
    CONCCL_THROW(concclNotSupported, "a reduction over " + std::to_string(op.inputs.size()) +
                                         " inputs exceeds the kernel's limit of " + std::to_string(kMaxReduceInputs));
  }
  ReduceArgs args;
  args.k = static_cast<int>(op.inputs.size());
  for (int j = 0; j < args.k; ++j) args.inputs[j] = resolve_(op.inputs[static_cast<size_t>(j)]);
  args.output = resolve_(op.output);
  args.count = op.count;
  streamFor(sched::kMainStream);
  for (const sched::Location& in : op.inputs) awaitInput(in, op.count * typeSize(op.dtype), setup_.main, 0);
  // The same CTA count concclCallResources reports (exec/call_path.cc, callResources).
  const size_t inputBytes = op.count * typeSize(op.dtype) * op.inputs.size();
  launchReduce(args, op.dtype, op.op, reductionCtas(setup_.reduceCtas, setup_.smBudget, inputBytes),
               setup_.kernelPriority, setup_.main);
}

void CopyEngineProgram::finish() {
  // A captured launch must not write the marker: its replays would write a stale count, and the graph's replays
  // are the caller's to synchronise. Eager launches write it after everything else on M (the write carries a
  // memory barrier), in the last batch when no lane must be joined first.
  const bool lanesUsed = std::find(s_.laneUsed.begin(), s_.laneUsed.end(), true) != s_.laneUsed.end();
  flushCopy();
  const uint32_t marker = s_.launches + 1;
  if (setup_.eager && !lanesUsed) s_.pendingWaits.push_back(writeOp(s_.doneCounterDevice, marker));
  flushBatch();
  // Program end: M continues only after every lane used in this call has finished.
  for (size_t l = 0; l < s_.laneUsed.size(); ++l) {
    if (!s_.laneUsed[l]) continue;
    CUDA_CHECK(cudaEventRecord(s_.joinEvents[l].get(), s_.lanes[l].get()));
    CUDA_CHECK(cudaStreamWaitEvent(setup_.main, s_.joinEvents[l].get(), 0));
  }
  // Every block not recorded yet (the own block out of place, blocks of peers that copied nothing) is in place now.
  for (size_t b = 0; b < chunkRecorded_.size(); ++b) recordChunk(b);
  if (setup_.eager && lanesUsed) {
    CU_CHECK(driverApi().streamWriteValue32(reinterpret_cast<CUstream>(setup_.main), s_.doneCounterDevice, marker,
                                            CU_STREAM_WRITE_VALUE_DEFAULT));
  }
  if (setup_.eager) ++s_.launches;
}

void CopyEngineProgram::awaitInput(const sched::Location& loc, size_t bytes, cudaStream_t stream,
                                   size_t streamIndex) {
  const InputPieces* pieces = setup_.inputPieces;
  // Only this rank's own sendbuff has pieces: schedules built with pushInputs never read a peer's input in place.
  if (pieces == nullptr || pieces->events.empty() || bytes == 0 || loc.rank != s_.rank || loc.buffer != 0) return;
  CONCCL_ASSERT(pieces->blockBytes > 0 && pieces->pieceBytes > 0);
  if (inputAwaited_.empty()) inputAwaited_.assign(1 + s_.lanes.size(), std::vector<bool>(pieces->events.size(), false));
  std::vector<bool>& awaited = inputAwaited_[streamIndex];
  const size_t per = static_cast<size_t>(pieces->piecesPerBlock);
  const size_t end = loc.offset + bytes;
  for (size_t block = loc.offset / pieces->blockBytes; block * pieces->blockBytes < end; ++block) {
    const size_t blockStart = block * pieces->blockBytes;
    const size_t from = loc.offset > blockStart ? loc.offset - blockStart : 0;
    const size_t to = std::min(end - blockStart, pieces->blockBytes);
    for (size_t j = from / pieces->pieceBytes; j < per && j * pieces->pieceBytes < to; ++j) {
      const size_t index = block * per + j;
      if (index >= awaited.size() || awaited[index]) continue;
      awaited[index] = true;
      cudaEvent_t event = pieces->events[index];
      if (event != nullptr) CUDA_CHECK(cudaStreamWaitEvent(stream, event, 0));
    }
  }
}

void CopyEngineProgram::recordChunk(size_t block) {
  if (setup_.chunkEvents == nullptr || block >= chunkRecorded_.size() || chunkRecorded_[block]) return;
  chunkRecorded_[block] = true;
  cudaEvent_t event = (*setup_.chunkEvents)[block];
  if (event != nullptr) CUDA_CHECK(cudaEventRecord(event, setup_.main));
}

}  // namespace conccl::exec
