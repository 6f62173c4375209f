// Binds streams to hardware queues one at a time, each while the streams bound before it are busy, so that no two
// streams of one communicator end up on the same hardware queue because they were first used at the same moment
// (issue 13, the shared-GPU deadlock; the evidence and what is and is not proven is in docs/cuda-executor.md,
// Hazards, item 4).
//
// A claim enqueues on every stream, in order and from one thread: a wait for a pinned "gate" word (so the stream's
// queue stays busy until every stream of the claim has been given work), a 4-byte device-to-device probe copy and
// an event record (so that every kind of operation a program uses has been issued on the stream once, from one
// thread, before any rank's program can wait on the GPU). Then the CPU opens the gate. Nothing waits for the GPU,
// and nothing here can block on another rank: the gate is opened by this very call, on every path.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <vector>

#include "exec/cuda/raii.h"

namespace conccl::exec {

class QueueClaimer {
 public:
  // `devices`: every device whose streams may be claimed (a 256-byte probe buffer is allocated on each).
  explicit QueueClaimer(const std::vector<int>& devices);
  ~QueueClaimer();
  QueueClaimer(const QueueClaimer&) = delete;
  QueueClaimer& operator=(const QueueClaimer&) = delete;

  struct Target {
    cudaStream_t stream;
    int device;
  };
  // Claims `targets` in order (see above). Throws conccl::Error on a CUDA failure; the gate is open afterwards
  // either way.
  void claim(const std::vector<Target>& targets);

  // True the first time a (rank, stream) pair is seen (by stream id, which CUDA never reuses, unlike handles);
  // such a stream is then remembered as claimed. Streams being captured are never new (nothing can be enqueued
  // for real on them).
  bool isNewStream(int rank, cudaStream_t stream, int device);

  // Gives up the probe buffers and the gate without freeing them (cudaFree synchronises the device, which would
  // hang behind a rank that could not drain: see CudaExecutor::releaseRank).
  void leak();

 private:
  PinnedBuffer gate_;
  uint32_t* gateHost_ = nullptr;
  uintptr_t gateDevice_ = 0;
  uint32_t generation_ = 0;
  std::map<int, DeviceBuffer> probes_;  // per device
  std::map<int, Event> events_;         // per device
  std::map<int, std::set<unsigned long long>> seen_;  // rank -> stream ids already claimed
  std::mutex mutex_;
};

}  // namespace conccl::exec
