// Communicators of the drop-in whose ranks span hosts, the same number on each (docs/hierarchical.md,
// docs/nccl-shim.md "Communicators across hosts"). Besides the flat real-NCCL communicator (path kNccl, `real`),
// such a communicator holds a HierState: a conccl communicator of the ranks of its host ("intra", rank = local
// index) and a real-NCCL communicator of the ranks with its local index ("rail", rank = node index). Its
// collectives run as the phases of sched/hierarchical.h, all enqueued on the caller's stream in order (the stream
// orders the phases; no host wait). What the phases cannot express goes to the flat communicator (hierarchicalCall
// returns false).
#ifndef CONCCL_NCCL_SHIM_HIERARCHICAL_H_
#define CONCCL_NCCL_SHIM_HIERARCHICAL_H_

#include <conccl/conccl.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "nccl/hier_steps.h"
#include "nccl/liveness_link.h"
#include "sched/hierarchical.h"

namespace conccl::nccl {

// What a call of one shape (collective, count, root, type, op) does on this rank, planned once: either a reason to
// go flat, or this rank's steps (and, when pipelined, its chunks' programs). Every rank reaches the same verdict.
struct HierCallPlan {
  std::string flatWhy;
  HierProgram program;
  HierChunks chunks;       // programs.size() > 1: pipelined
  std::string phaseNames;  // for the log line
};
using HierCallKey = std::tuple<int, size_t, int, int, int>;

struct HierState {
  HierLayout layout;
  int rank = 0;  // in the communicator
  int node = 0, local = 0;
  int device = -1;
  // Pieces of a pipelined AllReduce / Broadcast (CONCCL_NCCL_HIER_CHUNKS of the process that made the id, or of the
  // split child's first rank): one value for every rank, since pipelined and plain calls issue different steps.
  int chunks = 1;
  concclComm_t intra = nullptr;
  ncclComm_t rail = nullptr;  // the real NCCL's own handle
  // Scratch for the phases (device memory from cudaMalloc: conccl's peers map it with CUDA IPC), grown on demand up
  // to CONCCL_NCCL_SCRATCH_MAX_BYTES; a grown-out buffer is kept until destroy (a call still in flight may use it;
  // freeing it would wait for the device), so at most twice the largest size is held.
  std::mutex mutex;
  void* scratch = nullptr;
  size_t scratchBytes = 0;
  std::vector<void*> retired;
  // The last stream that used the scratch, and an event after that use: a call on another stream waits for it on the
  // device before touching the scratch.
  cudaEvent_t lastUse = nullptr;
  cudaStream_t lastStream = nullptr;
  bool used = false;
  bool aborted = false;
  // Set when the rail reported an asynchronous error (hierAsyncError): the rail was aborted then (rail = nullptr) and
  // every later call fails with this code.
  ncclResult_t railError = ncclSuccess;
  // News of a rank whose process ended (nccl/liveness_link.h), read by hierAsyncError: the link of the rendezvous that
  // made this communicator (ownsLink: it says bye at destroy or abort), or its parent's for a split child (shared).
  // linkRanks[i] = the link's number of this communicator's rank i (empty: the same numbers). Null: not watched.
  std::shared_ptr<LivenessLink> link;
  bool ownsLink = false;
  std::vector<int> linkRanks;
  // One INFO line per collective kind: the first call that ran in phases, and the first sent to the flat
  // communicator with its reason (bits by sched::HierCollective).
  uint32_t loggedPhases = 0, loggedFlat = 0, loggedPipelined = 0;
  // Pipelined calls (CONCCL_NCCL_HIER_CHUNKS > 1): the rail phases run on railStream, ordered against the caller's
  // stream by chunkEvents (two per chunk, reused call after call: a wait takes the record enqueued before it).
  cudaStream_t railStream = nullptr;
  std::vector<cudaEvent_t> chunkEvents;
  // Plans by call shape (training repeats a few shapes; an AllToAll plan costs O(n^2) to build). Bounded: cleared
  // when it reaches kMaxCachedPlans.
  static constexpr size_t kMaxCachedPlans = 256;
  std::map<HierCallKey, std::shared_ptr<const HierCallPlan>> plans;
};

// ---- setup (shim_hier_init.cc) ----

// The rendezvous root's answer for ranks on several hosts when the hierarchical path applies: 'H', the flat NCCL id,
// nodes, perNode, chunks (its CONCCL_NCCL_HIER_CHUNKS), one conccl id per node and one real-NCCL id per rail (all made
// here, at the root), then the reason. False (answer untouched) when it does not apply: *why says why (switched off,
// uneven, one rank per node, ...).
inline constexpr char kAnswerHierarchical = 'H';
bool makeHierarchicalAnswer(const std::vector<uint64_t>& hosts, std::string* answer, std::string* why,
                            std::string* error);

// A rank's side of an 'H' answer: the flat real communicator (config: the caller's), then its rail's, then its
// node's conccl communicator, in that order on every rank (each init waits only for ranks that make the same one).
// On failure whatever was made is destroyed and *error says which step failed.
struct HierInit {
  ncclResult_t result = ncclSuccess;
  ncclComm_t flat = nullptr;
  HierState* hier = nullptr;
  std::string reason;
  std::string error;
};
HierInit initHierarchical(const std::string& answer, const std::vector<uint64_t>& hosts, int nranks, int rank,
                          ncclConfig_t* config, const std::string& call);

// A child of ncclCommSplit across hosts (shim_split.cc; `child` the real NCCL's, split from the flat parent): its rail
// by the real ncclCommSplit of the child (color = local index, key = node: collective over the child, no id to
// exchange), its node's conccl communicator from nodeIds[node] (a conccl id from the split's table). Every rank of
// the child must call it (the split's table decides identically everywhere). nullptr with *error on failure
// (what was made is destroyed; the child itself is left to the caller).
HierState* hierarchicalFromSplit(ncclComm_t child, const HierLayout& layout, int rank,
                                 const std::vector<concclUniqueId>& nodeIds, int chunks, const ncclConfig_t* config,
                                 std::string* error);

// ncclCommDestroy / ncclCommAbort of a communicator with a HierState: its intra and rail communicators and its
// scratch (abort: scratch dropped unfreed, as the PreMulSum scratch). Returns the first failure.
ncclResult_t destroyHierState(HierState* state, bool abort);

// Watches h's ranks through `link` (null: not watched); owner: h made the link's rendezvous; linkRanks as in HierState.
void watchLiveness(HierState* h, std::shared_ptr<LivenessLink> link, bool owner, std::vector<int> linkRanks);
// The link's number of h's rank r (for a split child's own link ranks).
int linkRankOf(const HierState* h, int r);

// ncclCommGetAsyncError of a communicator with a HierState: a rank of it whose process ended (the liveness link: it
// fails as ncclRemoteError), then the first error of the rail, the flat and the intra-node communicators (a peer node
// that fails shows on the rail first; PyTorch's watchdog polls only this handle). Either aborts the rail at once
// (abortFailedRail), so that the work queued behind it on this rank's stream drains.
ncclResult_t hierAsyncError(ncclComm_t comm, ncclResult_t* asyncError);
// The rail of h after it reported `error`: aborted, forgotten (rail = nullptr), the error kept. Called under h->mutex.
void abortFailedRail(HierState* h, ncclResult_t error);

// ---- collectives (shim_hierarchical.cc) ----

struct HierArgs {
  sched::HierCollective coll = sched::HierCollective::kAllReduce;
  const void* sendbuff = nullptr;
  void* recvbuff = nullptr;
  size_t count = 0;  // NCCL's count argument
  ncclDataType_t type = ncclFloat32;
  int op = -1;  // ncclRedOp_t, -1 without a reduction
  int root = 0;
  cudaStream_t stream = nullptr;
  const char* call = "";
};

// Runs the call hierarchically when comm has a HierState and the call decomposes (outside groups, an op conccl
// runs, counts the pieces divide, a node-major numbering for calls whose result depends on it, scratch within the
// bound): returns true with *result set. Returns false (nothing enqueued) to send the call to the flat
// communicator.
bool hierarchicalCall(ncclComm_t comm, const HierArgs& args, ncclResult_t* result);

}  // namespace conccl::nccl

#endif  // CONCCL_NCCL_SHIM_HIERARCHICAL_H_
