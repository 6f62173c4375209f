// Scenarios of conccl_mp_worker on VMM memory exported to the peers (PyTorch's expandable segments;
// src/exec/cuda/vmm_export.h): pieces replaced under exported buffers, units of many pieces, a unit retired while a
// late peer has still to map it. Throw std::runtime_error on failure.
#pragma once

#include <conccl/conccl.h>
#include <cuda_runtime_api.h>

namespace conccl::mpworker {

// "vmm-export" (after memory-kinds on shareable VMM memory): a piece of two VMM buffers replaced by new memory at the
// same address between rounds of an in-place AllReduce and an AllGather; every result right (the exported units
// are retired and made again, never used stale); then an AllReduce on a unit of 101 pieces (the handle server sends
// them in two batches).
void scenarioVmmRemap(concclComm_t comm, int rank, int nranks, cudaStream_t stream);

// "vmm-export", last: rank 0's unit is retired while a late peer has still to map it for an earlier call. Rank 0
// exports a 32 MiB buffer as one unit in a call where it is the last to arrive (its peers never map that unit then),
// reuses the unit for its first 16 MiB in a call its peers make 300 ms late, replaces a piece outside those 16 MiB
// (the unit is now stale) and makes a call on new memory (whose export sweeps the stale unit) before the peers
// arrive. The late peers must still map the unit for the earlier call: every result right (before
// src/exec/retire_after_peers.h the owner withdrew the unit at once, and they failed with "the owner no longer
// exports it", as PyTorch's graphs case did on 2026-12-05).
void scenarioVmmRetiredUnderLatePeer(concclComm_t comm, int rank, int nranks, cudaStream_t stream);

}  // namespace conccl::mpworker
