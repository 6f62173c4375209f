// Scenarios of conccl_mp_worker: memory a rank frees goes back to CUDA without any further call on the communicator
// that mapped it (its retirement log: src/core/retire_log.h), and its place can be used again at once. Throw
// std::runtime_error on failure.
#pragma once

#include <conccl/conccl.h>
#include <cuda_runtime_api.h>

#include "gpu/multiprocess/worker_util.h"

namespace conccl::mpworker {

// "memory-return" (cudaMalloc) and "memory-return-vmm" (shareable VMM memory, exported): every rank allocates 256 MiB
// and makes an in-place AllReduce on it on communicator A (`comm`) and on a second communicator B of the same ranks
// (every rank maps its peers' buffers on both: the direct route), then frees it. From then on A makes small calls
// (a training loop on the world group) and B makes none (a subgroup used once). Asserted: within 5 s the GPU's free
// memory is back to where it was before the allocation (within 64 MiB), and every result is right. Before the
// retirement log B's mappings (and, for VMM, the owner's retained pieces) held the memory until B's next call.
void scenarioMemoryReturnWithoutCalls(concclComm_t comm, int rank, int nranks, cudaStream_t stream, BufKind kind);

// "address-reuse": every rank makes an AllReduce on a cudaMalloc allocation on one communicator, frees it, allocates
// again (cudaMalloc hands the same place back) and at once makes an AllReduce on the new allocation on the other
// communicator, which must map it while the first communicator, idle since, still holds the mapping of the old one
// (CUDA refuses to map a peer's memory twice: the import table closes the superseded mapping first). Four rounds
// (64 MiB twice, 3 KiB twice), alternating the communicators; asserted: every result right, and the place reused at
// least once on every rank.
void scenarioAddressReusedAtOnce(concclComm_t comm, int rank, int nranks, cudaStream_t stream);

}  // namespace conccl::mpworker
