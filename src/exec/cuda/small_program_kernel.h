// The small-message path: one rank's whole program of a small call run by ONE kernel of one CTA.
//
// The copy-engine path issues at least three CUDA calls per rank for the smallest collective (a memory-op batch
// for the ready handshake, the copy, a batch for the done handshake), ~3-4 us each in our VM: the enqueue cost
// of a small call. This kernel executes the same schedule ops in program order (the host executor's sequential
// order, which the schedule execution model allows) in one launch: copies with the CTA's threads through peer
// pointers, Signals as system-scope stores into the flags, Waits as a poll of the flag by one thread (with a
// timeout and the executor's abort word, so it never spins forever), reductions element-wise. The flag
// protocol is the copy-engine path's (set to 1, consume to 0), so a captured kernel replays correctly and calls
// on either path may follow each other. All ranks of one call take the same path (the executor decides from
// every rank's program): a kernel reading data right after a copy-engine peer's flag saw stale data in graph
// replays on the H200.
//
// It occupies one SM for the few microseconds of a small call; the executor uses it only for programs that copy
// at most config.smallMessageBytes and where every peer's memory is directly addressable (same GPU, or peer
// access); never for ranks of different processes on one GPU (their contexts time-slice, so a polling kernel
// would hold the GPU while its peer cannot run).
#pragma once

#include <conccl/conccl.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "exec/kernel_limits.h"

namespace conccl::exec {

// kSmallMaxOps, kSmallMaxPointers: exec/kernel_limits.h (the path decision reads them too).
inline constexpr int kSmallThreads = 512;

enum SmallOpKind : uint8_t { kSmallCopy = 0, kSmallSignal = 1, kSmallWait = 2, kSmallReduce = 3 };

struct SmallOp {
  uint8_t kind = kSmallCopy;
  uint8_t inputs = 0;        // reduce: number of inputs, at pointers[firstInput ..)
  uint16_t firstInput = 0;
  uint32_t* flag = nullptr;  // signal / wait: the flag as the GPU addresses it
  const void* src = nullptr; // copy
  void* dst = nullptr;       // copy, reduce output
  uint64_t size = 0;         // copy: bytes; reduce: elements
};

// Passed by value as the kernel's parameter (< 4 KiB).
struct SmallProgram {
  int numOps = 0;
  concclDataType_t dtype = concclUint8;  // of the reductions (all reductions of a call share it)
  concclRedOp_t op = concclSum;
  const volatile uint32_t* abortWord = nullptr;  // non-zero: stop waiting (concclCommAbort)
  uint32_t* errorWord = nullptr;                 // the kernel writes 1 here when a wait timed out
  uint32_t* doneCounter = nullptr;               // eager launches: doneValue is written here at the end
  uint32_t doneValue = 0;
  uint64_t timeoutNs = 0;
  SmallOp ops[kSmallMaxOps];
  const void* pointers[kSmallMaxPointers];
};
static_assert(sizeof(SmallProgram) < 4096, "kernel parameters must stay below 4 KiB");

// Loads every instantiation now (see preloadReduceKernels for why a lazy load inside a group can hang).
void preloadSmallProgramKernels();
// Enqueues the program on `stream`; `priority` != 0: launched with that priority (cudaLaunchAttributePriority), 0: the
// stream's. Throws Error(concclNotSupported) for a reduction type/op the kernel lacks.
void launchSmallProgram(const SmallProgram& program, int priority, cudaStream_t stream);

}  // namespace conccl::exec
