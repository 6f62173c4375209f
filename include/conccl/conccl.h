/*
 * conccl: collective communication on the GPU's copy engines.
 *
 * This is the only public header. It is plain C (usable from C and C++), shaped like NCCL's API:
 * an opaque communicator handle per rank, result codes, counts in elements, NCCL's in-place rules.
 *
 * ---------------------------------------------------------------------------------------------
 * Backends
 *   concclBackendCuda  one rank per listed CUDA device (devices may repeat). Data moves with the
 *                      GPU's copy engines (cudaMemcpyAsync between peers); reductions run on a small
 *                      number of CTAs (config.reduceCtas).
 *   concclBackendHost  ranks are host threads and buffers are host memory. Works on any machine; used
 *                      by CI and as the reference the CUDA backend is tested against.
 *
 * Stream semantics (CUDA backend)
 *   A collective call enqueues work and returns without waiting for the GPU. The operation starts
 *   after everything the caller enqueued earlier on `stream`, and anything enqueued on `stream`
 *   afterwards runs after the operation has completed on this rank (its output is written and its
 *   input may be overwritten). No rank's buffer is written before that rank's stream has reached the
 *   call. The calls of one rank run in the order they were made even on different streams (as NCCL's): a
 *   call on another stream than the rank's previous call also starts after that call has completed on
 *   this rank (eager calls; captured calls are ordered by their graph).
 *   Calls are capturable into CUDA graphs; a captured graph may be replayed any number of times.
 *   When the ranks are driven by one thread per rank, a call may wait on the host (bounded by
 *   config.timeoutMs) until every rank has *called* it, because rank r needs rank p's buffer address
 *   for this call; it never waits for GPU work. With CONCCL_THREAD_STAGED=1 (every rank on a GPU of
 *   its own) calls up to CONCCL_STAGED_MAX_BYTES go through the peers' scratch instead and return at
 *   once; ranks that disagree on such a call then put the communicator out of service
 *   (concclInvalidUsage) instead of failing the call with concclInvalidArgument.
 *
 * Stream semantics (host backend)
 *   `stream` is ignored and must be NULL. A call returns when the operation is complete on this rank.
 *   Inside concclGroupStart/End the operations run when concclGroupEnd is called, which returns when
 *   they are all complete.
 *
 * Ordering and matching
 *   All ranks of a communicator must call the same collectives in the same order, with matching
 *   arguments (count, datatype, op, root). Mismatches that can be detected are reported as
 *   concclInvalidArgument on every rank of the call. Send/Recv pairs are matched in the order they
 *   are posted between each pair of ranks.
 *
 * Errors
 *   Every function returns a concclResult_t. concclGetErrorString(result) names the code;
 *   concclGetLastError(comm) returns the message of the last failure on that communicator (or of the
 *   last failure in the calling thread when comm is NULL). The library never prints to stdout and
 *   never terminates the process. A rank that never arrives makes the others fail with concclTimeout
 *   after config.timeoutMs; so does GPU work of a call that has not completed config.timeoutMs after
 *   its rank last made progress (CUDA backend: a watchdog thread per communicator; the message names the
 *   call and the ranks that made no progress, and the communicator's own waits on the GPU are released).
 *   A communicator in error can only be aborted or destroyed. A communicator whose ranks share a GPU is
 *   refused at init (concclInvalidUsage) when their streams, ranks x (lanes + 1), outnumber the
 *   hardware queues CUDA_DEVICE_MAX_CONNECTIONS gives (default 8): they could deadlock on the GPU.
 *
 * Logging: CONCCL_DEBUG=WARN|INFO|TRACE (default WARN) to stderr, CONCCL_DEBUG_FILE=path to redirect.
 */
#ifndef CONCCL_CONCCL_H_
#define CONCCL_CONCCL_H_

#include <stddef.h>
#include <stdint.h>

#define CONCCL_MAJOR 0
#define CONCCL_MINOR 1
#define CONCCL_PATCH 0
/* One integer for comparisons: major*10000 + minor*100 + patch. */
#define CONCCL_VERSION_CODE (CONCCL_MAJOR * 10000 + CONCCL_MINOR * 100 + CONCCL_PATCH)

#if defined(_WIN32)
#define CONCCL_API
#else
#define CONCCL_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Same type as the CUDA runtime's cudaStream_t, declared here so that this header does not require the
 * CUDA headers (a repeated identical typedef is valid C11 and C++). NULL is the legacy default stream. */
typedef struct CUstream_st* cudaStream_t;
/* Same type as the CUDA runtime's cudaEvent_t, for the same reason. */
typedef struct CUevent_st* cudaEvent_t;

/* Result codes. */
typedef enum {
  concclSuccess = 0,
  concclUnhandledCudaError = 1, /* a CUDA runtime or driver call failed; the message names the call */
  concclSystemError = 2,        /* an operating-system call failed, or no usable device */
  concclInternalError = 3,      /* a bug in conccl; please report it with the message */
  concclInvalidArgument = 4,    /* a bad argument: null pointer, bad count, root, type, op, ... */
  concclInvalidUsage = 5,       /* a bad sequence of calls: use after destroy, unbalanced groups, ... */
  concclTimeout = 6,            /* a peer did not arrive within config.timeoutMs */
  concclNotSupported = 7,       /* valid request that this backend or build does not support */
  concclNumResults = 8
} concclResult_t;

