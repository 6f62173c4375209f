// NCCL's C API, communicator and process level: version, errors, communicators, registration, memory,
// reduction ops, groups. Unique ids and ncclCommInitRank* are in shim_init.cc, the collectives in
// shim_collectives.cc. Each function either runs on conccl's public API, forwards to the real NCCL, or fails with
// an ncclResult_t and a message (ncclGetLastError).
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "nccl/call_time.h"
#include "nccl/nccl_abi.h"
#include "nccl/registration_counts.h"
#include "nccl/shim_comm.h"
#include "nccl/shim_hierarchical.h"
#include "nccl/type_map.h"

using namespace conccl::nccl;

namespace {

constexpr const char* kNullComm = "comm is NULL";

bool realAvailable() { return shim().real->available(); }

// Calls on this communicator go to the real NCCL: it was forwarded at init, or it is the real NCCL's own
// (passed by the real NCCL calling one of its exported functions, see shim_comm.h).
bool forwarded(ncclComm_t comm) { return !isShimComm(comm) || comm->path == Path::kNccl; }

// Pointers from concclMemAlloc, so that ncclMemFree frees each with the library that allocated it.
std::mutex& memMutex() {
  static std::mutex m;
  return m;
}
std::unordered_set<void*>& concclAllocations() {
  static auto* s = new std::unordered_set<void*>;
  return *s;
}

}  // namespace

CONCCL_NCCL_EXPORT ncclResult_t ncclGetVersion(int* version) {
  if (!shim().env.enabled || fromRealNccl(__builtin_return_address(0)))
    CONCCL_NCCL_FORWARD(nullptr, ncclGetVersion, version);
  if (version == nullptr) return fail(nullptr, ncclInvalidArgument, "ncclGetVersion: version is NULL");
  *version = kNcclVersionCode;  // the API the shim implements (callers gate features on it)
  return ncclSuccess;
}

CONCCL_NCCL_EXPORT const char* ncclGetErrorString(ncclResult_t result) { return ncclResultString(result); }

CONCCL_NCCL_EXPORT const char* ncclGetLastError(ncclComm_t comm) {
  if (comm != nullptr && forwarded(comm)) {
    auto fn = realFn<decltype(&::ncclGetLastError)>("ncclGetLastError");
    if ((!isShimComm(comm) || comm->lastError.empty()) && fn != nullptr) return fn(realComm(comm));
  }
  if (isShimComm(comm) && !comm->lastError.empty()) return comm->lastError.c_str();
  if (comm == nullptr && threadLastError()[0] == '\0' && realAvailable()) {
    auto fn = realFn<decltype(&::ncclGetLastError)>("ncclGetLastError");
    if (fn != nullptr) return fn(nullptr);
  }
  return threadLastError();
}

// ncclGetUniqueId, ncclCommInitRank, ncclCommInitRankConfig, ncclCommInitRankScalable: shim_init.cc.

CONCCL_NCCL_EXPORT ncclResult_t ncclCommInitAll(ncclComm_t* comm, int ndev, const int* devlist) {
  if (comm == nullptr || ndev < 1) return fail(nullptr, ncclInvalidArgument, "ncclCommInitAll: bad arguments");
  Decision d = decideInitAll(shim().env, realAvailable());
  if (d.path == Path::kFail) return fail(nullptr, ncclInvalidUsage, "ncclCommInitAll: " + d.reason);
  if (d.path == Path::kNccl) {
    auto fn = realFn<decltype(&::ncclCommInitAll)>("ncclCommInitAll");
    if (fn == nullptr) return fail(nullptr, ncclInvalidUsage, "ncclCommInitAll: real NCCL lacks it");
    std::vector<ncclComm_t> real(static_cast<size_t>(ndev), nullptr);
    ncclResult_t r = fn(real.data(), ndev, devlist);
    if (r != ncclSuccess) return r;
    for (int i = 0; i < ndev; ++i) {
      comm[i] = wrapComm(Path::kNccl, nullptr, real[i], "ncclCommInitAll", d.reason, i, ndev);
    }
    return ncclSuccess;
  }
  std::vector<concclComm_t> cs(static_cast<size_t>(ndev), nullptr);
  concclConfig_t config = CONCCL_CONFIG_INITIALIZER;
  // NCCL's buffers are device memory: the CUDA backend, unless CONCCL_BACKEND=host is set explicitly, which only
  // the shim's CPU tests do (host buffers, NULL streams) to run the conccl path without a GPU.
  const char* backend = std::getenv("CONCCL_BACKEND");
  if (backend == nullptr || std::strcmp(backend, "host") != 0) config.backend = concclBackendCuda;
  concclResult_t r = concclCommInitAll(cs.data(), ndev, devlist, &config);
  if (r != concclSuccess) return fromConccl(nullptr, r, "ncclCommInitAll");
  for (int i = 0; i < ndev; ++i) {
    comm[i] = wrapComm(Path::kConccl, cs[i], nullptr, "ncclCommInitAll", d.reason, i, ndev);
    comm[i]->singleProcess = true;
  }
  return ncclSuccess;
}

