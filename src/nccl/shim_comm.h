// The shim's communicator (NCCL's opaque `struct ncclComm`, defined here), its process-wide state and the
// helpers every exported function uses. Compiled only with the real nccl.h (CUDA builds that found it).
#ifndef CONCCL_NCCL_SHIM_COMM_H_
#define CONCCL_NCCL_SHIM_COMM_H_

#include <conccl/conccl.h>
#include <nccl.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "nccl/cuda_device_guard.h"
#include "nccl/real_nccl.h"
#include "nccl/routing.h"
#include "nccl/shim_env.h"

// Exported with NCCL's names; everything else in the shim stays hidden (CMAKE_CXX_VISIBILITY_PRESET hidden).
#define CONCCL_NCCL_EXPORT extern "C" __attribute__((visibility("default")))

// One rank of a communicator, on one path for its whole life. `real` is the real NCCL's handle (path kNccl),
// `conccl` conccl's (path kConccl); the application sees only this wrapper.
// The real NCCL calls some of its own exported functions through the PLT (ncclBroadcast from ncclBcast,
// ncclCommRegister, ncclCommGetAsyncError, ncclMemAlloc, ncclGetUniqueId, ...: `readelf -r libnccl.so.2`), so
// with the shim preloaded those calls land here, with the real NCCL's own communicators. `magic` tells a
// wrapper from a real communicator (whose first field is NCCL's own start magic), and fromRealNccl() tells a
// call made by the real library from the application's.
inline constexpr uint64_t kShimCommMagic = 0x636f6e63636c5368ull;  // "conccl" "Sh"
namespace conccl::nccl {
// The PreMulSum ops and their scratch memory of a conccl communicator (shim_premul.cc), made on first use.
struct PreMulState;
struct PreMulStateDeleter {
  void operator()(PreMulState* state) const;
};
// The intra-node and rail communicators of a communicator across hosts (shim_hierarchical.h); freed by
// ncclCommDestroy / ncclCommAbort.
struct HierState;
}  // namespace conccl::nccl
struct ncclComm {
  uint64_t magic = kShimCommMagic;
  conccl::nccl::Path path = conccl::nccl::Path::kFail;
  concclComm_t conccl = nullptr;
  ncclComm_t real = nullptr;
  // conccl path: made by ncclCommInitAll (or split from such a communicator), all ranks in this process. Its
  // split then makes the children with concclCommInitAll (which the host backend needs) instead of InitRank.
  bool singleProcess = false;
  // [rank] = the host identity of each rank (routing.h), from the init's rendezvous or the split that made it;
  // empty when unknown (ncclCommInitAll, ids made without a rendezvous).
  std::vector<uint64_t> hosts;
  // path kNccl across hosts with the hierarchical path on: its collectives run in phases (shim_hierarchical.cc);
  // `real` stays the flat communicator (splits, groups, send/recv, and every call the phases cannot express).
  conccl::nccl::HierState* hier = nullptr;
  std::unique_ptr<conccl::nccl::PreMulState, conccl::nccl::PreMulStateDeleter> premul;
  std::string lastError;
};