/* Element types. The fp8 types are for data movement only (no reductions). */
typedef enum {
  concclInt8 = 0,
  concclUint8 = 1,
  concclInt32 = 2,
  concclUint32 = 3,
  concclInt64 = 4,
  concclUint64 = 5,
  concclFloat16 = 6,
  concclBfloat16 = 7,
  concclFloat32 = 8,
  concclFloat64 = 9,
  concclFloat8e4m3 = 10,
  concclFloat8e5m2 = 11,
  concclNumTypes = 12
} concclDataType_t;

/* Reduction operations. Floating-point reductions accumulate in fp32 (fp16, bf16, fp32) or fp64;
 * integer reductions wrap like the C type. concclAvg is the sum divided by the rank count (for integer
 * types: integer division of the sum). */
typedef enum { concclSum = 0, concclProd = 1, concclMax = 2, concclMin = 3, concclAvg = 4, concclNumOps = 5 } concclRedOp_t;

typedef enum { concclBackendHost = 0, concclBackendCuda = 1 } concclBackend_t;

/* How data moves on the CUDA backend. Auto: copy engines, except that small calls (config.smallMessageBytes) run
 * as one 1-CTA kernel per rank (one launch instead of three or more copy-engine operations; not used between
 * processes that share a GPU), and a rank's own block (AllGather, AllToAll(v), out-of-place Broadcast / Gather /
 * Scatter roots) is a copy inside its GPU, which CUDA runs on SMs. Copy: no SM moves data: no small kernel, and
 * (with 2+ ranks whose GPUs have peer access) a rank's own block leaves through a peer GPU and comes back on copy
 * engines (pulled back from a peer that receives it anyway, or bounced through a peer's scratch), at the price of
 * one more NVLink crossing of that block; use it beside a GEMM that holds every SM (conccl-c3 does). Ranks that
 * share a GPU take the same route and gain nothing by it. Reductions run on a few SMs either way. Any other value is
 * refused (concclInvalidArgument). */
typedef enum { concclEngineAuto = 0, concclEngineCopy = 1 } concclEngine_t;

/* Value of an integer config field that is left to the environment variable or the default. */
#define CONCCL_CONFIG_UNDEF_INT INT32_MIN
#define CONCCL_CONFIG_UNDEF_SIZE SIZE_MAX
#define CONCCL_CONFIG_MAGIC 0xC0CC1u

/* Communicator configuration. Always start from CONCCL_CONFIG_INITIALIZER: it records the size and
 * version of the struct the caller compiled against, so that the library can refuse a struct from a
 * newer header and accept one from an older header. Any field left undefined takes the value of its
 * environment variable, else the default:
 *   field         env variable         default
 *   backend       CONCCL_BACKEND       cuda if a CUDA device is present, else host ("host"|"cuda")
 *   engine        CONCCL_ENGINE        auto ("auto"|"copy")
 *   reduceCtas    CONCCL_REDUCE_CTAS   0      CTAs of each reduction kernel (1..1024); 0 = auto: one CTA per
 *                 256 KiB of input the reduction reads, at most 8 (8 SMs keep pace with NVLink at fan-in 2)
 *   lanes         CONCCL_LANES         2      parallel copy queues per rank (1..16)
 *   (lanes, smallMessageBytes and two environment-only tuning knobs default per GPU count: the values shown are
 *   the 2-GPU row of conccl's table, docs/tuning.md; a field or variable the caller sets is always kept)
 *   scratchBytes  CONCCL_SCRATCH_BYTES 64 MiB bound on the scratch memory of one rank (>= 64 KiB)
 *   timeoutMs     CONCCL_TIMEOUT_MS    300000 how long a rank waits for its peers, and its GPU work may go
 *                                             without progress (>= 1)
 *   smallMessageBytes CONCCL_SMALL_MESSAGE_BYTES 64 KiB  a call whose part on every rank (bytes copied plus
 *                 bytes its reductions produce) is at most this many bytes, or 4x this for calls without a
 *                 reduction, runs as one small kernel per rank (1 CTA, a few microseconds of one SM) instead of
 *                 copy-engine operations: one launch instead of three or more. 0 disables it; engine = copy never
 *                 uses it.
 *   highPriority  CONCCL_HIGH_PRIORITY 1      1: conccl's kernels (reductions, the small-message kernel) are launched
 *                 at the device's greatest stream priority (a per-launch attribute, on the caller's stream: stream
 *                 order, graph capture and CUDA calls per launch are unchanged). The block scheduler then gives them
 *                 the next SMs that a running GEMM's CTAs free, instead of queueing them behind every CTA the GEMM
 *                 has not started yet; the reduction is on the collective's critical path while the GEMM is not
 *                 slowed by more than the few SMs it takes. 0: the priority of the caller's stream. A captured
 *                 graph keeps the attribute per kernel node, but CUDA honours node priorities only in graphs
 *                 instantiated with cudaGraphInstantiateFlagUseNodePriority (else the launch stream's priority).
 *   smBudget      CONCCL_SM_BUDGET     0      the most SMs conccl may occupy on a rank's GPU at any moment of a call
 *                 (1..1024): every kernel of a call gets at most this many CTAs (a CTA occupies at most one SM) and
 *                 a call's kernels run one after the other on its stream. 0 = the default: reduceCtas when it is
 *                 set, else 8 (the auto reduction's maximum). reduceCtas above smBudget is refused
 *                 (concclInvalidArgument). concclCallResources reports what a given call will use. Copies between
 *                 two buffers of the same GPU are CUDA's own copy kernels on current drivers and outside this
 *                 budget (concclCallResources reports their bytes).
 */
