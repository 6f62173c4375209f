// Scenarios of conccl_mp_worker about late peers (staged at once, or deferred: core/process_clique_proxy.cc): calls
// across processes that never wait on the host for their peers, at any size, for every collective, AllToAllv and Send/Recv, on every kind
// of memory PyTorch hands out. Throw std::runtime_error on failure.
#pragma once

#include <conccl/conccl.h>
#include <cuda_runtime_api.h>

#include <vector>

#include "gpu/multiprocess/worker_util.h"

namespace conccl::mpworker {

// "late-skew" (the defaults: late calls take the late route) and "deferred-skew" (CONCCL_DEFER_CALLS=1): the peers of
// rank 0 sleep 2 s before each round; rank 0 times each call of the round (host time only). Rounds: AllReduce of
// 1 MiB, 64 MiB and 1 GiB (9 calls each); AllReduce of 64 MiB in 5 rounds of one call (every rank waits for its
// stream after each: the peer is one call behind every time, as when a framework issues one call per step); on
// cudaMallocAsync pool memory, each call's buffer allocated right before it and freed (cudaFreeAsync) right after it
// returns: AllReduce of 1 MiB, 64 MiB and 1 GiB, AllGather and ReduceScatter of 64 MiB, in place (9 calls each; only
// the 1 MiB one is bounded); every other collective, AllToAllv with uneven counts and a Send/Recv ring at 64 MiB /
// 1 MiB. Every result is checked.
// Prints p50 / max host time per call and fails when rank 0's p50 exceeds CONCCL_TEST_MAX_HOST_US (default 20) for
// calls back to back, or CONCCL_TEST_MAX_COLD_HOST_US (default 250) for one call a round and first calls of a shape.
void scenarioDeferredSkew(concclComm_t comm, int rank, int nranks, cudaStream_t stream);

// "cross-order": a second communicator B (every rank; its id travels by a Broadcast on the first one, A), each on
// its own stream: rank 0 sends 64 MiB to rank 1 on B, then runs a 64 MiB collective on A; rank 1 runs the collective
// first, then receives on B; the other ranks run only the collective. Every collective kind and AllToAllv, both
// orders. Valid under NCCL; must finish, with every result right.
void scenarioCrossOrder(concclComm_t comm, int rank, int nranks, cudaStream_t stream);

// "memory-kinds": every collective at 16 MiB and 64 MiB per buffer, AllToAllv and a Send/Recv ring at 12 MiB, on each
// kind of memory in `kinds` (worker_util.h: VMM memory as PyTorch's expandable segments map it, cudaMallocAsync pool
// memory), results checked.
void scenarioMemoryKinds(concclComm_t comm, int rank, int nranks, cudaStream_t stream,
                         const std::vector<BufKind>& kinds);

// "deferred-kill" / "deferred-kill-gpu": the last rank kills itself (SIGKILL) while the others wait for it: on the host
// (a deferred 64 MiB call) or on the GPU (a staged 1 MiB call already launched). Every other rank must see
// concclCommGetAsyncError != success within 1 s of the kill; its stream drains, abort leaves nothing behind.
void scenarioDeferredKill(concclComm_t& comm, int rank, int nranks, cudaStream_t stream, bool onGpu);

// "deferred-abort": rank 0 defers calls its peers never make; another thread of rank 0 aborts the communicator
// after 300 ms: the abort returns within the bound, the stream drains, and the peers see the error.
// A CUDA graph of an AllReduce replayed while the last rank is killed: reported within 1 s, the replay drains.
void scenarioGraphKill(concclComm_t& comm, int rank, int nranks, cudaStream_t stream);
void scenarioDeferredAbort(concclComm_t& comm, int rank, int nranks, cudaStream_t stream);

}  // namespace conccl::mpworker
