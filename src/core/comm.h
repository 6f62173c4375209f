// A communicator handle: one rank of a clique. The public `concclComm_t` points to this struct.
#pragma once

#include <conccl/conccl.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "core/clique.h"

// A symmetric window handle (concclCommWindowRegister): owned by its communicator, checked on Deregister.
struct concclWindow {
  concclComm* comm = nullptr;
  uint64_t id = 0;  // the clique's window id (equal on every rank)
};

namespace conccl::api {
struct CrossNodeComm;
}  // namespace conccl::api

struct concclComm {
  std::shared_ptr<conccl::Clique> clique;
  int rank = 0;
  int device = -1;
  bool multiProcess = false;  // concclCommInitRank: the clique is a ProcessClique
  // A communicator whose ranks span hosts (api/cross_node.h): clique is null, its calls go there. Owned; freed by
  // concclCommDestroy / concclCommAbort.
  conccl::api::CrossNodeComm* crossNode = nullptr;

  // concclCommRegister handles of this communicator -> the registered address (checked by Deregister).
  std::mutex registrationMutex;
  std::map<void*, void*> registrations;
  // Live window handles of this communicator (freed with it).
  std::map<concclWindow*, std::unique_ptr<concclWindow>> windows;

  // Message of the last failure on this communicator (concclGetLastError). Guarded: a comm may be queried
  // from another thread than the one that failed.
  std::mutex lastErrorMutex;
  std::string lastError;

  // Calls inside the library on this communicator right now (CommUse). Destroy and abort unregister the handle
  // first (no new use can start), then wait for these to leave before anything is freed: abort from another thread
  // (PyTorch's watchdog, torchft) must never free the communicator under a call that is still running in it.
  std::mutex useMutex;
  std::condition_variable useCv;
  int uses = 0;
};

namespace conccl {

// Live-handle registry: the API checks every handle against it, so that a destroyed or garbage handle is
// reported (concclInvalidUsage) instead of dereferenced.
void registerComm(concclComm* comm);
void unregisterComm(concclComm* comm);
bool isLiveComm(const concclComm* comm);

// Marks a live `comm` as in use for the guard's life; checked against the registry atomically, so a handle being
// destroyed is either not taken (the call then finds it dead) or waited for. A null or dead handle takes nothing.
class CommUse {
 public:
  explicit CommUse(concclComm* comm);
  ~CommUse();
  CommUse(const CommUse&) = delete;
  CommUse& operator=(const CommUse&) = delete;
  bool taken() const { return comm_ != nullptr; }

 private:
  concclComm* comm_ = nullptr;
};

// Waits until no CommUse holds `comm` (call after unregisterComm); false when `limit` passed first.
bool waitUntilUnused(concclComm* comm, std::chrono::milliseconds limit);

// Creates ndev communicators of one new clique (concclCommInitAll).
std::vector<concclComm*> createClique(int ndev, const int* devlist, const concclConfig_t* config);

// Creates rank `rank` of a communicator spread over processes (concclCommInitRank): blocks for the peers.
concclComm* createProcessComm(int nranks, const concclUniqueId& id, int rank, const concclConfig_t* config);

}  // namespace conccl
