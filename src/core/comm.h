// A communicator handle: one rank of a clique. The public `concclComm_t` points to this struct.
#pragma once

#include <conccl/conccl.h>

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

struct concclComm {
  std::shared_ptr<conccl::Clique> clique;
  int rank = 0;
  int device = -1;
  bool multiProcess = false;  // concclCommInitRank: the clique is a ProcessClique

  // concclCommRegister handles of this communicator -> the registered address (checked by Deregister).
  std::mutex registrationMutex;
  std::map<void*, void*> registrations;
  // Live window handles of this communicator (freed with it).
  std::map<concclWindow*, std::unique_ptr<concclWindow>> windows;

  // Message of the last failure on this communicator (concclGetLastError). Guarded: a comm may be queried
  // from another thread than the one that failed.
  std::mutex lastErrorMutex;
  std::string lastError;
};

namespace conccl {

// Live-handle registry: the API checks every handle against it, so that a destroyed or garbage handle is
// reported (concclInvalidUsage) instead of dereferenced.
void registerComm(concclComm* comm);
void unregisterComm(concclComm* comm);
bool isLiveComm(const concclComm* comm);

// Creates ndev communicators of one new clique (concclCommInitAll).
std::vector<concclComm*> createClique(int ndev, const int* devlist, const concclConfig_t* config);

// Creates rank `rank` of a communicator spread over processes (concclCommInitRank): blocks for the peers.
concclComm* createProcessComm(int nranks, const concclUniqueId& id, int rank, const concclConfig_t* config);

}  // namespace conccl
