// Communicator lifetime, queries, errors, groups, version.
#include <cstring>
#include <memory>

#include "api/api_guard.h"
#include "api/cross_node.h"
#include "core/bootstrap.h"
#include "core/config.h"
#include "core/group.h"
#include "exec/executor.h"
#include "base/logging.h"

namespace conccl::api {
namespace {
thread_local std::string tLastError;
}  // namespace

void recordError(concclComm* comm, concclResult_t code, const std::string& message) {
  tLastError = message;
  if (comm != nullptr && isLiveComm(comm)) {
    std::lock_guard<std::mutex> lock(comm->lastErrorMutex);
    comm->lastError = message;
  }
  CONCCL_WARN(comm != nullptr && isLiveComm(comm) ? comm->rank : -1, -1,
              std::string(concclGetErrorString(code)) + ": " + message);
}

// No API name in these messages: apiCall prefixes every message with it.
void requireLiveComm(const concclComm* comm) {
  CONCCL_REQUIRE(comm != nullptr, "comm is NULL");
  if (!isLiveComm(comm)) {
    CONCCL_THROW(concclInvalidUsage, "comm is not a live communicator (already destroyed or never created)");
  }
}

}  // namespace conccl::api

using conccl::api::apiCall;
using conccl::api::requireLiveComm;