namespace conccl::nccl {

struct Shim {
  ShimEnv env;
  RealNccl* real = nullptr;  // never null after shim(); may be unavailable
  bool logInfo = false;      // NCCL_DEBUG or CONCCL_DEBUG is INFO or TRACE
};

// Process-wide state, made on first use (thread-safe): the environment parsed once, the real NCCL opened once.
Shim& shim();

// NCCL_DEBUG-style line on stderr: "host:pid:tid NCCL INFO conccl-shim: ..." (INFO only with
// NCCL_DEBUG/CONCCL_DEBUG=INFO; WARN always).
void logInfo(const std::string& message);
void logWarn(const std::string& message);

// Whether comm is one of the shim's wrappers (a real NCCL communicator otherwise).
inline bool isShimComm(const ncclComm* comm) { return comm != nullptr && comm->magic == kShimCommMagic; }
// The handle to give the real NCCL: the wrapped one, or comm itself when the real NCCL passed its own.
inline ncclComm_t realComm(ncclComm_t comm) { return isShimComm(comm) ? comm->real : comm; }
// Whether `returnAddress` (__builtin_return_address(0) of an exported function) lies in the real NCCL.
bool fromRealNccl(const void* returnAddress);

// Records `message` as the last error of comm (if any) and of the calling thread; returns `result`.
ncclResult_t fail(ncclComm_t comm, ncclResult_t result, const std::string& message);
// The calling thread's last failure ("" if none).
const char* threadLastError();
// concclResult_t -> ncclResult_t, recording conccl's message on failure.
ncclResult_t fromConccl(ncclComm_t comm, concclResult_t result, const char* call);

// The real NCCL's function `name` with its nccl.h type, or nullptr.
template <class Fn>
Fn realFn(const char* name) {
  return reinterpret_cast<Fn>(shim().real->symbol(name));
}

// Wraps a communicator on `path` and logs its one line on stderr, always (rank, size, path, reason).
// rank / nranks: as the caller knows them, or -1 to ask the communicator (an NCCL communicator is asked only
// outside groups: inside one its init has not run yet).
ncclComm_t wrapComm(Path path, concclComm_t c, ncclComm_t real, const std::string& call, const std::string& reason,
                    int rank = -1, int nranks = -1);
// The line alone (for a conccl communicator whose init was deferred to ncclGroupEnd).
void logComm(ncclComm_t comm, const std::string& call, const std::string& reason, int rank = -1, int nranks = -1);


// ncclGroupStart/End nesting depth of the calling thread.
int& groupDepth();
// 0 outside groups; inside one, an id unique to the calling thread's outermost group (process-wide counter).
uint64_t& groupEpoch();

// This process's host identity (CONCCL_HOSTID > NCCL_HOSTID > hostname + boot id), read once (shim_init.cc).
const HostIdentity& thisHost();
// Runs the ncclCommInitRank calls the calling thread made inside its group, at the outermost ncclGroupEnd
// (shim_init.cc): one thread per rank, each meeting its peers and then initialising on its path.
ncclResult_t runPendingInits();

// ncclCommSplit of a conccl communicator (shim_split.cc).
ncclResult_t splitConccl(ncclComm_t comm, int color, int key, ncclComm_t* newcomm);
// ncclCommSplit of a shim communicator on the real NCCL (shim_split.cc): children whose ranks all share a host run
// on conccl, the others are split by the real NCCL.
ncclResult_t splitNccl(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config);

// PreMulSum on conccl communicators (shim_premul.cc).
ncclResult_t createPreMulSum(ncclComm_t comm, ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                             ncclScalarResidence_t residence);
ncclResult_t destroyPreMulSum(ncclComm_t comm, ncclRedOp_t op);
// After ncclCommAbort: the scratch memory is dropped without cudaFree (which would wait for a broken GPU queue).
void forgetPreMulScratch(ncclComm_t comm);
// Copies `bytes` of sendbuff into scratch memory of the communicator on `stream` (the same pool and rules as the
// pre-multiplied inputs), then returns run(staged copy), which enqueues the call: for calls NCCL allows in place and
// conccl does not (AllToAll).
ncclResult_t runWithStagedInput(ncclComm_t comm, const void* sendbuff, size_t bytes, cudaStream_t stream,
                                const char* call, const std::function<ncclResult_t(const void* staged)>& run);
// At the end of the calling thread's outermost group (launched or discarded): the scratch its calls held is fenced
// on their streams and reusable.
void releaseGroupScratch(uint64_t groupEpoch);
// AllReduce / Reduce / ReduceScatter with a created op: `inputCount` elements of sendbuff are pre-multiplied into
// scratch memory on `stream`, then summed by conccl. count: the collective's own count argument.
ncclResult_t runPreMulSum(ncclComm_t comm, Coll coll, const void* sendbuff, void* recvbuff, size_t count,
                          size_t inputCount, ncclDataType_t datatype, ncclRedOp_t op, int root, cudaStream_t stream,
                          const char* call);

}  // namespace conccl::nccl

// Calls the real NCCL's `name` with the arguments, failing cleanly if it is missing.
#define CONCCL_NCCL_FORWARD(comm, name, ...)                                                                 \
  do {                                                                                                       \
    auto fn_ = ::conccl::nccl::realFn<decltype(&::name)>(#name);                                             \
    if (fn_ == nullptr) {                                                                                    \
      return ::conccl::nccl::fail(                                                                           \
          comm, ncclInvalidUsage,                                                                            \
          std::string(#name ": no real NCCL to forward to (") + ::conccl::nccl::shim().real->error() + ")"); \
    }                                                                                                        \
    return fn_(__VA_ARGS__);                                                                                 \
  } while (0)

#endif  // CONCCL_NCCL_SHIM_COMM_H_