CONCCL_NCCL_EXPORT ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  if (comm == nullptr) return fail(nullptr, ncclInvalidArgument, std::string("ncclCommFinalize: ") + kNullComm);
  if (forwarded(comm)) CONCCL_NCCL_FORWARD(comm, ncclCommFinalize, realComm(comm));
  // conccl has no separate finalize: concclCommDestroy waits for the communicator's work.
  return ncclSuccess;
}

CONCCL_NCCL_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;  // as NCCL
  ncclResult_t r = ncclSuccess;
  if (forwarded(comm)) {
    // A communicator across hosts: its node's and rail's communicators first, then the flat one.
    if (isShimComm(comm) && comm->hier != nullptr) r = releaseShimHier(comm->hier, false);
    auto fn = realFn<decltype(&::ncclCommDestroy)>("ncclCommDestroy");
    ncclResult_t rf = fn ? fn(realComm(comm)) : ncclInvalidUsage;
    if (r == ncclSuccess) r = rf;
  } else {
    if (comm->conccl != nullptr) r = fromConccl(nullptr, concclCommDestroy(comm->conccl), "ncclCommDestroy");
    // The PreMulSum scratch is freed with the wrapper, once conccl waited for the communicator's work; if that wait
    // failed, work may still be in flight (or stuck): drop it unfreed rather than let cudaFree wait for it.
    if (r != ncclSuccess) forgetPreMulScratch(comm);
  }
  if (isShimComm(comm)) delete comm;
  return r;
}

CONCCL_NCCL_EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;  // as NCCL
  ncclResult_t r = ncclSuccess;
  if (forwarded(comm)) {
    // The real NCCL's communicators first (the flat one here, the rail in releaseShimHier): their abort ends kernels
    // that wait for a dead peer, and conccl's abort of the intra-node communicator lets the work queued behind them
    // on the rank's stream drain before it returns.
    auto fn = realFn<decltype(&::ncclCommAbort)>("ncclCommAbort");
    r = fn ? fn(realComm(comm)) : ncclInvalidUsage;
    if (isShimComm(comm) && comm->hier != nullptr) {
      const ncclResult_t rh = releaseShimHier(comm->hier, true);
      if (r == ncclSuccess) r = rh;
    }
  } else {
    if (comm->conccl != nullptr) r = fromConccl(nullptr, concclCommAbort(comm->conccl), "ncclCommAbort");
    forgetPreMulScratch(comm);
  }
  if (isShimComm(comm)) delete comm;
  return r;
}

CONCCL_NCCL_EXPORT ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  if (comm == nullptr) return fail(nullptr, ncclInvalidArgument, std::string("ncclCommRevoke: ") + kNullComm);
  if (forwarded(comm)) CONCCL_NCCL_FORWARD(comm, ncclCommRevoke, realComm(comm), revokeFlags);
  return fail(comm, ncclInvalidUsage, "ncclCommRevoke is not implemented on conccl communicators");
}

CONCCL_NCCL_EXPORT ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                                              ncclConfig_t* config) {
  if (comm == nullptr || newcomm == nullptr) return fail(comm, ncclInvalidArgument, "ncclCommSplit: NULL argument");
  Decision d = decideSplit(forwarded(comm) ? Path::kNccl : Path::kConccl);
  if (d.path == Path::kConccl) return splitConccl(comm, color, key, newcomm);
  // A shim communicator on NCCL, outside groups: its children on one host go to conccl (shim_split.cc).
  if (d.path == Path::kNccl && isShimComm(comm) && shim().env.enabled && groupDepth() == 0) {
    return splitNccl(comm, color, key, newcomm, config);
  }
  if (d.path != Path::kNccl) return fail(comm, ncclInvalidUsage, "ncclCommSplit: " + d.reason);
  auto fn = realFn<decltype(&::ncclCommSplit)>("ncclCommSplit");
  if (fn == nullptr) return fail(comm, ncclInvalidUsage, "ncclCommSplit: real NCCL lacks it");
  ncclComm_t real = nullptr;
  ncclResult_t r = fn(realComm(comm), color, key, &real, config);
  if (r != ncclSuccess && r != ncclInProgress) return r;
  *newcomm = real == nullptr ? nullptr : wrapComm(Path::kNccl, nullptr, real, "ncclCommSplit", d.reason);
  return r;
}