extern "C" {

concclResult_t concclGetVersion(int* version) {
  return apiCall(nullptr, "concclGetVersion", [&] {
    CONCCL_REQUIRE(version != nullptr, "version is NULL");
    *version = CONCCL_VERSION_CODE;
  });
}

const char* concclGetErrorString(concclResult_t result) {
  switch (result) {
    case concclSuccess:
      return "concclSuccess: no error";
    case concclUnhandledCudaError:
      return "concclUnhandledCudaError: a CUDA call failed";
    case concclSystemError:
      return "concclSystemError: system call failed or no usable device";
    case concclInternalError:
      return "concclInternalError: internal error in conccl";
    case concclInvalidArgument:
      return "concclInvalidArgument: invalid argument";
    case concclInvalidUsage:
      return "concclInvalidUsage: invalid usage";
    case concclTimeout:
      return "concclTimeout: a peer did not arrive in time";
    case concclNotSupported:
      return "concclNotSupported: not supported by this backend or build";
    default:
      return "unknown conccl result code";
  }
}

const char* concclGetLastError(concclComm_t comm) {
  if (comm != nullptr && conccl::isLiveComm(comm)) {
    // Copy into a thread-local so the pointer stays valid while other threads record new errors.
    thread_local std::string copy;
    std::lock_guard<std::mutex> lock(comm->lastErrorMutex);
    copy = comm->lastError;
    return copy.c_str();
  }
  return conccl::api::tLastError.c_str();
}

concclResult_t concclCommInitAll(concclComm_t* comms, int ndev, const int* devlist, const concclConfig_t* config) {
  return apiCall(nullptr, "concclCommInitAll", [&] {
    CONCCL_REQUIRE(comms != nullptr, "comms is NULL");
    std::vector<concclComm*> created = conccl::createClique(ndev, devlist, config);
    for (int r = 0; r < ndev; ++r) comms[r] = created[r];
  });
}

concclResult_t concclGetUniqueId(concclUniqueId* uniqueId) {
  return apiCall(nullptr, "concclGetUniqueId", [&] {
    CONCCL_REQUIRE(uniqueId != nullptr, "uniqueId is NULL");
    conccl::api::makeJobUniqueId(uniqueId);
  });
}

concclResult_t concclCommInitRankConfig(concclComm_t* comm, int nranks, concclUniqueId commId, int rank,
                                        const concclConfig_t* config) {
  return apiCall(nullptr, "concclCommInitRank", [&] {
    CONCCL_REQUIRE(comm != nullptr, "comm is NULL");
    // It blocks for the peers: inside a group one thread could never create two ranks of one communicator.
    if (conccl::inGroup()) {
      CONCCL_THROW(concclInvalidUsage,
                   "concclCommInitRank cannot be called between concclGroupStart and "
                   "concclGroupEnd (it waits for its peers); create each rank on its own thread");
    }
    *comm = conccl::api::idHasRendezvous(commId) ? conccl::api::initThroughRendezvous(nranks, commId, rank, config)
                                                 : conccl::createProcessComm(nranks, commId, rank, config);
  });
}

concclResult_t concclCommInitRank(concclComm_t* comm, int nranks, concclUniqueId commId, int rank) {
  return concclCommInitRankConfig(comm, nranks, commId, rank, nullptr);
}

concclResult_t concclCommRegister(concclComm_t comm, void* buff, size_t size, void** handle) {
  return apiCall(comm, "concclCommRegister", [&] {
    requireLiveComm(comm);
    CONCCL_REQUIRE(buff != nullptr, "buff is NULL");
    CONCCL_REQUIRE(size > 0, "size is 0");
    CONCCL_REQUIRE(handle != nullptr, "handle is NULL");
    // PyTorch's register hook calls this from its allocator, also while the calling thread captures a CUDA graph
    // (a segment of the graph's pool): making the export handle must not invalidate that capture.
    const conccl::exec::RelaxedCaptureScope relaxed(true);
    if (comm->crossNode != nullptr) return conccl::api::crossNodeRegister(comm, buff, size, handle);
    conccl::exec::Executor& executor = comm->clique->executor();
    if (comm->multiProcess) {
      // Checks it, and makes the IPC handle now. Device memory that cannot be shared (a cudaMallocAsync pool, VMM
      // memory not exported) is registered all the same, as NCCL registers it: calls on it are staged anyway.
      if (!executor.exportIfShareable(comm->rank, buff, size, "buff", nullptr)) {
        CONCCL_INFO(comm->rank, comm->device,
                    "concclCommRegister: the " + std::to_string(size) +
                        " bytes registered cannot be shared with the other processes (pool or VMM memory that is "
                        "not exported): registered, and calls on them are staged");
      }
    } else if (comm->clique->config().backend == concclBackendCuda) {
      executor.checkBuffer(comm->rank, buff, size, "buff", nullptr);
    }
    // The handle is a fresh heap address (never dereferenced): distinct per registration, checked on Deregister.
    auto token = std::make_unique<char>();
    std::lock_guard<std::mutex> lock(comm->registrationMutex);
    comm->registrations[token.get()] = buff;
    *handle = token.release();
  });
}

concclResult_t concclCommDeregister(concclComm_t comm, void* handle) {
  return apiCall(comm, "concclCommDeregister", [&] {
    requireLiveComm(comm);
    CONCCL_REQUIRE(handle != nullptr, "handle is NULL");
    if (comm->crossNode != nullptr) return conccl::api::crossNodeDeregister(comm, handle);
    void* buff = nullptr;
    {
      std::lock_guard<std::mutex> lock(comm->registrationMutex);
      auto it = comm->registrations.find(handle);
      if (it == comm->registrations.end()) {
        CONCCL_THROW(concclInvalidArgument,
                     "handle was not returned by concclCommRegister on this communicator, or "
                     "was already deregistered");
      }
      buff = it->second;
      comm->registrations.erase(it);
    }
    std::unique_ptr<char> token(static_cast<char*>(handle));
    if (comm->multiProcess) comm->clique->executor().retireExport(comm->rank, buff);
  });
}

concclResult_t concclCommWindowRegister(concclComm_t comm, void* buff, size_t size, concclWindow_t* win) {
  return apiCall(comm, "concclCommWindowRegister", [&] {
    requireLiveComm(comm);
    CONCCL_REQUIRE(buff != nullptr, "buff is NULL");
    CONCCL_REQUIRE(size > 0, "size is 0");
    CONCCL_REQUIRE(win != nullptr, "win is NULL");
    conccl::api::requireOneHost(comm, "concclCommWindowRegister");
    // Collective across processes: it waits for its peers, which one thread could never be inside a group.
    if (conccl::inGroup()) {
      CONCCL_THROW(concclInvalidUsage,
                   "concclCommWindowRegister cannot be called between concclGroupStart and "
                   "concclGroupEnd (it waits for its peers)");
    }
    auto window = std::make_unique<concclWindow>();
    window->comm = comm;
    window->id = comm->clique->registerWindow(comm->rank, buff, size);
    concclWindow* handle = window.get();
    std::lock_guard<std::mutex> lock(comm->registrationMutex);
    comm->windows.emplace(handle, std::move(window));
    *win = handle;
  });
}

concclResult_t concclCommWindowDeregister(concclComm_t comm, concclWindow_t win) {
  return apiCall(comm, "concclCommWindowDeregister", [&] {
    requireLiveComm(comm);
    CONCCL_REQUIRE(win != nullptr, "win is NULL");
    conccl::api::requireOneHost(comm, "concclCommWindowDeregister");
    if (conccl::inGroup()) {
      CONCCL_THROW(concclInvalidUsage,
                   "concclCommWindowDeregister cannot be called between concclGroupStart and "
                   "concclGroupEnd (it waits for its peers)");
    }
    uint64_t id = 0;
    {
      std::lock_guard<std::mutex> lock(comm->registrationMutex);
      auto it = comm->windows.find(win);
      if (it == comm->windows.end()) {
        CONCCL_THROW(concclInvalidArgument,
                     "win was not returned by concclCommWindowRegister on this communicator, "
                     "or was already deregistered");
      }
      id = it->second->id;
    }
    comm->clique->deregisterWindow(comm->rank, id);
    std::lock_guard<std::mutex> lock(comm->registrationMutex);
    comm->windows.erase(win);
  });
}

concclResult_t concclMemAlloc(void** ptr, size_t size) {
  return apiCall(nullptr, "concclMemAlloc", [&] {
    CONCCL_REQUIRE(ptr != nullptr, "ptr is NULL");
    CONCCL_REQUIRE(size > 0, "size is 0");
    *ptr = conccl::exec::cudaAllocate(size);
  });
}

concclResult_t concclMemFree(void* ptr) {
  return apiCall(nullptr, "concclMemFree", [&] {
    if (ptr == nullptr) return;  // like free(NULL)
    conccl::exec::cudaRelease(ptr);
  });
}

static concclResult_t releaseComm(concclComm_t comm, bool graceful, const char* api) {
  return apiCall(nullptr, api, [&] {
    requireLiveComm(comm);
    // Destroy or abort from a thread whose own global-mode capture is still open (a captured call failed and the
    // caller gives up): in that mode CUDA refuses the queries on conccl's own streams that releasing waits with.
    const conccl::exec::RelaxedCaptureScope relaxed(true);
    // Calls this thread recorded on comm in a still-open group would be launched on a freed handle at
    // concclGroupEnd: drop them now (the group then runs without them, as if they had never been made).
    if (size_t dropped = conccl::groupForgetComm(comm)) {
      CONCCL_WARN(comm->rank, comm->device,
                  std::string(api) + " inside concclGroupStart/End dropped " + std::to_string(dropped) +
                      " call(s) recorded on this communicator");
    }
    conccl::unregisterComm(comm);
    std::unique_ptr<concclComm> owned(comm);
    {
      // Registration handles die with the communicator.
      std::lock_guard<std::mutex> lock(owned->registrationMutex);
      for (auto& [token, buff] : owned->registrations) delete static_cast<char*>(token);
      owned->registrations.clear();
    }
    if (owned->crossNode != nullptr) {
      // Its calls never block on the host (NCCL and conccl enqueue them): wait for the ones inside the library.
      const int timeoutMs = conccl::resolveConfig(nullptr, false).timeoutMs;
      if (!conccl::waitUntilUnused(owned.get(), std::chrono::milliseconds(timeoutMs) + std::chrono::seconds(1))) {
        (void)owned.release();
        CONCCL_THROW(concclTimeout, std::string(api) + ": a call on another thread did not leave the communicator");
      }
      conccl::api::releaseCrossNode(owned.get(), graceful);
      return;
    }
    if (!graceful) {
      owned->clique->fail(concclInvalidUsage, "rank " + std::to_string(owned->rank) + " aborted the communicator");
    }
    // A call still inside the library on another thread (blocked on the host, or enqueuing) returns first: after an
    // abort its waits fail at once. Never free under it: past the limit the handle is left allocated.
    const auto limit = std::chrono::milliseconds(owned->clique->config().timeoutMs) + std::chrono::seconds(1);
    if (!conccl::waitUntilUnused(owned.get(), limit)) {
      const int rank = owned->rank;
      (void)owned.release();  // leaked on purpose: a call still uses it
      CONCCL_THROW(concclTimeout, std::string(api) + ": a call on another thread did not leave rank " +
                                      std::to_string(rank) + "'s communicator within " +
                                      std::to_string(limit.count()) + " ms; the communicator is left allocated");
    }
    // Release even if waiting fails (timeout): the handle is gone either way, and the error is reported.
    try {
      owned->clique->releaseRank(owned->rank, graceful);
    } catch (...) {
      owned->clique->executor().releaseRank(owned->rank);
      throw;
    }
  });
}

concclResult_t concclCommDestroy(concclComm_t comm) { return releaseComm(comm, true, "concclCommDestroy"); }
concclResult_t concclCommAbort(concclComm_t comm) { return releaseComm(comm, false, "concclCommAbort"); }

concclResult_t concclCommCount(concclComm_t comm, int* count) {
  return apiCall(comm, "concclCommCount", [&] {
    requireLiveComm(comm);
    CONCCL_REQUIRE(count != nullptr, "count is NULL");
    *count = comm->crossNode != nullptr ? conccl::api::crossNodeRanks(comm) : comm->clique->nranks();
  });
}

concclResult_t concclCommUserRank(concclComm_t comm, int* rank) {
  return apiCall(comm, "concclCommUserRank", [&] {
    requireLiveComm(comm);
    CONCCL_REQUIRE(rank != nullptr, "rank is NULL");
    *rank = comm->rank;
  });
}

concclResult_t concclCommCuDevice(concclComm_t comm, int* device) {
  return apiCall(comm, "concclCommCuDevice", [&] {
    requireLiveComm(comm);
    CONCCL_REQUIRE(device != nullptr, "device is NULL");
    *device = comm->device;
  });
}

concclResult_t concclCommGetAsyncError(concclComm_t comm, concclResult_t* asyncError) {
  return apiCall(comm, "concclCommGetAsyncError", [&] {
    requireLiveComm(comm);
    CONCCL_REQUIRE(asyncError != nullptr, "asyncError is NULL");
    if (comm->crossNode != nullptr) {
      *asyncError = conccl::api::crossNodeAsyncError(comm);
      return;
    }
    auto error = comm->clique->asyncError();
    *asyncError = error ? error->code() : concclSuccess;
  });
}

concclResult_t concclCommGetConfig(concclComm_t comm, concclConfig_t* config) {
  return apiCall(comm, "concclCommGetConfig", [&] {
    requireLiveComm(comm);
    CONCCL_REQUIRE(config != nullptr, "config is NULL");
    if (comm->crossNode != nullptr) return conccl::api::crossNodeConfig(comm, config);
    conccl::exportConfig(comm->clique->config(), config);
  });
}

concclResult_t concclGroupStart(void) {
  return apiCall(nullptr, "concclGroupStart", [] {
    conccl::groupStart();
    conccl::api::crossNodeGroupStart();
  });
}

concclResult_t concclGroupEnd(void) {
  return apiCall(nullptr, "concclGroupEnd", [] {
    // The real NCCL's group ends even when conccl's fails (they were opened together); conccl's error is the one
    // reported then.
    try {
      conccl::groupEnd();
    } catch (...) {
      try {
        conccl::api::crossNodeGroupEnd();
      } catch (...) {
      }
      throw;
    }
    conccl::api::crossNodeGroupEnd();
  });
}

}  // extern "C"
