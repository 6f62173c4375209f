// ncclCommSplit of a conccl communicator, on conccl's public API (conccl has no split of its own):
//   1. every parent rank all-gathers (color, key, device, a fresh conccl unique id) over the parent, on a private
//      stream, and waits for it (split is a blocking, collective init call in NCCL too);
//   2. every rank computes the same placement from that table (split_plan.h);
//   3. the ranks of one color create the child from the unique id of the child's rank 0: concclCommInitRank on
//      each rank (ranks in several processes), or, when the parent was made by ncclCommInitAll (all ranks in this
//      process, possibly the host backend, which has no InitRank), one concclCommInitAll by the child's rank 0
//      whose handles the other ranks pick up in this process.
// NCCL_SPLIT_NOCOLOR ranks take part in step 1 and get a NULL communicator. The child inherits the parent's
// resolved conccl configuration; NCCL's config fields (CTAs, split sharing, ...) ask nothing conccl does.
#include <cuda_runtime_api.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "nccl/shim_comm.h"
#include "nccl/split_plan.h"
#include "nccl/type_map.h"

namespace conccl::nccl {
namespace {

struct SplitEntry {
  int32_t color;
  int32_t key;
  int32_t device;
  int32_t reserved;
  char id[CONCCL_UNIQUE_ID_BYTES];
};

// All-gather of one SplitEntry per rank over the parent. Host backend: host buffers, NULL stream. CUDA backend:
// device buffers from cudaMalloc (exportable to peer processes) and a private stream, synchronised before
// returning; the call is blocking anyway, so the device-wide synchronisation of cudaMalloc/cudaFree costs nothing
// that matters here.
std::string allGatherEntries(ncclComm_t comm, bool hostBackend, int device, int nranks, const SplitEntry& mine,
                             std::vector<SplitEntry>* all) {
  all->assign(static_cast<size_t>(nranks), SplitEntry{});
  const size_t bytes = sizeof(SplitEntry);
  if (hostBackend) {
    concclResult_t r = concclAllGather(&mine, all->data(), bytes, concclUint8, comm->conccl, nullptr);
    return r == concclSuccess ? "" : std::string("concclAllGather: ") + concclGetLastError(comm->conccl);
  }
  CudaDeviceGuard guard(device);
  if (!guard.ok()) return "cudaSetDevice(" + std::to_string(device) + ") failed";
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  cudaThreadExchangeStreamCaptureMode(&mode);
  char* buf = nullptr;
  cudaStream_t stream = nullptr;
  std::string error;
  const size_t recvOffset = 256;
  if (cudaMalloc(&buf, recvOffset + bytes * static_cast<size_t>(nranks)) != cudaSuccess) {
    error = "cudaMalloc failed";
  } else if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
    error = "cudaStreamCreateWithFlags failed";
  } else if (cudaMemcpyAsync(buf, &mine, bytes, cudaMemcpyHostToDevice, stream) != cudaSuccess) {
    error = "cudaMemcpyAsync failed";
  } else if (concclAllGather(buf, buf + recvOffset, bytes, concclUint8, comm->conccl, stream) != concclSuccess) {
    error = std::string("concclAllGather: ") + concclGetLastError(comm->conccl);
  } else if (cudaMemcpyAsync(all->data(), buf + recvOffset, bytes * static_cast<size_t>(nranks),
                             cudaMemcpyDeviceToHost, stream) != cudaSuccess ||
             cudaStreamSynchronize(stream) != cudaSuccess) {
    error = "copying the gathered table back failed";
  }
  if (!error.empty()) {
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) error += std::string(" (") + cudaGetErrorString(e) + ")";
  }
  if (stream != nullptr) cudaStreamDestroy(stream);
  if (buf != nullptr) cudaFree(buf);
  cudaThreadExchangeStreamCaptureMode(&mode);
  return error;
}

// Children of a single-process parent: the child's rank 0 creates all its ranks with one concclCommInitAll and
// leaves each rank's handle here, under the child's unique id, for the thread driving that rank.
struct LocalSplit {
  bool done = false;
  std::string error;
  std::vector<concclComm_t> comms;
  int taken = 0;
};
std::mutex& localSplitMutex() {
  static std::mutex m;
  return m;
}
std::condition_variable& localSplitCv() {
  static std::condition_variable cv;
  return cv;
}
std::map<std::string, LocalSplit>& localSplits() {
  static auto* m = new std::map<std::string, LocalSplit>;
  return *m;
}

