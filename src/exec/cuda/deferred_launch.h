// Deferred launches (one rank of a clique spread over processes): a call whose peers have not yet published their
// buffers is not waited for on the caller's thread. Instead:
//   1. defer() on the caller's thread: an event records "the caller's stream reached the call", and the caller's
//      stream waits (cuStreamWaitValue32, GEQ) on a pinned gate word for this call's ticket k. Two CUDA calls.
//   2. the communicator's proxy thread (core/process_clique_proxy.cc), once the peers have published: begin() makes
//      the launch stream wait for that event, the call's program is launched on the launch stream as if it were the
//      caller's, and end() writes k into the gate from the launch stream, after the program. The caller's stream
//      then goes on: everything the caller queued before the call comes before it, everything after it comes after.
// Data moves exactly as it would have on the caller's stream (the same program, copy engines); only the host wait
// is gone.
//
// The hazard: a Wait blocks the hardware queue (CUDA_DEVICE_MAX_CONNECTIONS) its stream is mapped to. If the launch
// stream or a lane shared the caller's queue, its work would sit behind the caller's gate Wait, which waits for that
// very work: a deadlock CUDA cannot see (docs/cuda-executor.md, Hazards 3 and 4). So before a caller's stream is used
// for a deferred call for the first time, probe() checks, with the caller's stream held by a Wait, that the launch
// stream and every lane still run an event record promptly. A stream that fails the probe (or any stream while
// CUDA_DEVICE_MAX_CONNECTIONS=1, where every stream shares one queue) is not deferred: its calls wait on the host
// as before (logged once per stream).
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "exec/cuda/raii.h"
#include "exec/executor.h"

namespace conccl::exec {

class DeferredLaunches {
 public:
  // `device`: the rank's device. `lanes`: the rank's lane streams (probed against each caller's stream).
  DeferredLaunches(int device, std::vector<cudaStream_t> lanes);
  ~DeferredLaunches();
  DeferredLaunches(const DeferredLaunches&) = delete;
  DeferredLaunches& operator=(const DeferredLaunches&) = delete;

  // Step 1 (caller's thread). nullopt, with the reason in *whyNot, when `caller` cannot be deferred (captured, or its
  // hardware queue is shared with the launch stream or a lane, or CUDA_DEVICE_MAX_CONNECTIONS=1).
  std::optional<DeferredCall> defer(cudaStream_t caller, std::string* whyNot);
  // Step 2 (proxy thread): the launch stream waits until the caller's stream reached the call.
  void begin(const DeferredCall& call);
  // After the program (or instead of it, when the call failed): the caller's stream may go on. Returns the event
  // to the pool. Enqueued on the launch stream, so it never overtakes work of earlier deferred calls.
  void end(const DeferredCall& call);
  // Last resort when the launch stream cannot be used (CUDA failed): opens the gate for `ticket` from the host.
  void openFromHost(uint32_t ticket);
  // Polls (bounded) until the launch stream has run everything enqueued on it; false on timeout.
  bool drain(std::chrono::milliseconds limit);

 private:
  bool probe(cudaStream_t caller, std::string* whyNot);
  cudaEvent_t takeEvent();
  // One gate fewer pending (end(), openFromHost()): HostGatedWork::leave, at most once per ticket handed out.
  void releaseGate();

  int device_;
  std::vector<cudaStream_t> lanes_;
  Stream launchStream_;
  PinnedBuffer gate_;                // the gate word (host memory, mapped)
  CUdeviceptr gateDevice_ = 0;
  PinnedBuffer probeWord_;           // probe(): the caller's stream waits on it while the others record
  CUdeviceptr probeWordDevice_ = 0;
  uint32_t probeTicket_ = 0;
  mutable std::mutex mutex_;
  uint32_t issued_ = 0;              // tickets handed out (wraps; the gate compares wrap-safely)
  size_t gatesHeld_ = 0;             // tickets whose release is not enqueued yet (HostGatedWork, host_gated_work.h)
  std::vector<Event> events_;        // every event ever made (owned here)
  std::vector<cudaEvent_t> free_;    // events not waited on by a pending begin()
  std::map<unsigned long long, std::string> verdicts_;  // stream id -> "" (deferrable) or why not
  bool singleConnection_ = false;    // CUDA_DEVICE_MAX_CONNECTIONS=1
};

}  // namespace conccl::exec
