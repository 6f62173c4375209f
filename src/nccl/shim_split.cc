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
// A conccl parent has all its ranks on one host, so its children do too: none of them can need the real NCCL.
//
// ncclCommSplit of a shim communicator on the real NCCL (splitNccl): a child whose ranks all share a host runs on
// conccl, the other children on the real NCCL:
//   1. every parent rank all-gathers (color, key, host, a fresh conccl unique id) over the parent with the real
//      ncclAllGather, on a private stream, and waits for it;
//   2. every rank computes the same placement (split_plan.h) and, per color, whether its ranks share a host;
//   3. if any child spans hosts, every parent rank calls the real ncclCommSplit (collective over the parent) with
//      its own color when its child spans hosts and NCCL_SPLIT_NOCOLOR when its child runs on conccl; otherwise the
//      real split is not called at all (every rank knows that from the same table);
//   4. the ranks of a child on one host make it with concclCommInitRank from the id of the child's rank 0.
// The real split comes before any conccl init on every rank, so no rank waits in conccl for a peer that is still
// inside the real NCCL's collective split.
#include <cuda_runtime_api.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <string>
#include <vector>

#include "nccl/shim_comm.h"
#include "nccl/shim_hierarchical.h"
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
  if (std::string e; !localConcclId(&id, &e)) {
    return fail(comm, ncclSystemError, "ncclCommSplit: " + e);
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
  if (comm->hosts.size() == static_cast<size_t>(nranks)) {
    for (int parent : p.parents) (*newcomm)->hosts.push_back(comm->hosts[static_cast<size_t>(parent)]);
  }
  return ncclSuccess;
}

namespace {

struct NcclSplitEntry {
  int32_t color;
  int32_t key;
  uint64_t host;
  char id[CONCCL_UNIQUE_ID_BYTES];
  int32_t hierarchical;  // this rank's CONCCL_NCCL_HIERARCHICAL: a child is hierarchical only if all its ranks say 1
  int32_t chunks;        // this rank's CONCCL_NCCL_HIER_CHUNKS: a hierarchical child takes its first rank's
};

// All-gather of one NcclSplitEntry per rank over an NCCL parent, with the real ncclAllGather on device memory of
// the parent's device and a private stream, synchronised before returning.
std::string allGatherOverNccl(ncclComm_t parent, int device, int nranks, const NcclSplitEntry& mine,
                              std::vector<NcclSplitEntry>* all) {
  auto allGather = realFn<decltype(&::ncclAllGather)>("ncclAllGather");
  auto asyncError = realFn<decltype(&::ncclCommGetAsyncError)>("ncclCommGetAsyncError");
  if (allGather == nullptr || asyncError == nullptr) return "the real NCCL lacks ncclAllGather";
  all->assign(static_cast<size_t>(nranks), NcclSplitEntry{});
  const size_t bytes = sizeof(NcclSplitEntry);
  CudaDeviceGuard guard(device);
  if (!guard.ok()) return "cudaSetDevice(" + std::to_string(device) + ") failed";
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  cudaThreadExchangeStreamCaptureMode(&mode);
  char* buf = nullptr;
  cudaStream_t stream = nullptr;
  std::string error;
  const size_t recvOffset = 256;
  ncclResult_t r = ncclSuccess;
  if (cudaMalloc(&buf, recvOffset + bytes * static_cast<size_t>(nranks)) != cudaSuccess) {
    error = "cudaMalloc failed";
  } else if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
    error = "cudaStreamCreateWithFlags failed";
  } else if (cudaMemcpyAsync(buf, &mine, bytes, cudaMemcpyHostToDevice, stream) != cudaSuccess) {
    error = "cudaMemcpyAsync failed";
  } else if ((r = allGather(buf, buf + recvOffset, bytes, ncclUint8, realComm(parent), stream)) != ncclSuccess &&
             r != ncclInProgress) {
    error = std::string("the real ncclAllGather: ") + ncclResultString(r);
  } else {
    // A non-blocking parent may return ncclInProgress: poll until the call is enqueued, bounded.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(5);
    while (r == ncclInProgress && std::chrono::steady_clock::now() < deadline) {
      if (asyncError(realComm(parent), &r) != ncclSuccess) break;
      if (r == ncclInProgress) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (r != ncclSuccess) {
      error = std::string("the real ncclAllGather did not complete: ") + ncclResultString(r);
    } else if (cudaMemcpyAsync(all->data(), buf + recvOffset, bytes * static_cast<size_t>(nranks),
                               cudaMemcpyDeviceToHost, stream) != cudaSuccess ||
               cudaStreamSynchronize(stream) != cudaSuccess) {
      error = "copying the gathered table back failed";
    }
  }
  if (stream != nullptr) cudaStreamDestroy(stream);
  if (buf != nullptr) cudaFree(buf);
  cudaThreadExchangeStreamCaptureMode(&mode);
  return error;
}

}  // namespace