CONCCL_NCCL_EXPORT ncclResult_t ncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
                                               ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags) {
  if (comm == nullptr || newcomm == nullptr) return fail(comm, ncclInvalidArgument, "ncclCommShrink: NULL argument");
  if (!forwarded(comm)) {
    return fail(comm, ncclInvalidUsage, "ncclCommShrink is not implemented on conccl communicators");
  }
  auto fn = realFn<decltype(&::ncclCommShrink)>("ncclCommShrink");
  if (fn == nullptr) return fail(comm, ncclInvalidUsage, "ncclCommShrink: real NCCL lacks it");
  ncclComm_t real = nullptr;
  ncclResult_t r = fn(realComm(comm), excludeRanksList, excludeRanksCount, &real, config, shrinkFlags);
  if (r != ncclSuccess && r != ncclInProgress) return r;
  *newcomm = real == nullptr ? nullptr : wrapComm(Path::kNccl, nullptr, real, "ncclCommShrink", "parent on NCCL");
  return r;
}

CONCCL_NCCL_EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  if (comm == nullptr || asyncError == nullptr) {
    return fail(comm, ncclInvalidArgument, "ncclCommGetAsyncError: NULL argument");
  }
  if (isShimComm(comm) && comm->hier != nullptr) return hierAsyncError(comm, asyncError);
  if (forwarded(comm)) CONCCL_NCCL_FORWARD(comm, ncclCommGetAsyncError, realComm(comm), asyncError);
  concclResult_t e = concclSuccess;
  concclResult_t r = concclCommGetAsyncError(comm->conccl, &e);
  if (r != concclSuccess) return fromConccl(comm, r, "ncclCommGetAsyncError");
  *asyncError = static_cast<ncclResult_t>(toNcclResult(e));
  return ncclSuccess;
}

CONCCL_NCCL_EXPORT ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  if (comm == nullptr) return fail(nullptr, ncclInvalidArgument, std::string("ncclCommCount: ") + kNullComm);
  if (forwarded(comm)) CONCCL_NCCL_FORWARD(comm, ncclCommCount, realComm(comm), count);
  return fromConccl(comm, concclCommCount(comm->conccl, count), "ncclCommCount");
}

CONCCL_NCCL_EXPORT ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  if (comm == nullptr) return fail(nullptr, ncclInvalidArgument, std::string("ncclCommCuDevice: ") + kNullComm);
  if (forwarded(comm)) CONCCL_NCCL_FORWARD(comm, ncclCommCuDevice, realComm(comm), device);
  return fromConccl(comm, concclCommCuDevice(comm->conccl, device), "ncclCommCuDevice");
}

CONCCL_NCCL_EXPORT ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (comm == nullptr) return fail(nullptr, ncclInvalidArgument, std::string("ncclCommUserRank: ") + kNullComm);
  if (forwarded(comm)) CONCCL_NCCL_FORWARD(comm, ncclCommUserRank, realComm(comm), rank);
  return fromConccl(comm, concclCommUserRank(comm->conccl, rank), "ncclCommUserRank");
}

CONCCL_NCCL_EXPORT ncclResult_t ncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle) {
  if (comm == nullptr) return fail(nullptr, ncclInvalidArgument, std::string("ncclCommRegister: ") + kNullComm);
  if (forwarded(comm)) CONCCL_NCCL_FORWARD(comm, ncclCommRegister, realComm(comm), buff, size, handle);
  const concclResult_t r = concclCommRegister(comm->conccl, buff, size, handle);
  if (r == concclSuccess) countRegistration(&RegistrationCounts::registered);
  return fromConccl(comm, r, "ncclCommRegister");
}

CONCCL_NCCL_EXPORT ncclResult_t ncclCommDeregister(const ncclComm_t comm, void* handle) {
  if (comm == nullptr) return fail(nullptr, ncclInvalidArgument, std::string("ncclCommDeregister: ") + kNullComm);
  if (forwarded(comm)) CONCCL_NCCL_FORWARD(comm, ncclCommDeregister, realComm(comm), handle);
  const concclResult_t r = concclCommDeregister(comm->conccl, handle);
  if (r == concclSuccess) countRegistration(&RegistrationCounts::deregistered);
  return fromConccl(comm, r, "ncclCommDeregister");
}