typedef struct {
  size_t size;           /* sizeof(concclConfig_t) as compiled by the caller */
  unsigned int magic;    /* CONCCL_CONFIG_MAGIC */
  unsigned int version;  /* CONCCL_VERSION_CODE as compiled by the caller */
  int backend;           /* concclBackend_t */
  int engine;            /* concclEngine_t */
  int reduceCtas;
  int lanes;
  size_t scratchBytes;
  int timeoutMs;
  size_t smallMessageBytes; /* added in 0.1.0 after timeoutMs: structs without it are accepted */
  int highPriority;         /* added in 0.1.0 after smallMessageBytes: structs without it are accepted */
  int smBudget;             /* added with highPriority */
} concclConfig_t;

#define CONCCL_CONFIG_INITIALIZER                                                                          \
  {                                                                                                        \
    sizeof(concclConfig_t), CONCCL_CONFIG_MAGIC, CONCCL_VERSION_CODE, CONCCL_CONFIG_UNDEF_INT,             \
        CONCCL_CONFIG_UNDEF_INT, CONCCL_CONFIG_UNDEF_INT, CONCCL_CONFIG_UNDEF_INT, CONCCL_CONFIG_UNDEF_SIZE, \
        CONCCL_CONFIG_UNDEF_INT, CONCCL_CONFIG_UNDEF_SIZE, CONCCL_CONFIG_UNDEF_INT, CONCCL_CONFIG_UNDEF_INT \
  }

typedef struct concclComm* concclComm_t;

/* Opaque id of a communicator whose ranks live in several processes of one node (concclCommInitRank).
 * Plain bytes: copy it to the other processes any way you like (MPI_Bcast, a torch.distributed store, a
 * file, an environment variable as hex). */
#define CONCCL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[CONCCL_UNIQUE_ID_BYTES];
} concclUniqueId;

/* ---------------------------------------------------------------------------------------------- */
/* Version and errors                                                                              */

/* Writes CONCCL_VERSION_CODE of the library (which may differ from the header's). */
CONCCL_API concclResult_t concclGetVersion(int* version);

/* Static text of a result code: its name and a short description ("concclTimeout: a peer did not arrive in
 * time"); never NULL. */
CONCCL_API const char* concclGetErrorString(concclResult_t result);

/* Message of the last failure on comm, with the file:line trail of where it was raised; "" if none.
 * With comm == NULL: the last failure of any call made by the calling thread. The pointer stays valid
 * until the next call on the same communicator (or thread). */
CONCCL_API const char* concclGetLastError(concclComm_t comm);

/* ---------------------------------------------------------------------------------------------- */
/* Communicators                                                                                   */

/* Creates ndev communicators, one per rank, all in this process, and writes them to comms[0..ndev).
 *   CUDA backend: rank i uses device devlist[i] (devlist NULL: devices 0..ndev-1). A device may appear
 *                 several times (several ranks on one GPU: correct, but same-device copies run on SMs).
 *   Host backend: devlist is ignored; ranks are threads of the caller's choosing.
 * config may be NULL (all defaults). Errors: concclInvalidArgument for comms == NULL, ndev < 1,
 * a bad device or config; concclNotSupported for the CUDA backend in a build or on a machine without
 * CUDA devices. On failure nothing is allocated and comms is left untouched. */
CONCCL_API concclResult_t concclCommInitAll(concclComm_t* comms, int ndev, const int* devlist,
                                            const concclConfig_t* config);

/* Creates a new unique id. Call it in one process (by convention the one that will be rank 0), send the
 * bytes to every process, then call concclCommInitRank there. An id names one communicator: use a fresh
 * id for each concclCommInitRank round.
 * Ranks on several hosts: when the job may span hosts (CONCCL_RENDEZVOUS=auto, the default: the launcher's variables
 * say so, e.g. WORLD_SIZE != LOCAL_WORLD_SIZE, or CONCCL_HOSTID / NCCL_HOSTID is set; 1: always; 0: never), the id
 * also names a TCP rendezvous that this call starts in the calling process, which must then live until every rank
 * has called concclCommInitRank (and, for a communicator across hosts, as long as it does: it reports ranks that
 * die). docs/hierarchical.md, "The C API across hosts". */
CONCCL_API concclResult_t concclGetUniqueId(concclUniqueId* uniqueId);