ncclResult_t splitNccl(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) {
  const char* call = "ncclCommSplit";
  auto split = realFn<decltype(&::ncclCommSplit)>("ncclCommSplit");
  auto userRank = realFn<decltype(&::ncclCommUserRank)>("ncclCommUserRank");
  auto count = realFn<decltype(&::ncclCommCount)>("ncclCommCount");
  auto cuDevice = realFn<decltype(&::ncclCommCuDevice)>("ncclCommCuDevice");
  if (split == nullptr || userRank == nullptr || count == nullptr || cuDevice == nullptr) {
    return fail(comm, ncclInvalidUsage, "ncclCommSplit: the real NCCL lacks ncclCommSplit or its queries");
  }
  int rank = -1, nranks = 0, device = -1;
  if (userRank(comm->real, &rank) != ncclSuccess || count(comm->real, &nranks) != ncclSuccess ||
      cuDevice(comm->real, &device) != ncclSuccess) {
    return fail(comm, ncclInvalidUsage, "ncclCommSplit: the real NCCL could not say the parent's rank, size, device");
  }
  NcclSplitEntry mine{};
  mine.color = color;
  mine.key = key;
  mine.host = thisHost().id;
  mine.hierarchical = shim().env.hierarchical ? 1 : 0;
  mine.chunks = shim().env.hierChunks;
  concclUniqueId id;
  if (std::string e; !localConcclId(&id, &e)) {
    return fail(comm, ncclSystemError, "ncclCommSplit: " + e);
  }
  std::memcpy(mine.id, id.internal, sizeof(mine.id));
  std::vector<NcclSplitEntry> all;
  std::string error = allGatherOverNccl(comm, device, nranks, mine, &all);
  if (!error.empty()) return fail(comm, ncclSystemError, "ncclCommSplit: exchanging colors, keys and hosts: " + error);

  std::vector<SplitRequest> requests;
  for (const NcclSplitEntry& e : all) requests.push_back({e.color, e.key});
  SplitPlacement p = placeInSplit(requests, rank);
  if (!p.error.empty()) return fail(comm, ncclInvalidArgument, "ncclCommSplit: " + p.error);
  // Per color, whether its ranks share a host; whether any child needs the real NCCL.
  std::map<int, std::set<uint64_t>> hostsOfColor;
  for (const NcclSplitEntry& e : all) {
    if (e.color != kSplitNoColor) hostsOfColor[e.color].insert(e.host);
  }
  bool anyAcrossHosts = false;
  for (auto& [c, hosts] : hostsOfColor) anyAcrossHosts |= hosts.size() > 1;
  std::vector<uint64_t> childHosts;
  for (int parent : p.parents) childHosts.push_back(all[static_cast<size_t>(parent)].host);
  Decision d = p.member ? decideNcclSplitChild(childHosts, true) : Decision{Path::kNccl, "NCCL_SPLIT_NOCOLOR"};

  ncclComm_t real = nullptr;
  ncclResult_t rr = ncclSuccess;
  if (anyAcrossHosts) {
    rr = split(comm->real, d.path == Path::kNccl ? color : kSplitNoColor, key, &real, config);
    if (rr != ncclSuccess && rr != ncclInProgress) return rr;
  }
  if (!p.member) {
    *newcomm = nullptr;
    logInfo("ncclCommSplit: parent rank " + std::to_string(rank) + " passed NCCL_SPLIT_NOCOLOR: no communicator");
    return rr;
  }
  if (d.path == Path::kNccl) {
    if (real == nullptr) {
      *newcomm = nullptr;
      return rr;
    }
    // A child across hosts with equal ranks per host: hierarchical, as at init, when every one of its ranks has the
    // switch on (decided from the shared table, so identically on every rank of the child).
    HierLayout l = hierLayout(childHosts);
    bool allOn = true;
    for (int parent : p.parents) allOn = allOn && all[static_cast<size_t>(parent)].hierarchical == 1;
    if (allOn && hierarchicalLayout(l)) {
      // A non-blocking config: the child must be ready before it is split again (bounded, as allGatherOverNccl).
      auto asyncError = realFn<decltype(&::ncclCommGetAsyncError)>("ncclCommGetAsyncError");
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(5);
      while (rr == ncclInProgress && asyncError != nullptr && std::chrono::steady_clock::now() < deadline) {
        if (asyncError(real, &rr) != ncclSuccess) break;
        if (rr == ncclInProgress) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      if (rr != ncclSuccess) {
        return fail(comm, rr == ncclInProgress ? ncclRemoteError : rr,
                    "ncclCommSplit (hierarchical child): the real split did not complete");
      }
      std::vector<concclUniqueId> nodeIds(static_cast<size_t>(l.nodes));
      for (int k = 0; k < l.nodes; ++k) {
        // The id of the node's local-0 rank: used by no other child (each parent rank is in one child only).
        const int first = p.parents[static_cast<size_t>(l.commRank[static_cast<size_t>(k * l.perNode)])];
        std::memcpy(nodeIds[static_cast<size_t>(k)].internal, all[static_cast<size_t>(first)].id,
                    CONCCL_UNIQUE_ID_BYTES);
      }
      std::string herror;
      const int chunks = all[static_cast<size_t>(p.parents[0])].chunks;
      HierState* h = hierarchicalFromSplit(real, l, p.newRank, nodeIds, chunks, config, &herror);
      if (h == nullptr) {
        auto destroy = realFn<decltype(&::ncclCommDestroy)>("ncclCommDestroy");
        if (destroy) destroy(real);
        return fail(comm, ncclSystemError, "ncclCommSplit (hierarchical child): " + herror);
      }
      if (comm->hier != nullptr && comm->hier->link != nullptr) {
        // The parent's liveness link covers the child's ranks (each a parent rank): a death among them fails it.
        std::vector<int> linkRanks;
        for (int parent : p.parents) linkRanks.push_back(linkRankOf(comm->hier, parent));
        watchLiveness(h, comm->hier->link, /*owner=*/false, std::move(linkRanks));
      }
      auto* w = new ncclComm;
      w->path = Path::kNccl;
      w->real = real;
      w->hier = h;
      w->hosts = childHosts;
      logComm(w, call, "hierarchical: " + std::to_string(l.nodes) + " nodes x " + std::to_string(l.perNode) +
                           " ranks, intra on conccl, rails on NCCL; split: color " + std::to_string(color) +
                           ", key " + std::to_string(key) + ", parent rank " + std::to_string(rank));
      *newcomm = w;
      return ncclSuccess;
    }
    *newcomm = wrapComm(Path::kNccl, nullptr, real, call, d.reason);
    (*newcomm)->hosts = childHosts;
    return rr;
  }
  if (real != nullptr) {
    // NCCL_SPLIT_NOCOLOR was passed: the real NCCL gives no communicator. Never reached; kept as a guard.
    auto destroy = realFn<decltype(&::ncclCommDestroy)>("ncclCommDestroy");
    if (destroy) destroy(real);
  }
  const NcclSplitEntry& leader = all[static_cast<size_t>(p.parents[0])];
  concclUniqueId childId;
  std::memcpy(childId.internal, leader.id, sizeof(childId.internal));
  concclComm_t child = nullptr;
  {
    CudaDeviceGuard guard(device);
    if (!guard.ok()) return fail(comm, ncclUnhandledCudaError, "ncclCommSplit: cudaSetDevice failed");
    concclResult_t r = concclCommInitRank(&child, static_cast<int>(p.parents.size()), childId, p.newRank);
    if (r != concclSuccess) return fromConccl(comm, r, "ncclCommSplit (conccl child of an NCCL communicator)");
  }
  *newcomm = wrapComm(Path::kConccl, child, nullptr, call,
                      d.reason + ": color " + std::to_string(color) + ", key " + std::to_string(key) +
                          ", parent rank " + std::to_string(rank));
  (*newcomm)->hosts = childHosts;
  return rr;
}

}  // namespace conccl::nccl