CONCCL_NCCL_EXPORT ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win,
                                                       int winFlags) {
  if (comm == nullptr || win == nullptr) {
    return fail(comm, ncclInvalidArgument, "ncclCommWindowRegister: NULL argument");
  }
  if (forwarded(comm)) {
    CONCCL_NCCL_FORWARD(comm, ncclCommWindowRegister, realComm(comm), buff, size, win, winFlags);
  }
  // conccl's windows are registered collectively and used symmetrically, which is what NCCL_WIN_COLL_SYMMETRIC
  // asks for; other flags ask nothing conccl would do differently.
  concclWindow_t w = nullptr;
  concclResult_t r = concclCommWindowRegister(comm->conccl, buff, size, &w);
  if (r != concclSuccess) return fromConccl(comm, r, "ncclCommWindowRegister");
  countRegistration(&RegistrationCounts::windowsRegistered);
  *win = reinterpret_cast<ncclWindow_t>(w);
  return ncclSuccess;
}

CONCCL_NCCL_EXPORT ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
  if (comm == nullptr) return fail(nullptr, ncclInvalidArgument, std::string("ncclCommWindowDeregister: ") + kNullComm);
  if (forwarded(comm)) CONCCL_NCCL_FORWARD(comm, ncclCommWindowDeregister, realComm(comm), win);
  const concclResult_t r = concclCommWindowDeregister(comm->conccl, reinterpret_cast<concclWindow_t>(win));
  if (r == concclSuccess) countRegistration(&RegistrationCounts::windowsDeregistered);
  return fromConccl(comm, r, "ncclCommWindowDeregister");
}

// With the shim on, memory comes from conccl (cudaMalloc'd: exportable to conccl's peers with CUDA IPC, and
// usable by NCCL's collectives too, though NCCL's symmetric windows want its own cuMem allocations).
CONCCL_NCCL_EXPORT ncclResult_t ncclMemAlloc(void** ptr, size_t size) {
  if (!shim().env.enabled || fromRealNccl(__builtin_return_address(0)))
    CONCCL_NCCL_FORWARD(nullptr, ncclMemAlloc, ptr, size);
  concclResult_t r = concclMemAlloc(ptr, size);
  if (r != concclSuccess) return fromConccl(nullptr, r, "ncclMemAlloc");
  std::lock_guard<std::mutex> lock(memMutex());
  concclAllocations().insert(*ptr);
  return ncclSuccess;
}

CONCCL_NCCL_EXPORT ncclResult_t ncclMemFree(void* ptr) {
  {
    std::lock_guard<std::mutex> lock(memMutex());
    auto it = concclAllocations().find(ptr);
    if (it != concclAllocations().end()) {
      concclAllocations().erase(it);
      return fromConccl(nullptr, concclMemFree(ptr), "ncclMemFree");
    }
  }
  CONCCL_NCCL_FORWARD(nullptr, ncclMemFree, ptr);
}

CONCCL_NCCL_EXPORT ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                                         ncclScalarResidence_t residence, ncclComm_t comm) {
  if (comm == nullptr) return fail(nullptr, ncclInvalidArgument, std::string("ncclRedOpCreatePreMulSum: ") + kNullComm);
  if (forwarded(comm)) {
    CONCCL_NCCL_FORWARD(comm, ncclRedOpCreatePreMulSum, op, scalar, datatype, residence, realComm(comm));
  }
  return createPreMulSum(comm, op, scalar, datatype, residence);
}

CONCCL_NCCL_EXPORT ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  if (comm == nullptr) return fail(nullptr, ncclInvalidArgument, std::string("ncclRedOpDestroy: ") + kNullComm);
  if (forwarded(comm)) CONCCL_NCCL_FORWARD(comm, ncclRedOpDestroy, op, realComm(comm));
  return destroyPreMulSum(comm, op);
}

// A group may hold calls on communicators of both paths: open and close it in both libraries.
CONCCL_NCCL_EXPORT ncclResult_t ncclGroupStart() {
  const ShimCallTimer timer;  // conccl's own host time per call (call_time.h)
  ncclResult_t r = fromConccl(nullptr, concclGroupStart(), "ncclGroupStart");
  if (r == ncclSuccess && ++groupDepth() == 1) {
    static std::atomic<uint64_t> epochs{0};
    groupEpoch() = ++epochs;  // PreMulSum calls of this group each get their own scratch region
  }
  if (realAvailable()) {
    auto fn = realFn<decltype(&::ncclGroupStart)>("ncclGroupStart");
    ncclResult_t rr = fn ? fn() : ncclSuccess;
    if (r == ncclSuccess) r = rr;
  }
  return r;
}