/* Creates rank `rank` of an nranks-rank communicator whose ranks are in several processes (or threads) of
 * this node, on the calling thread's current CUDA device (cudaSetDevice first). With an id that names a rendezvous
 * (concclGetUniqueId) the ranks may be on several hosts: ranks on one host make this node's communicator as below;
 * ranks on several hosts with the same number G >= 2 on each make a hierarchical one (conccl inside each host, a real
 * NCCL loaded with dlopen, CONCCL_NCCL_REAL_LIB or libnccl.so.2, between them), any other layout the real NCCL's
 * communicator; config then configures the host's conccl communicator. On a communicator across hosts windows,
 * concclCallResources and the chunked calls return concclNotSupported (docs/hierarchical.md). Blocks until every rank has
 * called it with the same id and nranks, or config.timeoutMs has passed. Collective: every rank must call
 * it. Outside concclGroupStart/End only (it blocks for its peers).
 *   Errors, all after at most the timeout, never a hang: a rank that never arrives (concclTimeout on the
 *   others, naming it), a rank that arrives twice or disagrees on nranks (concclInvalidUsage on everyone
 *   who arrived), an id that is not one (concclInvalidArgument), no CUDA device (concclNotSupported: the
 *   host backend is single-process only).
 * Buffers passed to its collectives are made visible to the other processes with CUDA IPC: the first time
 * a peer sees an allocation (cudaMalloc'd memory; the allocation containing the pointer) it maps it, which
 * costs milliseconds, and keeps the mapping in a cache keyed by the allocation's unique id. Rule: memory may
 * be freed and reallocated freely (a new allocation at the same address is a new id, never confused with
 * the old one); a mapping of freed memory is dropped when its address is reused or at destroy; use
 * concclCommDeregister to drop it earlier. Memory from cudaMallocAsync pools or the VMM API (PyTorch's
 * expandable segments) cannot be shared this way: calls on it move data through the peers' scratch instead
 * (staged), except VMM memory created shareable (its pieces are exported to the peers as POSIX descriptors;
 * CONCCL_VMM_EXPORT=0 stages it too) and, above CONCCL_STAGED_MAX_BYTES, pool memory: such a call is copied into
 * the rank's bounce regions (shareable VMM memory, up to CONCCL_POOL_BOUNCE_MAX_BYTES each, given back after
 * CONCCL_POOL_BOUNCE_IDLE_MS unused), runs there and is copied back, on the caller's stream. No call across processes waits on the host for its peers: a collective (AllToAllv too)
 * whose peers have not all called within CONCCL_RENDEZVOUS_SPIN_US (not waited at all for a peer two calls behind
 * or late for the previous call) is launched at once on a late route, pair-owned or staged (CONCCL_STAGE_LATE_CALLS, CONCCL_PAIR_OWNED_LATE_CALLS, default 1; every rank takes the same route),
 * and calls up to CONCCL_STAGED_MAX_BYTES are staged; its GPU work then
 * waits on the GPU for the peers'. Send/Recv across processes: each Send meets the peer's next Recv from this
 * rank (in order per pair), through the receiver's scratch, launched at once. Errors such calls find once the
 * peers call (arguments that disagree, a size mismatch) put the communicator out of service on every rank
 * (concclCommGetAsyncError), since a rank may already have launched its part. */
CONCCL_API concclResult_t concclCommInitRank(concclComm_t* comm, int nranks, concclUniqueId commId, int rank);
CONCCL_API concclResult_t concclCommInitRankConfig(concclComm_t* comm, int nranks, concclUniqueId commId, int rank,
                                                   const concclConfig_t* config);

/* Registration: tells the communicator ahead of time that [buff, buff+size) will be used in its collectives,
 * so that the work of exporting the allocation happens now, not in the first collective that uses it. Local
 * (not collective). *handle identifies the registration for concclCommDeregister, which drops the
 * allocation from this rank's export cache and tells the peers, at this rank's next collective, to unmap it.
 * Device memory that cannot be shared with other processes (a cudaMallocAsync pool, VMM memory not exported) is
 * registered all the same: calls on it are staged, registered or not. On single-process communicators both calls
 * only validate their arguments (nothing needs mapping). */
CONCCL_API concclResult_t concclCommRegister(concclComm_t comm, void* buff, size_t size, void** handle);
CONCCL_API concclResult_t concclCommDeregister(concclComm_t comm, void* handle);

