// Scenarios of conccl_mp_worker about staged calls (sched::CollectiveCall::peerScratchOnly): calls on ordinary
// cudaMalloc buffers up to CONCCL_STAGED_MAX_BYTES that launch without waiting on the host for the peer processes.
// Throw std::runtime_error on failure.
#pragma once

#include <conccl/conccl.h>
#include <cuda_runtime_api.h>

namespace conccl::mpworker {

// "no-rendezvous": every collective but AllToAllv, rank 0 calling while its peers sleep 200 ms first: rank 0's call
// must return at once and every result must match the reference. Then a call above the threshold, which is deferred
// (returns at once too), a hot path of 300 staged calls (host time printed), and cudaMallocAsync memory below and
// above the threshold (staged either way). The worker sets CONCCL_STAGED_MAX_BYTES to 8 MiB for it.
void scenarioNoRendezvous(concclComm_t comm, int rank, int nranks, cudaStream_t stream);

// "staged-mismatch": the last rank passes another count to a staged AllReduce. Every rank's call returns (or the last
// one's fails), every rank then gets concclInvalidUsage from concclCommGetAsyncError within the bound, the next call
// fails, the stream drains, and abort leaves nothing behind. Aborts `comm` and sets it to nullptr.
void scenarioStagedMismatch(concclComm_t& comm, int rank, int nranks, cudaStream_t stream, int timeoutMs);

}  // namespace conccl::mpworker