namespace {

// The end of the calling thread's outermost group, after conccl launched (or dropped) its calls: the PreMulSum and
// staging scratch the group's calls held becomes reusable, then the deferred inits run (outside any conccl group).
ncclResult_t endOutermostGroup() {
  const uint64_t epoch = groupEpoch();
  groupEpoch() = 0;
  releaseGroupScratch(epoch);
  return runPendingInits();
}

// NCCL's check of an ncclSimInfo_t (group.cc, ncclGroupEndInternal): the caller's size (at most ours) is what is
// read and written back, and the magic of NCCL_SIM_INFO_INITIALIZER must be there.
constexpr unsigned kSimInfoMagic = 0x74685283;

size_t simInfoSize(const ncclSimInfo_t* simInfo) {
  size_t size = 0;
  std::memcpy(&size, &simInfo->size, sizeof(size));
  return size < sizeof(ncclSimInfo_t) ? size : sizeof(ncclSimInfo_t);
}

bool simInfoValid(const ncclSimInfo_t* simInfo) {
  ncclSimInfo_t copy = NCCL_SIM_INFO_INITIALIZER;
  copy.magic = 0;
  std::memcpy(static_cast<void*>(&copy), simInfo, simInfoSize(simInfo));
  return copy.magic == kSimInfoMagic;
}

}  // namespace

CONCCL_NCCL_EXPORT ncclResult_t ncclGroupEnd() {
  const ShimCallTimer timer;  // conccl's own host time per call (call_time.h)
  ncclResult_t r = fromConccl(nullptr, concclGroupEnd(), "ncclGroupEnd");
  if (groupDepth() > 0 && --groupDepth() == 0) {
    ncclResult_t ri = endOutermostGroup();
    if (r == ncclSuccess) r = ri;
  }
  if (realAvailable()) {
    auto fn = realFn<decltype(&::ncclGroupEnd)>("ncclGroupEnd");
    ncclResult_t rr = fn ? fn() : ncclSuccess;
    if (r == ncclSuccess) r = rr;
  }
  return r;
}

// NCCL 2.28 (group.cc): with a simInfo, the outermost ncclGroupSimulateEnd ends the group without launching its
// operations and reports NCCL's estimate of their time; with NULL it is ncclGroupEnd; below the outermost level it
// ends one level. Here the group's calls on conccl communicators are dropped (concclGroupDiscard: nothing of them
// runs, the next group starts empty; PreMulSum pre-multiplications and in-place AllToAll staging copies, which the
// shim enqueues when the call is made, have already run into the shim's own scratch, which is released); calls on
// communicators forwarded to the real NCCL get the real ncclGroupSimulateEnd. conccl has no cost model exposed:
// when the group held calls on conccl communicators, estimatedTime is NCCL_UNDEF_FLOAT (unknown), otherwise what the
// real NCCL wrote. ncclCommInitRank calls deferred by the group run, as NCCL runs its init jobs. A simInfo not made
// with NCCL_SIM_INFO_INITIALIZER fails with ncclInvalidArgument after ending the group and dropping its calls, as
// NCCL's does.
CONCCL_NCCL_EXPORT ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t* simInfo) {
  if (simInfo == nullptr) return ncclGroupEnd();
  const bool outermost = groupDepth() == 1;
  size_t dropped = 0;
  ncclResult_t r = fromConccl(nullptr, concclGroupDiscard(&dropped), "ncclGroupSimulateEnd");
  const bool valid = simInfoValid(simInfo);
  if (groupDepth() > 0 && --groupDepth() == 0) {
    ncclResult_t ri = endOutermostGroup();
    if (r == ncclSuccess) r = ri;
  }
  if (realAvailable()) {
    auto fn = realFn<decltype(&::ncclGroupSimulateEnd)>("ncclGroupSimulateEnd");
    ncclResult_t rr = fn ? fn(simInfo) : ncclSuccess;
    if (r == ncclSuccess) r = rr;
  }
  if (outermost && !valid) {
    return fail(nullptr, ncclInvalidArgument,
                "ncclGroupSimulateEnd: simInfo was not initialized with NCCL_SIM_INFO_INITIALIZER (the group is "
                "ended and its calls dropped)");
  }
  if (outermost && dropped > 0 && r == ncclSuccess &&
      simInfoSize(simInfo) >= offsetof(ncclSimInfo_t, estimatedTime) + sizeof(float)) {
    const float unknown = NCCL_UNDEF_FLOAT;
    std::memcpy(reinterpret_cast<char*>(simInfo) + offsetof(ncclSimInfo_t, estimatedTime), &unknown, sizeof(float));
  }
  return r;
}