/* Symmetric windows: the zero-host-sync fast path of communicators spread over processes.
 * A window is [buff, buff+size) on every rank, registered collectively: every rank calls
 * concclCommWindowRegister in the same position of its call sequence (like a collective) with the same size,
 * and blocks until all have (bounded by timeoutMs). The peers map each other's window once, there.
 * A collective whose buffers all lie in windows, at the SAME window and the SAME offset on every rank (e.g.
 * buffers carved identically out of one concclMemAlloc'd block per rank), is then symmetric: each rank computes
 * its peers' addresses itself and enqueues its GPU work at once, without waiting for the peers to call. The
 * arguments are still published; the peers compare them when they call, and a background thread per
 * communicator watches the calls not yet matched (timeoutMs, dead peers). A mismatch (count, type, op, root,
 * offset, or a rank whose buffers are not in the window) is reported as concclInvalidUsage by every rank
 * (from its next call, or concclCommGetAsyncError) and puts the communicator out of service; the result of that
 * call is undefined but no access leaves the registered windows. AllToAllv and calls with a buffer outside the
 * windows take the regular path (the host waits for the peers' arguments).
 * Single-process communicators (concclCommInitAll) need no windows: the calls only validate and return a handle.
 * Deregister is collective too: every rank ends one of its windows at the same position of its call sequence,
 * not necessarily the same one (ranks may end their windows in different orders, as PyTorch's
 * deregister_mem_pool does; a window that some rank has ended is not used in calls until every rank has). It
 * waits for this rank's outstanding work, after which the memory may be freed. Errors: concclInvalidArgument for
 * NULL, size 0, a range that is not inside one allocation of this rank's device that the peers can map
 * (cudaMalloc, or VMM memory exported as docs/multiprocess.md says), or ranks that disagree on the size (every
 * rank gets the error);
 * concclInvalidUsage inside a group; concclTimeout if a peer does not call in time. */
typedef struct concclWindow* concclWindow_t;
CONCCL_API concclResult_t concclCommWindowRegister(concclComm_t comm, void* buff, size_t size, concclWindow_t* win);
CONCCL_API concclResult_t concclCommWindowDeregister(concclComm_t comm, concclWindow_t win);

/* Device memory suited to collectives across processes (exportable with CUDA IPC) on the current device,
 * aligned to 256 bytes. Free with concclMemFree. Register it as a window for the symmetric fast path. */
CONCCL_API concclResult_t concclMemAlloc(void** ptr, size_t size);
CONCCL_API concclResult_t concclMemFree(void* ptr);

/* Frees the communicator after all its enqueued work has completed (CUDA: waits for its streams).
 * Every rank must be destroyed; the shared state goes with the last one. The handle is invalid after. */
CONCCL_API concclResult_t concclCommDestroy(concclComm_t comm);

/* Like destroy, but does not wait for peers or for outstanding work to finish gracefully: marks the
 * clique aborted (peers' waiting calls fail with concclInvalidUsage), then frees this rank's resources.
 * Use after a failure or a timeout. Do not abort a communicator while another thread is inside a call on
 * that same communicator (a watchdog must abort only after the rank's own call returned, e.g. on timeout). */
CONCCL_API concclResult_t concclCommAbort(concclComm_t comm);

CONCCL_API concclResult_t concclCommCount(concclComm_t comm, int* count);
CONCCL_API concclResult_t concclCommUserRank(concclComm_t comm, int* rank);
/* CUDA device of the rank; -1 on the host backend. */
CONCCL_API concclResult_t concclCommCuDevice(concclComm_t comm, int* device);
/* concclSuccess while healthy; otherwise the error that put the communicator out of service (concclTimeout
 * also when the GPU work of a call made no progress for config.timeoutMs, see Errors). */
CONCCL_API concclResult_t concclCommGetAsyncError(concclComm_t comm, concclResult_t* asyncError);
/* The configuration in force after environment variables and defaults were applied. */
CONCCL_API concclResult_t concclCommGetConfig(concclComm_t comm, concclConfig_t* config);

/* ---------------------------------------------------------------------------------------------- */
/* Groups                                                                                          */

/* Calls between concclGroupStart and concclGroupEnd (per thread, nestable) are recorded and launched
 * together at the outermost concclGroupEnd. Needed when one thread drives several ranks, and to fuse
 * Send/Recv pairs: a communicator's Send/Recv calls in a group become one point-to-point operation, launched
 * after that communicator's collectives of the group. Argument errors are returned by the call itself;
 * errors of the launch by concclGroupEnd (the first one; each communicator keeps its own message). Calls on
 * communicators that did not fail still run. Destroying a communicator with calls recorded in an open group
 * drops those calls. */
CONCCL_API concclResult_t concclGroupStart(void);
CONCCL_API concclResult_t concclGroupEnd(void);
/* Ends one nesting level like concclGroupEnd, but the outermost level launches nothing: the calls recorded since
 * the outermost concclGroupStart are dropped (their arguments were checked when they were made; no stream is
 * touched, no peer is waited for) and the thread's next group starts empty. dropped (may be NULL) receives how many
 * calls were dropped (0 below the outermost level). concclInvalidUsage without a matching concclGroupStart. The
 * NCCL drop-in runs ncclGroupSimulateEnd on it. Calls on a communicator across hosts that went to the real NCCL were
 * handed to it when made and are not dropped: NCCL has no discard, so its group ends and runs them. */
CONCCL_API concclResult_t concclGroupDiscard(size_t* dropped);

/* ---------------------------------------------------------------------------------------------- */
/* Collectives. Counts are in elements of datatype. Buffers of distinct ranks must not overlap.   */

/* recvbuff[r*sendcount .. (r+1)*sendcount) on every rank = sendbuff of rank r.
 * In place when sendbuff == recvbuff + rank*sendcount (element offset). */
CONCCL_API concclResult_t concclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                          concclDataType_t datatype, concclComm_t comm, cudaStream_t stream);

