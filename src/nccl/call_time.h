// Host time inside the drop-in's NCCL calls, per calling thread (concclNcclShimTakeCallNs, conccl/nccl_shim.h): what
// conccl itself costs a PyTorch call, apart from PyTorch's own work around it (tests/torch/skew_host_time.py reads it
// next to the Python call's time). Each
// collective, Send/Recv and group call of the drop-in opens a ShimCallTimer; only the outermost one of a thread
// counts (a call that makes another exported call is not counted twice). Two clock reads per call.
#pragma once

#include <cstdint>

namespace conccl::nccl {

class ShimCallTimer {
 public:
  ShimCallTimer();
  ~ShimCallTimer();
  ShimCallTimer(const ShimCallTimer&) = delete;
  ShimCallTimer& operator=(const ShimCallTimer&) = delete;

 private:
  int64_t startNs_ = -1;  // -1: nested in another timer of this thread
};

// Nanoseconds this thread spent inside the drop-in's timed calls since the previous take (or the thread's start),
// and the number of outermost calls in that time; resets both.
struct ShimCallTime {
  uint64_t ns = 0;
  uint64_t calls = 0;
};
ShimCallTime takeShimCallTime();

}  // namespace conccl::nccl