std::string createLocalChild(const std::string& idKey, const SplitPlacement& p, const std::vector<SplitEntry>& all,
                             const concclConfig_t& config, int timeoutMs, concclComm_t* child) {
  const int n = static_cast<int>(p.parents.size());
  if (p.newRank == 0) {
    std::vector<int> devices;
    for (int parent : p.parents) devices.push_back(all[static_cast<size_t>(parent)].device);
    std::vector<concclComm_t> comms(static_cast<size_t>(n), nullptr);
    concclResult_t r = concclCommInitAll(comms.data(), n, devices.data(), &config);
    std::lock_guard<std::mutex> lock(localSplitMutex());
    LocalSplit& s = localSplits()[idKey];
    s.done = true;
    if (r != concclSuccess) s.error = std::string("concclCommInitAll: ") + concclGetLastError(nullptr);
    s.comms = comms;
    localSplitCv().notify_all();
  }
  std::unique_lock<std::mutex> lock(localSplitMutex());
  bool arrived = localSplitCv().wait_for(lock, std::chrono::milliseconds(timeoutMs),
                                         [&] { return localSplits()[idKey].done; });
  LocalSplit& s = localSplits()[idKey];
  if (!arrived) {
    if (++s.taken == n) localSplits().erase(idKey);
    return "the child's rank 0 did not create it within " + std::to_string(timeoutMs) + " ms";
  }
  std::string error = s.error;
  if (error.empty()) *child = s.comms[static_cast<size_t>(p.newRank)];
  if (++s.taken == n) localSplits().erase(idKey);
  return error;
}

}  // namespace

ncclResult_t splitConccl(ncclComm_t comm, int color, int key, ncclComm_t* newcomm) {
  const char* call = "ncclCommSplit";
  if (comm->conccl == nullptr) {
    return fail(comm, ncclInvalidUsage, "ncclCommSplit: the communicator's init failed or waits for ncclGroupEnd");
  }
  if (groupDepth() > 0) {
    // The exchange must complete before the child is created; inside a group conccl would only record it.
    return fail(comm, ncclInvalidUsage,
                "ncclCommSplit of a conccl communicator inside ncclGroupStart/End is not supported (the split "
                "exchanges with the peers before returning); call it outside groups, one thread per rank");
  }
  int rank = -1, nranks = 0, device = -1;
  concclConfig_t config = CONCCL_CONFIG_INITIALIZER;
  if (concclCommUserRank(comm->conccl, &rank) != concclSuccess || concclCommCount(comm->conccl, &nranks) != concclSuccess ||
      concclCommCuDevice(comm->conccl, &device) != concclSuccess ||
      concclCommGetConfig(comm->conccl, &config) != concclSuccess) {
    return fromConccl(comm, concclInvalidUsage, call);
  }
  const bool hostBackend = config.backend == concclBackendHost;

  SplitEntry mine{};
  mine.color = color;
  mine.key = key;
  mine.device = device;
  concclUniqueId id;
  if (concclGetUniqueId(&id) != concclSuccess) {
    return fail(comm, ncclSystemError, std::string("ncclCommSplit: concclGetUniqueId: ") + concclGetLastError(nullptr));
  }
  std::memcpy(mine.id, id.internal, sizeof(mine.id));
  std::vector<SplitEntry> all;
  std::string error = allGatherEntries(comm, hostBackend, device, nranks, mine, &all);
  if (!error.empty()) return fail(comm, ncclSystemError, "ncclCommSplit: exchanging colors and keys: " + error);

  std::vector<SplitRequest> requests;
  for (const SplitEntry& e : all) requests.push_back({e.color, e.key});
  SplitPlacement p = placeInSplit(requests, rank);
  if (!p.error.empty()) return fail(comm, ncclInvalidArgument, "ncclCommSplit: " + p.error);
  if (!p.member) {
    *newcomm = nullptr;  // NCCL_SPLIT_NOCOLOR
    logInfo("ncclCommSplit: parent rank " + std::to_string(rank) + " passed NCCL_SPLIT_NOCOLOR: no communicator");
    return ncclSuccess;
  }
  const SplitEntry& leader = all[static_cast<size_t>(p.parents[0])];
  const int n = static_cast<int>(p.parents.size());
  concclComm_t child = nullptr;
  if (comm->singleProcess) {
    error = createLocalChild(std::string(leader.id, sizeof(leader.id)), p, all, config, config.timeoutMs, &child);
  } else {
    CudaDeviceGuard guard(device);
    concclUniqueId childId;
    std::memcpy(childId.internal, leader.id, sizeof(childId.internal));
    if (!guard.ok()) {
      error = "cudaSetDevice(" + std::to_string(device) + ") failed";
    } else if (concclCommInitRankConfig(&child, n, childId, p.newRank, &config) != concclSuccess) {
      error = std::string("concclCommInitRank: ") + concclGetLastError(nullptr);
    }
  }
  if (!error.empty()) return fail(comm, ncclSystemError, "ncclCommSplit: creating the child: " + error);
  *newcomm = wrapComm(Path::kConccl, child, nullptr, call,
                      "split of a conccl communicator: color " + std::to_string(color) + ", key " +
                          std::to_string(key) + ", parent rank " + std::to_string(rank));
  (*newcomm)->singleProcess = comm->singleProcess;
  return ncclSuccess;
}

}  // namespace conccl::nccl