/* concclAllGather whose blocks become usable one by one, for work that consumes an all-gather chunk by chunk (a GEMM
 * over all-gathered activations: it can start on the blocks that have arrived while the rest are still in flight).
 * chunkReady: an array of nranks events of this rank's device, created by the caller (cudaEventDisableTiming is
 * enough); an entry may be NULL. The call records chunkReady[k] on `stream` once rank k's block is in
 * recvbuff[k*sendcount ..), so that another stream can cudaStreamWaitEvent(chunkReady[k]) and start on block k;
 * every non-NULL event is recorded exactly once per call, and the call as a whole completes on `stream` as
 * concclAllGather does. Blocks arrive in no promised order. In place, the rank's own block's event is recorded
 * before anything else; out of place, or when the call runs as the small-message kernel, some or all events are
 * recorded only at the end of the call (correct, with less overlap). Capturable: under capture the records become
 * graph nodes, and streams waiting on them must join the same capture. The events must not be recorded by anyone
 * else until the consumer has waited on them. Inside concclGroupStart/End the call is launched, and its events
 * recorded, at the outermost concclGroupEnd: wait on them after it (a wait on an event not yet recorded does
 * nothing). In a communicator spanning processes the events are this process's own; the call itself waits on the host
 * for the peers as concclAllGather does. Errors as concclAllGather; concclNotSupported on the host backend. */
CONCCL_API concclResult_t concclAllGatherChunked(const void* sendbuff, void* recvbuff, size_t sendcount,
                                                 concclDataType_t datatype, concclComm_t comm, cudaStream_t stream,
                                                 cudaEvent_t* chunkReady);

/* recvbuff of rank r = op over ranks of sendbuff[r*recvcount .. (r+1)*recvcount).
 * In place when recvbuff == sendbuff + rank*recvcount. Not for fp8 types. */
CONCCL_API concclResult_t concclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                              concclDataType_t datatype, concclRedOp_t op, concclComm_t comm,
                                              cudaStream_t stream);

/* concclReduceScatter whose input is still being produced when the call is enqueued (a GEMM writing sendbuff piece
 * by piece): each piece is sent to the rank that reduces it as soon as the piece is ready, on copy engines, while
 * the producer keeps the SMs. Block q of sendbuff (recvcount elements at q*recvcount) is cut into piecesPerBlock
 * pieces of ceil(recvcount / piecesPerBlock) elements (the last may be shorter or empty). pieceReady: an array of
 * nranks * piecesPerBlock events of this rank's device; piece j of block q is read only after
 * pieceReady[q*piecesPerBlock + j] has completed, as cudaStreamWaitEvent does (the record made most recently before
 * this call, or before concclGroupEnd inside a group: record the events first). A NULL entry means "ready when the
 * call is made". Every rank reduces its block from what its peers pushed into its scratch (never by reading a
 * peer's sendbuff in place, since a peer cannot wait for this rank's producer), so the call moves the same bytes as
 * concclReduceScatter with peer reduction off. piecesPerBlock: 1..4096. Capturable (the waits become graph edges:
 * the producer must be in the same capture). In place as concclReduceScatter. Errors as concclReduceScatter;
 * concclNotSupported on the host backend. Every rank of a call must use concclReduceScatterChunked, or none
 * (concclInvalidArgument otherwise). Works in one process and across processes (one per GPU). */
CONCCL_API concclResult_t concclReduceScatterChunked(const void* sendbuff, void* recvbuff, size_t recvcount,
                                                     concclDataType_t datatype, concclRedOp_t op, concclComm_t comm,
                                                     cudaStream_t stream, int piecesPerBlock,
                                                     const cudaEvent_t* pieceReady);

/* recvbuff on every rank = op over ranks of sendbuff (count elements). In place when equal. */
CONCCL_API concclResult_t concclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                          concclDataType_t datatype, concclRedOp_t op, concclComm_t comm,
                                          cudaStream_t stream);

/* recvbuff on every rank = sendbuff of root (sendbuff is read on the root only). In place when equal. */
CONCCL_API concclResult_t concclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                          concclDataType_t datatype, int root, concclComm_t comm, cudaStream_t stream);

/* recvbuff on root = op over ranks of sendbuff; recvbuff is ignored on other ranks. In place when equal. */
CONCCL_API concclResult_t concclReduce(const void* sendbuff, void* recvbuff, size_t count, concclDataType_t datatype,
                                       concclRedOp_t op, int root, concclComm_t comm, cudaStream_t stream);

/* recvbuff[p*count .. (p+1)*count) of rank r = sendbuff[r*count .. (r+1)*count) of rank p.
 * Not in place: sendbuff and recvbuff must not overlap. */
CONCCL_API concclResult_t concclAllToAll(const void* sendbuff, void* recvbuff, size_t count,
                                         concclDataType_t datatype, concclComm_t comm, cudaStream_t stream);

/* Variable all-to-all (MPI_Alltoallv conventions, in elements): rank r sends sendcounts[p] elements
 * from sendbuff + sdispls[p] to rank p, which receives them at recvbuff + rdispls[r]. recvcounts[p] on
 * rank r must equal sendcounts[r] on rank p (checked). The four arrays have comm-size entries and are
 * read during the call only. Not in place. */
