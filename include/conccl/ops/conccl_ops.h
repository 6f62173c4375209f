/*
 * conccl_ops: a plain C interface to conccl's fused GEMM + collective ops (the .hpp files beside this one), so that
 * languages without C++ (Python's ctypes, PyTorch programs) can call them. Library: libconccl_ops.so, built when
 * CUDA and cuBLASLt are found, installed beside libconccl (which it links).
 *
 * The ops (issue 15, docs/dependent-overlap.md):
 *   concclOpsAllGatherMatmul      C = allgather(A_shard) @ B  (tensor parallelism's column-parallel input: the
 *                                 all-gather feeds the GEMM shard by shard as the shards land)
 *   concclOpsMatmulReduceScatter  C = reduce_scatter(A @ B)   (the row-parallel output: each rank's partial product
 *                                 is summed across ranks, each rank keeping its rows)
 * Row-major matrices throughout; bf16 or fp16 with fp32 accumulation.
 *
 * Communicators: of the CUDA backend; ranks in this process (concclCommInitAll) or one process per rank
 * (concclCommInitRank: the per-rank functions; the chunked collectives work across processes since 2026-12-01).
 * The library keeps one op object of each kind per communicator (each with its events, a GEMM stream, a cuBLASLt
 * handle and a 32 MiB cuBLASLt workspace on the rank's device), created on first use; concclOpsReleaseComm frees
 * them. Call it before concclCommDestroy: the cache is keyed by the communicator's address.
 *
 * Two ways to drive the ranks:
 *   - one thread per rank: each thread calls concclOpsAllGatherMatmul / concclOpsMatmulReduceScatter for its rank;
 *   - one thread for all ranks: the ...Group variants, with per-rank arrays. One thread must not call the per-rank
 *     functions for several ranks: outside a group the first call waits for the other ranks to arrive, and inside
 *     concclGroupStart/End the collective is launched only at the group's end, after GEMMs that depend on it were
 *     queued. The group variants order the two halves correctly. Neither kind may be called inside the caller's own
 *     concclGroupStart/End.
 *
 * Stream semantics are conccl's: a call enqueues work on `stream` (the rank's stream; NULL is the legacy default
 * stream) and returns without waiting for the GPU; it starts after the work queued earlier on `stream`, and work
 * queued on `stream` afterwards sees the results. Buffers must be device memory of the communicator's device and
 * stay alive until `stream` has passed the call. CUDA graph capture is untested; the first call on a communicator
 * allocates (workspace, events, a stream), which a capture forbids, so make it outside one.
 *
 * Errors: every function returns a concclResult_t and never prints or exits. concclOpsGetLastError() gives the
 * message of the last failure in the calling thread (the op's own text, or conccl's message when a collective
 * failed). Arguments are validated before anything is enqueued: concclInvalidArgument for NULL pointers, sizes <= 0
 * or whose byte counts overflow, an invalid datatype, buffers that are not device memory of the rank's device;
 * concclNotSupported for a valid datatype other than concclBfloat16 / concclFloat16 and for host-backend
 * communicators; concclInvalidUsage for a communicator that is not live (destroyed, never created).
 */
#ifndef CONCCL_OPS_CONCCL_OPS_H_
#define CONCCL_OPS_CONCCL_OPS_H_

#include <conccl/conccl.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* C[nranks*mShard, n] = allgather(aShard)[nranks*mShard, k] @ b[k, n] on this rank.
 *   aShard  [mShard, k]         this rank's rows of A; may lie in aFull at row rank*mShard (in place)
 *   aFull   [nranks*mShard, k]  receives the gathered A
 *   b       [k, n]              the same on every rank
 *   c       [nranks*mShard, n]  the product
 * For one thread per rank. */
CONCCL_API concclResult_t concclOpsAllGatherMatmul(concclComm_t comm, const void* aShard, void* aFull, const void* b,
                                                   void* c, int64_t mShard, int64_t n, int64_t k, concclDataType_t type,
                                                   cudaStream_t stream);

/* c[mShard, n] = this rank's rows [rank*mShard, (rank+1)*mShard) of sum over ranks of (a @ b).
 *   a        [nranks*mShard, kShard]  this rank's K-columns of A
 *   b        [kShard, n]              this rank's K-rows of B
 *   partial  [nranks*mShard, n]       workspace: receives this rank's partial product
 *   c        [mShard, n]              this rank's rows of the sum
 * For one thread per rank. */
CONCCL_API concclResult_t concclOpsMatmulReduceScatter(concclComm_t comm, const void* a, const void* b, void* partial,
                                                       void* c, int64_t mShard, int64_t n, int64_t kShard,
                                                       concclDataType_t type, cudaStream_t stream);

/* concclOpsAllGatherMatmul for `nranks` ranks from one thread: entry i of every array is rank comms[i]'s argument
 * (distinct communicators of one clique). Runs the all-gathers of every rank inside one concclGroupStart/End, then
 * every rank's GEMMs. All arguments of all ranks are checked before anything is enqueued. */
CONCCL_API concclResult_t concclOpsAllGatherMatmulGroup(int nranks, concclComm_t* comms, const void** aShard,
                                                        void** aFull, const void** b, void** c, int64_t mShard,
                                                        int64_t n, int64_t k, concclDataType_t type,
                                                        cudaStream_t* streams);

/* concclOpsMatmulReduceScatter for `nranks` ranks from one thread: every rank's GEMM, then the reduce-scatters of
 * every rank inside one concclGroupStart/End. */
CONCCL_API concclResult_t concclOpsMatmulReduceScatterGroup(int nranks, concclComm_t* comms, const void** a,
                                                            const void** b, void** partial, void** c, int64_t mShard,
                                                            int64_t n, int64_t kShard, concclDataType_t type,
                                                            cudaStream_t* streams);

/* Frees the op objects this library keeps for comm (after the streams of its calls have passed them: the op's
 * CUDA resources are destroyed). Call before concclCommDestroy(comm). A communicator without op objects is not an
 * error. concclInvalidArgument for comm == NULL. Must not run concurrently with a call on the same comm. */
CONCCL_API concclResult_t concclOpsReleaseComm(concclComm_t comm);

/* Message of the last failure of a concclOps* call in the calling thread; "" if none. Valid until the next failing
 * concclOps* call in this thread. */
CONCCL_API const char* concclOpsGetLastError(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* CONCCL_OPS_CONCCL_OPS_H_ */
