// The "chunked" scenario of conccl_mp_worker (issue 15 item 1 across processes): concclReduceScatterChunked with a
// gated producer and concclAllGatherChunked with a consumer that snapshots each block when its event fires, one
// process per rank, checked against references regenerated from shared seeds. Throws std::runtime_error on failure.
#pragma once

#include <conccl/conccl.h>
#include <cuda_runtime_api.h>

namespace conccl::mpworker {

void scenarioChunked(concclComm_t comm, int rank, int nranks, cudaStream_t stream);
// "chunked-mismatch": a chunked and a plain reduce-scatter in one call are refused with concclInvalidArgument on every
// rank, and the communicator stays usable. Run with calls that wait on the host for their peers (the synchronous
// form of the error; with late calls staged it is asynchronous, concclInvalidUsage).
void scenarioChunkedMismatch(concclComm_t comm, int rank, int nranks, cudaStream_t stream);

}  // namespace conccl::mpworker