CONCCL_API concclResult_t concclAllToAllv(const void* sendbuff, const size_t sendcounts[], const size_t sdispls[],
                                          void* recvbuff, const size_t recvcounts[], const size_t rdispls[],
                                          concclDataType_t datatype, concclComm_t comm, cudaStream_t stream);

/* recvbuff[r*sendcount ..) on root = sendbuff of rank r; recvbuff ignored elsewhere.
 * In place on root when sendbuff == recvbuff + root*sendcount. */
CONCCL_API concclResult_t concclGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                       concclDataType_t datatype, int root, concclComm_t comm, cudaStream_t stream);

/* recvbuff of rank r = sendbuff[r*recvcount ..) of root; sendbuff read on root only.
 * In place on root when recvbuff == sendbuff + root*recvcount. */
CONCCL_API concclResult_t concclScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                        concclDataType_t datatype, int root, concclComm_t comm, cudaStream_t stream);

/* Point to point. A Send to peer p must be matched by a Recv from this rank on p with the same count
 * and datatype. Without a group each call blocks (host) or rendezvouses (CUDA) with its partner, so
 * exchanges in both directions must be put in a group. peer may equal the caller's rank. */
CONCCL_API concclResult_t concclSend(const void* sendbuff, size_t count, concclDataType_t datatype, int peer,
                                     concclComm_t comm, cudaStream_t stream);
CONCCL_API concclResult_t concclRecv(void* recvbuff, size_t count, concclDataType_t datatype, int peer,
                                     concclComm_t comm, cudaStream_t stream);

/* ---------------------------------------------------------------------------------------------- */
/* What a call will occupy: plan a concurrent GEMM around it                                       */

/* The collectives concclCallResources answers for (those described by a count and a type). */
typedef enum {
  concclCollAllGather = 0,
  concclCollReduceScatter = 1,
  concclCollAllReduce = 2,
  concclCollBroadcast = 3,
  concclCollReduce = 4,
  concclCollAllToAll = 5,
  concclCollGather = 6,
  concclCollScatter = 7,
  concclNumColls = 8
} concclCollective_t;

/* How a call moves its data on this rank. */
typedef enum {
  concclPathHost = 0,            /* host backend: host threads, no GPU */
  concclPathCopyEngines = 1,     /* copy engines and stream memory operations only: no conccl kernel */
  concclPathSmallKernel = 2,     /* the small-message kernel: one CTA runs the rank's whole part (config.smallMessageBytes) */
  concclPathReduceKernel = 3     /* copy engines plus the reduction kernel on `ctas` CTAs (reduce-scatter, all-reduce, ...) */
} concclCallPath_t;

typedef struct {
  concclCallPath_t path;
  int ctas;           /* most CTAs of any conccl kernel of the call on this rank (its kernels run one after the other on
                         the stream); 0 for concclPathCopyEngines and concclPathHost */
  int sms;            /* most SMs the call's kernels can occupy on this rank's GPU at once: ctas (a CTA occupies at most
                         one SM), never above config.smBudget. Give a concurrent GEMM (device SMs - sms), e.g. as
                         cuBLASLt's CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, to leave them free */
  int highPriority;   /* 1: the kernels are launched at the greatest stream priority (config.highPriority) */
  size_t sameDeviceCopyBytes; /* bytes the call copies between two buffers of this rank's GPU (e.g. a rank's own block of
                                 an out-of-place all-gather on the copy-engine path). Current drivers run such copies as
                                 CUDA's own copy kernels on SMs, outside `sms` and conccl's control (README, FACTS) */
} concclCallResources_t;

/* What `coll` with `count` elements of `datatype` (count as the collective's own call takes it: sendcount, recvcount
 * or count) and `root` (rooted collectives; ignored by the others) will occupy on this communicator's rank, answered
 * by the same decision code the call itself runs (the schedule the call would build, the small-message and reduction
 * thresholds, config.reduceCtas and config.smBudget), for an out-of-place call with op concclSum. No GPU work, no
 * communication, no host wait: it may be called at any time, also inside a group and while capturing. In-place calls
 * and other ops use the same path and at most the same CTAs. Reduction CTAs are an upper bound: the kernel launches
 * fewer when a piece has too few elements to give each CTA work. With several ranks on one GPU their resources add up.
 * concclC3Plan runs the same decision code, without a communicator, for the call its workload describes.
 * Errors: concclInvalidArgument for NULL comm or out, a bad collective, datatype or root, a count whose bytes overflow,
 * or a reduction over an fp8 type; concclInvalidUsage for a destroyed or failed communicator. */
CONCCL_API concclResult_t concclCallResources(concclComm_t comm, concclCollective_t coll, size_t count,
                                              concclDataType_t datatype, int root, concclCallResources_t* out);

/* Size in bytes of one element of datatype (0 for an invalid type). */
CONCCL_API size_t concclTypeSize(concclDataType_t datatype);

