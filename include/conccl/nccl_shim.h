/*
 * conccl/nccl_shim.h: the functions the NCCL drop-in (libconccl_nccl.so, docs/nccl-shim.md) exports beside NCCL's
 * API, for layers that sit on top of an NCCL program (the Python package's `conccl run` and `conccl.torch`, tests).
 *
 * Plain C, no nccl.h needed: `struct ncclComm*` is nccl.h's ncclComm_t. Look the symbols up with dlsym in the
 * process that preloaded the shim (or dlopen it: neither function initialises CUDA or opens the real NCCL).
 * Results are ncclResult_t values (0 = ncclSuccess); no function prints or exits.
 */
#ifndef CONCCL_NCCL_SHIM_H_
#define CONCCL_NCCL_SHIM_H_

#include <conccl/conccl.h>

#ifdef __cplusplus
extern "C" {
#endif

struct ncclComm;

/* NCCL_VERSION_CODE of the nccl.h the shim was compiled against (22809 for NCCL 2.28.9): the NCCL API the shim
 * exports and expects of the real NCCL it forwards to. Unlike ncclGetVersion, it does not depend on
 * CONCCL_NCCL_SHIM (which makes ncclGetVersion report the real NCCL's version when the shim is off). */
CONCCL_API int concclNcclShimAbiVersion(void);

/* The conccl communicator behind an NCCL communicator handed out by the shim (PyTorch: the value of
 * ProcessGroupNCCL's _comm_ptr()), so that conccl calls (conccl_ops.h) can run on the same ranks.
 *   comm    an ncclComm_t from this shim's ncclCommInitRank / ncclCommInitAll / ncclCommSplit
 *   out     receives the concclComm_t; owned by the shim (ncclCommDestroy frees it): never destroy it yourself
 * Returns 0 and sets *out when comm runs on conccl; 4 (ncclInvalidArgument) for NULL arguments or a handle the
 * shim did not make (a real NCCL communicator); 5 (ncclInvalidUsage) for a shim communicator forwarded to the real
 * NCCL (the job spans nodes, or CONCCL_NCCL_SHIM=0). *out is NULL on failure; ncclGetLastError(NULL) says why. */
CONCCL_API int concclNcclShimGetComm(struct ncclComm* comm, concclComm_t* out);

/* Host time spent inside the shim by the calling thread: nanoseconds in its collective, Send/Recv and group calls
 * (ncclAllReduce ... ncclRecv, ncclGroupStart / ncclGroupEnd) since its previous call of this function (or since the
 * thread started), and in *calls (when not NULL) how many such calls that was; resets both. A call that makes another
 * of them counts once. This is conccl's own share of a framework's call (PyTorch adds its own work around it):
 * tests/torch/skew_host_time.py reads it after each measured call. */
CONCCL_API uint64_t concclNcclShimTakeCallNs(uint64_t* calls);

/* Buffer registrations the shim's conccl communicators of this process accepted since it started: successful
 * ncclCommRegister calls in *registered, ncclCommDeregister in *deregistered, ncclCommWindowRegister /
 * ncclCommWindowDeregister in *windowsRegistered / *windowsDeregistered (any of them may be NULL). Calls forwarded
 * to the real NCCL are not counted. Shows whether a framework's registration hooks reach the library (PyTorch's
 * TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK=1 registers every segment of its caching allocator;
 * ProcessGroupNCCL.register_mem_pool a pool's): tests/torch reads it. */
CONCCL_API void concclNcclShimRegistrationCounts(uint64_t* registered, uint64_t* deregistered,
                                                 uint64_t* windowsRegistered, uint64_t* windowsDeregistered);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* CONCCL_NCCL_SHIM_H_ */
