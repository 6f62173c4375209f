// Calls on cudaMallocAsync pool memory run on bounce regions: which of the caller's bytes a call copies into a rank's
// regions before it and out of them after it, and where its pointers land there (exec/cuda/pool_bounce.h holds the
// regions; ProcessClique::enterPoolBounce decides which calls take them).
//
// Why: no peer process can map pool memory (docs/multiprocess.md, "Buffers"), and after the caller's cudaFreeAsync
// CUDA refuses the pointer in any later API call, so a call left on its pool buffers is staged through the peers'
// scratch with every operation enqueued before it returns: a program that grows with the call (188 ops for a 2-rank
// AllReduce of 1 GiB), about 1 us of the caller's time an op. On a rank's own bounce regions (VMM memory the peers map, at the same
// addresses every call) the call is an ordinary call on shareable memory (the copy engines move it directly, a late
// peer is not waited for), plus one copy in and one copy out on the caller's stream, whatever its size.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace conccl::exec {

// One of a call's two buffers as the rank passed it.
struct BounceBufferArg {
  const void* ptr = nullptr;
  size_t bytes = 0;   // what the call reads (sendbuff) or writes (recvbuff) there; 0: the buffer is not used
  bool pool = false;  // cudaMallocAsync pool memory
};

// A run of the caller's memory that sits in a region at the same offsets: [base, base + bytes) -> region + (p - base).
struct BounceSpan {
  uintptr_t base = 0;
  size_t bytes = 0;  // 0: the region is not used by the call
};

// A copy between the caller's memory and a region: [user, user + bytes) <-> region base + offset.
struct BounceCopy {
  int region = 0;
  size_t offset = 0;
  uintptr_t user = 0;
  size_t bytes = 0;
};

// Where one of the call's pointers goes: region + offset, or (region -1) nowhere: it stays as the caller passed it.
struct BouncePlace {
  int region = -1;
  size_t offset = 0;
};

struct PoolBouncePlan {
  std::array<BounceSpan, 2> spans{};    // [region]
  std::array<BouncePlace, 2> places{};  // [0] sendbuff, [1] recvbuff
  std::vector<BounceCopy> copiesIn;     // before the call, in order
  std::vector<BounceCopy> copiesOut;    // after it
  // Buffer `b`'s pointer (0 sendbuff, 1 recvbuff; `original` as the caller passed it) for the call on the regions
  // based at `regions`. Each buffer is placed by the plan, not by its address: two buffers may touch (one pool
  // allocation right after the other), and a pointer at the end of one span is the start of the next buffer.
  void* place(int b, const void* original, const std::array<void*, 2>& regions) const;
};

// The plan of a call with buffers `send` and `recv` (bufferBytes of the rank's call). Buffers that overlap (in place,
// or an in-place block: AllGather's sendbuff inside recvbuff) share region 0 as one span; otherwise each pool buffer
// has its own region (sendbuff 0, recvbuff 1). The input is copied in, the output out; with `keepRecvGaps` (AllToAllv,
// whose displacements may leave bytes of recvbuff unwritten) the output's old bytes are copied in too, so that the copy
// out writes back what the call did not. nullopt (reason in *whyNot) when no buffer is pool memory, or a span is above
// `maxRegionBytes`.
std::optional<PoolBouncePlan> planPoolBounce(const BounceBufferArg& send, const BounceBufferArg& recv,
                                             bool keepRecvGaps, size_t maxRegionBytes, std::string* whyNot);

}  // namespace conccl::exec