/* ---------------------------------------------------------------------------------------------- */
/* C3 planning: how to run a GEMM and a collective at the same time (docs/c3.md)                   */

/* The collective of a C3 workload. */
typedef enum {
  concclC3AllGather = 0,
  concclC3ReduceScatter = 1,
  concclC3AllReduce = 2,
  concclC3AllToAll = 3,
  concclC3Broadcast = 4
} concclC3Collective_t;

/* The strategies conccl-c3 measures (docs/c3.md, "Strategies"). */
typedef enum {
  concclC3Serial = 0,   /* the collective (NCCL's; conccl's without NCCL), then the GEMM: overlap cannot pay */
  concclC3Nccl = 1,     /* NCCL beside the GEMM, default stream priorities */
  concclC3NcclSp = 2,   /* NCCL on a greatest-priority stream, launched before the GEMM */
  concclC3NcclRp = 3,   /* NCCL with config.maxCTAs = collectiveCtas, the GEMM limited to gemmSmCount SMs */
  concclC3NcclCe = 4,   /* NCCL's copy-engine collectives (CTAPolicy ZERO, symmetric windows); AG, A2A only */
  concclC3Conccl = 5,   /* conccl (copy engines) beside the GEMM on all SMs */
  concclC3ConcclRp = 6  /* conccl, the GEMM limited to gemmSmCount SMs */
} concclC3Strategy_t;

/* A GEMM D[M,N] = A[M,K] x B[K,N] and the collective that should run beside it. */
typedef struct {
  int64_t m, n, k;
  concclDataType_t gemmType;       /* concclBfloat16, concclFloat16, concclFloat8e4m3 or concclFloat32 */
  concclC3Collective_t collective;
  size_t bytes;                    /* per rank, as nccl-tests counts them: the output of an all-gather, the input
                                      of a reduce-scatter, the buffer of an all-reduce or broadcast, everything a
                                      rank sends in an all-to-all */
  int nranks;                      /* ranks of the collective (>= 1) */
  int smCount;                     /* SMs of the GPU; 0: 132 (H100/H200) */
  int allowNccl;                   /* non-zero: the caller can run NCCL, so NCCL strategies are candidates */
} concclC3Workload_t;

/* The planner's decision. */
typedef struct {
  concclC3Strategy_t strategy;
  int useConccl;              /* 1: run the collective with conccl, 0: with NCCL */
  int gemmSmCount;            /* SM-count target for the GEMM (cuBLASLt CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET);
                                 0: all SMs. NcclRp: smCount - 8 (at least 8). ConcclRp: smCount - collectiveCtas (at
                                 least 8), or 0 when conccl's call occupies no SM (copy engines only) */
  int collectiveCtas;         /* NcclRp: NCCL config.maxCTAs (8). When the collective runs on conccl: the `sms`
                                 concclCallResources reports for the busiest rank of the call (see concclC3Plan);
                                 0: NCCL's default, or a conccl call on copy engines only */
  int collectiveHighPriority; /* 1: put the collective on a greatest-priority stream and launch it first */
  double predictedUs;         /* predicted time of GEMM and collective together, from their common start */
  double predictedSerialUs;   /* predicted time of one after the other (GEMM + NCCL's collective alone) */
} concclC3Plan_t;

/* Picks the strategy with the least predicted overlapped time for `workload` and writes it to `plan`. Pure
 * computation on the host: no GPU, communicator or stream is touched, and it may be called before any other
 * conccl call. The isolated times are predicted (roofline GEMM at 80% of the H200 datasheet peaks, an
 * alpha-beta collective of 25 us + 370 GB/s bus bandwidth), the slowdowns each strategy causes come from a
 * calibration: the file named by CONCCL_C3_CALIBRATION (written by `conccl-c3 --calibrate FILE` on the machine,
 * read once per path and process), else built-in priors. Serial wins ties.
 * conccl's CTAs (collectiveCtas, and the ConcclRp gemmSmCount) come from the same decision code as
 * concclCallResources, run on the CPU for the call the workload describes: an out-of-place bf16 call with op sum
 * (count = bytes / 2, divided by nranks for all-gather, reduce-scatter and all-to-all) on a CUDA communicator of nranks
 * ranks, one GPU each with peer access between all of them, created without a config struct (so the CONCCL_*
 * variables in force and the defaults for nranks GPUs apply: CONCCL_REDUCE_CTAS, CONCCL_SM_BUDGET,
 * CONCCL_SMALL_MESSAGE_BYTES, CONCCL_ENGINE, ...). A communicator whose GPUs lack peer access, that is shared by
 * ranks of one GPU or configured otherwise may differ: concclCallResources on it is exact. Copies between two buffers
 * of one GPU (concclCallResources_t.sameDeviceCopyBytes) are CUDA's copy kernels and not counted.
 * Errors: concclInvalidArgument for NULL pointers, non-positive dimensions or bytes, nranks < 1, an
 * unsupported gemmType or collective, a calibration file that cannot be read, or a bad CONCCL_* variable. */
CONCCL_API concclResult_t concclC3Plan(const concclC3Workload_t* workload, concclC3Plan_t* plan);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* CONCCL_CONCCL_H_ */
