// The C API across hosts (docs/hierarchical.md, "The C API across hosts"). When the job may span hosts,
// concclGetUniqueId also starts a rendezvous root in the calling process (nccl/rendezvous.h, TCP) and writes its
// address into the id beside the local bootstrap's nonce and secret. concclCommInitRank then meets the other ranks
// there first and learns every rank's host (nccl/routing.h's host identity: CONCCL_HOSTID > NCCL_HOSTID > hostname
// + boot id). The root answers once, the same for every rank:
//   'L'  every rank on one host: the communicator is today's conccl communicator, from the id's local part;
//   'H'  equal ranks per host (2+ hosts, 2+ ranks each): a communicator across hosts with a flat real-NCCL
//        communicator, a rail (real NCCL) and a node communicator (conccl), its collectives in phases
//        (nccl/hier_exec.h, shared with the drop-in);
//   'N'  any other layout across hosts: the flat real-NCCL communicator alone.
// The real NCCL is loaded with dlopen (CONCCL_NCCL_REAL_LIB, else libnccl.so.2 on the library path); libconccl
// needs no NCCL to build or to load.
//
// When the id carries a rendezvous: CONCCL_RENDEZVOUS=1 always, 0 never, auto (default) when the launcher's
// variables say the job spans nodes (WORLD_SIZE vs LOCAL_WORLD_SIZE, Open MPI's, Slurm's) or CONCCL_HOSTID /
// NCCL_HOSTID is set (simulated hosts).
#pragma once

#include <conccl/conccl.h>

#include <cstdint>
#include <optional>
#include <string>

#include "core/comm.h"
#include "nccl/shim_env.h"

namespace conccl::api {

// Whether concclGetUniqueId starts a rendezvous (see above); *why for the log line. Unknown values of
// CONCCL_RENDEZVOUS are an error (concclInvalidArgument, thrown).
bool wantsRendezvous(const nccl::EnvLookup& lookup, std::string* why);

// concclGetUniqueId: a fresh id, with a rendezvous root when wantsRendezvous(). The root lives in this process until
// every rank has met (for an 'H' answer: until the communicator is destroyed, to report ranks that die) or its
// timeout (CONCCL_TIMEOUT_MS) passes.
void makeJobUniqueId(concclUniqueId* id);

// Whether an id carries a rendezvous, and the local part alone (what a one-host communicator is made from).
bool idHasRendezvous(const concclUniqueId& id);

// concclCommInitRank from an id with a rendezvous: meets the other ranks at the root, then makes this rank's
// communicator on the path the root chose. Throws conccl::Error on failure.
// `host`: this rank's host identity (tests: ranks on threads of one process as if on several hosts); by default this
// process's (thisHost).
concclComm* initThroughRendezvous(int nranks, const concclUniqueId& id, int rank, const concclConfig_t* config,
                                  std::optional<uint64_t> host = std::nullopt);

// ---- a communicator across hosts (comm->crossNode != nullptr; comm->clique is null) ----

int crossNodeRanks(const concclComm* comm);
// A collective or a send / receive, its arguments already checked by the API: in phases, or on the flat
// communicator. Throws conccl::Error on failure.
void crossNodeCall(concclComm* comm, const RankArgs& args);
concclResult_t crossNodeAsyncError(concclComm* comm);
void crossNodeConfig(concclComm* comm, concclConfig_t* config);
// concclCommRegister / Deregister: on the node communicator (the one whose copy engines touch the caller's buffers).
void crossNodeRegister(concclComm* comm, void* buff, size_t size, void** handle);
void crossNodeDeregister(concclComm* comm, void* handle);
// Destroy or abort: the rail, the node and the flat communicators; frees comm->crossNode. Throws the first failure.
void releaseCrossNode(concclComm* comm, bool graceful);
// Throws concclNotSupported for a communicator across hosts: `what` is the API.
void requireOneHost(const concclComm* comm, const char* what);

// concclGroupStart / End / Discard: the real NCCL's group too, once this process made a communicator across hosts
// (calls on it inside a group go to its flat communicator, which NCCL defers to its own group end).
void crossNodeGroupStart();
void crossNodeGroupEnd();

}  // namespace conccl::api
