#include "core/comm.h"

#include <set>

#include "base/error.h"
#include "core/bootstrap.h"
#include "core/local_clique.h"
#include "base/logging.h"
#include "core/process_clique.h"
#include "core/tuned_defaults.h"

namespace conccl {
namespace {

std::mutex& registryMutex() {
  static std::mutex m;
  return m;
}
std::set<const concclComm*>& registry() {
  static std::set<const concclComm*> s;
  return s;
}

}  // namespace

void registerComm(concclComm* comm) {
  std::lock_guard<std::mutex> lock(registryMutex());
  registry().insert(comm);
}

void unregisterComm(concclComm* comm) {
  std::lock_guard<std::mutex> lock(registryMutex());
  registry().erase(comm);
}

bool isLiveComm(const concclComm* comm) {
  std::lock_guard<std::mutex> lock(registryMutex());
  return registry().count(comm) != 0;
}

CommUse::CommUse(concclComm* comm) {
  if (comm == nullptr) return;
  std::lock_guard<std::mutex> lock(registryMutex());
  if (registry().count(comm) == 0) return;
  std::lock_guard<std::mutex> use(comm->useMutex);
  ++comm->uses;
  comm_ = comm;
}

CommUse::~CommUse() {
  if (comm_ == nullptr) return;
  {
    std::lock_guard<std::mutex> use(comm_->useMutex);
    --comm_->uses;
  }
  comm_->useCv.notify_all();
}

bool waitUntilUnused(concclComm* comm, std::chrono::milliseconds limit) {
  std::unique_lock<std::mutex> lock(comm->useMutex);
  return comm->useCv.wait_for(lock, limit, [comm] { return comm->uses == 0; });
}

std::vector<concclComm*> createClique(int ndev, const int* devlist, const concclConfig_t* userConfig) {
  CONCCL_REQUIRE(ndev >= 1, "ndev = " + std::to_string(ndev) + " must be at least 1");
  CONCCL_REQUIRE(ndev <= 4096, "ndev = " + std::to_string(ndev) + " is larger than 4096 ranks in one process");
  Config config = resolveConfig(userConfig, exec::cudaAvailable());

  std::vector<int> devices(ndev, -1);
  std::unique_ptr<exec::Executor> executor;
  if (config.backend == concclBackendCuda) {
    int count = exec::cudaDeviceCount();
    if (count == 0) {
      CONCCL_THROW(concclNotSupported, "the CUDA backend was requested but no CUDA device is visible (use "
                                       "backend=concclBackendHost or CONCCL_BACKEND=host)");
    }
    for (int r = 0; r < ndev; ++r) {
      devices[r] = devlist != nullptr ? devlist[r] : r;
      CONCCL_REQUIRE(devices[r] >= 0 && devices[r] < count,
                     "devlist[" + std::to_string(r) + "] = " + std::to_string(devices[r]) +
                         " is not a CUDA device (this process sees " + std::to_string(count) + ")");
    }
    // Knobs the caller left alone follow the GPU count (core/tuned_defaults.h), before the executor sizes anything.
    CONCCL_INFO(-1, -1, applyTunedDefaults(config, distinctGpuCount(devices)));
    executor = exec::makeCudaExecutor(devices, config);
  } else {
    executor = exec::makeHostExecutor(ndev, config);
  }
  auto clique = std::make_shared<LocalClique>(config, devices, std::move(executor));
  // Owned until every handle exists: a bad_alloc half way must not leak the ones already made ("on failure
  // nothing is allocated").
  std::vector<std::unique_ptr<concclComm>> owned;
  for (int r = 0; r < ndev; ++r) {
    auto comm = std::make_unique<concclComm>();
    comm->clique = clique;
    comm->rank = r;
    comm->device = devices[r];
    owned.push_back(std::move(comm));
  }
  std::vector<concclComm*> comms;
  comms.reserve(owned.size());
  {
    std::lock_guard<std::mutex> lock(registryMutex());
    try {
      for (auto& comm : owned) registry().insert(comm.get());
    } catch (...) {
      for (auto& comm : owned) registry().erase(comm.get());  // no dangling entries for the handles freed below
      throw;
    }
  }
  for (auto& comm : owned) comms.push_back(comm.release());
  CONCCL_INFO(-1, -1, "created " + std::to_string(ndev) + " ranks on the " +
                          (config.backend == concclBackendCuda ? "cuda" : "host") + " backend, lanes " +
                          std::to_string(config.lanes) + ", reduceCtas " + std::to_string(config.reduceCtas) +
                          ", scratch " + std::to_string(config.scratchBytes) + " B");
  return comms;
}

concclComm* createProcessComm(int nranks, const concclUniqueId& id, int rank, const concclConfig_t* userConfig) {
  const UniqueIdData data = parseUniqueId(id);
  CONCCL_REQUIRE(nranks >= 1, "nranks = " + std::to_string(nranks) + " must be at least 1");
  CONCCL_REQUIRE(rank >= 0 && rank < nranks,
                 "rank = " + std::to_string(rank) + " is not in [0, nranks = " + std::to_string(nranks) + ")");
  Config config = resolveConfig(userConfig, exec::cudaAvailable());
  // Every rank sees the same answer here, so all of them fail at once instead of the others timing out.
  if (config.backend != concclBackendCuda) {
    CONCCL_THROW(concclNotSupported, "communicators across processes need the CUDA backend (the host backend is "
                                     "single-process: use concclCommInitAll)");
  }
  const int device = exec::cudaCurrentDevice();
  auto clique = std::make_shared<ProcessClique>(config, data, rank, nranks, device);
  auto comm = std::make_unique<concclComm>();
  comm->clique = clique;
  comm->rank = rank;
  comm->device = device;
  comm->multiProcess = true;
  registerComm(comm.get());
  return comm.release();
}

}  // namespace conccl
