// Sharing cudaMallocAsync pool memory with the peer processes of a
// communicator, so that calls on it move data directly on the copy engines (or,
// with a late peer, on the pair-owned route) like calls on cudaMalloc memory,
// instead of being staged through scratch (a program that grows with the call's
// size, every op enqueued before the call returns). Only a pool created with a
// POSIX file descriptor handle type can be shared; the device's default pool
// (what cudaMallocAsync and PyTorch's cudaMallocAsync backend use unless told
// otherwise) cannot, so CONCCL_SHAREABLE_POOL=1 makes such a pool the device's
// current pool at a communicator's init (makeShareablePoolCurrent): what is
// allocated from then on can be shared.
//
// The owner exports each buffer's allocation as its pool's number and the
// driver's 64-byte pointer export (BufferExport::kPool); the pool's descriptor
// travels through the process's VMM handle server (vmm_export.h) on a peer's
// request, once per pool and peer process (the peer keeps the imported pool).
// Exports are keyed by the allocation's buffer id and retired like cudaMalloc
// exports: a freed allocation's id no longer answers at its address, and the
// peers free their import of it when told (the driver cannot tell a stale
// pointer export from a live one: an old import of an address reads whatever
// the pool placed there since).
#pragma once

#include <cuda.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "exec/executor.h"

namespace conccl::exec {

// The pool `ptr` was allocated from (cudaMallocAsync /
// cuMemAllocFromPoolAsync), or null for memory of no pool.
CUmemoryPool poolOfPointer(const void *ptr);

// The export of the allocation at `base` (`bytes` long, buffer id `bufferId`)
// of `pool`, which the handle server serves as number `poolId`: kind kPool, the
// pointer export in `handle`. nullopt (with `why`) when the driver refuses the
// pointer export.
std::optional<BufferExport> exportPoolAllocation(CUmemoryPool pool, uint32_t poolId, CUdeviceptr base, size_t bytes,
                                                 uint64_t bufferId, std::string *why);

// Asks process `pid`'s handle server for its pool `poolId` and imports it for
// `device` (read and write access for that device). Throws
// Error(concclSystemError) naming what failed.
CUmemoryPool importPeerPool(int64_t pid, uint32_t poolId, int device, std::chrono::milliseconds timeout);

// Imports the allocation `b` (kind kPool) from `pool`, the import of its
// owner's pool; returns its address here. The import is freed with
// freePoolImport. Throws Error(concclUnhandledCudaError).
void *importPoolAllocation(CUmemoryPool pool, const BufferExport &b);
void freePoolImport(void *imported);

// CONCCL_SHAREABLE_POOL: makes a pool with a POSIX descriptor handle type the
// current pool of `device` (of this process), if its current pool is the
// default one; its release threshold is the largest, as PyTorch sets on the
// pools it uses (freed memory stays cached in the pool). Once per device and
// process; later calls return what the first did. False (with `why`) when the
// driver refuses; the device's pool is then unchanged.
bool makeShareablePoolCurrent(int device, std::string *why);

}  // namespace conccl::exec
