// The engine of a communicator whose ranks span hosts, shared by the C API (src/api/cross_node.cc) and the NCCL
// drop-in (shim_hierarchical.cc): a conccl communicator of the ranks of this host ("intra", rank = local index) and
// a real-NCCL communicator of the ranks with this local index ("rail", rank = node index). A collective runs as the
// phases of sched/hierarchical.h (this rank's steps from hier_steps.h), every step enqueued on the caller's stream in
// order: intra steps on conccl's C API (copy engines; reduce CTAs for the reductions), rail steps on the real NCCL
// (NCCL's kernels), local copies as cudaMemcpy(2D)Async. The stream orders the phases; nothing waits on the host.
// What the phases cannot express is left to the caller's flat communicator (HierOutcome::ran == false).
//
// No nccl.h here: the real NCCL is reached through RailApi (rail_api.h). hier_exec.cc needs CUDA; a build without it
// has hier_exec_none.cc, where makeHierState fails.
#ifndef CONCCL_NCCL_HIER_EXEC_H_
#define CONCCL_NCCL_HIER_EXEC_H_

#include <conccl/conccl.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "nccl/hier_steps.h"
#include "nccl/liveness_link.h"
#include "nccl/rail_api.h"
#include "sched/hierarchical.h"

// As cuda_runtime_api.h declares it (conccl.h does the same for cudaStream_t): this header builds without CUDA.
typedef struct CUevent_st* cudaEvent_t;

namespace conccl::nccl {

// ---- the communicator's state ----

// What a call of one shape (collective, count, root, type, op) does on this rank, planned once: either a reason to
// go flat, or this rank's steps (and, when pipelined, its chunks' programs). Every rank reaches the same verdict.
struct HierCallPlan {
  std::string flatWhy;
  HierProgram program;
  HierChunks chunks;       // programs.size() > 1: pipelined
  std::string phaseNames;  // for the log line
};
using HierCallKey = std::tuple<int, size_t, int, int, int>;

// What the owner (C API or drop-in) decides for its communicators.
struct HierPolicy {
  uint64_t scratchMaxBytes = 0;
  // "" when conccl runs this node-phase collective (NCCL type and op, op < 0 without a reduction) exactly; otherwise
  // why not (the call then goes flat). Empty function: every one runs.
  std::function<std::string(sched::GroupKind, int ncclType, int ncclOp)> intraRefusal;
  std::function<void(const std::string&)> info, warn;  // log lines
};

struct HierState {
  HierLayout layout;
  int rank = 0;  // in the communicator
  int node = 0, local = 0;
  int device = -1;
  // Pieces of a pipelined AllReduce / Broadcast (the root's setting): one value for every rank, since pipelined and
  // plain calls issue different steps.
  int chunks = 1;
  HierPolicy policy;
  const RailApi* api = nullptr;  // lives as long as the process (the loaded library's table)
  concclComm_t intra = nullptr;
  RailComm rail = nullptr;
  // Scratch for the phases (device memory from cudaMalloc: conccl's peers map it with CUDA IPC), grown on demand up
  // to policy.scratchMaxBytes; a grown-out buffer is kept until destroy (a call still in flight may use it; freeing
  // it would wait for the device), so at most twice the largest size is held.
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
  // Set when the rail reported an asynchronous error (railAsyncError): the rail was aborted then (rail = nullptr) and
  // every later call fails with this code (an NCCL result).
  int railError = 0;
  // News of a rank whose process ended (nccl/liveness_link.h): the link of the rendezvous that made this communicator
  // (ownsLink: it says bye at destroy or abort), or its parent's for a split child (shared). linkRanks[i] = the
  // link's number of this communicator's rank i (empty: the same numbers). Null: not watched.
  std::shared_ptr<LivenessLink> link;
  bool ownsLink = false;
  std::vector<int> linkRanks;
  // One INFO line per collective kind: the first call that ran in phases, and the first sent to the flat
  // communicator with its reason (bits by sched::HierCollective).
  uint32_t loggedPhases = 0, loggedFlat = 0, loggedPipelined = 0;
  // Pipelined calls: the rail phases run on railStream, ordered against the caller's stream by chunkEvents (two per
  // chunk, reused call after call: a wait takes the record enqueued before it).
  cudaStream_t railStream = nullptr;
  std::vector<cudaEvent_t> chunkEvents;
  // Plans by call shape (training repeats a few shapes; an AllToAll plan costs O(n^2) to build). Bounded: cleared
  // when it reaches kMaxCachedPlans.
  static constexpr size_t kMaxCachedPlans = 256;
  std::map<HierCallKey, std::shared_ptr<const HierCallPlan>> plans;
};

// ---- calls ----

struct HierArgs {
  sched::HierCollective coll = sched::HierCollective::kAllReduce;
  const void* sendbuff = nullptr;
  void* recvbuff = nullptr;
  size_t count = 0;  // NCCL's count argument
  int type = 0;      // ncclDataType_t
  int op = -1;       // ncclRedOp_t, -1 without a reduction
  int root = 0;
  cudaStream_t stream = nullptr;
  const char* call = "";
  bool inGroup = false;  // inside the caller's group: both libraries defer to their own group ends -> flat
  // kSendRecv: the peer (a rank of the communicator) and the direction; sendbuff (send) or recvbuff (receive).
  int peer = -1;
  bool send = false;
};

// A failure: the NCCL result (for the drop-in), the conccl result (for the C API) and the message.
struct HierError {
  int ncclCode = 0;
  concclResult_t code = concclSuccess;
  std::string message;
  bool failed() const { return ncclCode != 0 || code != concclSuccess; }
};

struct HierOutcome {
  bool ran = false;  // false: nothing was enqueued; run the call on the flat communicator
  HierError error;   // ran: the call's failure, if any
};

// Runs the call hierarchically when it decomposes (outside groups, an op conccl runs, counts the pieces divide, a
// node-major numbering for calls whose result depends on it, scratch within the bound). Every decision to go flat is
// the same on every rank; once the first step is enqueued a failure is the call's error (the peers' steps may be in
// flight: as for NCCL, the communicator should then be aborted).
// Send/Recv (inside groups too): to a peer of this node on the node's conccl communicator (copy engines), to a peer
// on another node flat. A pair of ranks always takes one library, so NCCL's order per pair holds; in a group both
// libraries' parts launch at the group's end, conccl's first on every rank (the caller ends conccl's group first).
HierOutcome hierRun(HierState* h, const HierArgs& args);

// ---- setup, lifetime and errors ----

// Watches h's ranks through `link` (null: not watched); owner: h made the link's rendezvous; linkRanks as in HierState.
void watchLiveness(HierState* h, std::shared_ptr<LivenessLink> link, bool owner, std::vector<int> linkRanks);
// The link's number of h's rank r (for a split child's own link ranks).
int linkRankOf(const HierState* h, int r);

// The first asynchronous error of the rail side: an error kept from before, a rank whose process ended (liveness
// link: ncclRemoteError), then the rail's own. A new one aborts the rail at once (abortFailedRail), so that the work
// queued behind it on this rank's stream drains. *asyncError = 0 when none. Returns a failure of the query itself.
HierError railAsyncError(HierState* h, int* asyncError);
// The intra-node communicator's asynchronous error, as an NCCL result.
HierError intraAsyncError(HierState* h, int* asyncError);
// The rail of h after it reported `error`: aborted, forgotten (rail = nullptr), the error kept. Called under h->mutex.
void abortFailedRail(HierState* h, int error);

// Destroys (or aborts) the intra and rail communicators and frees the scratch (abort: scratch dropped unfreed), then
// h itself. Returns the first failure.
HierError destroyHierState(HierState* h, bool abort);

// This rank's rail (a real NCCL communicator made by `makeRail`) and node communicator (conccl, from nodeId and
// nodeConfig, which may be null), on the current device. nullptr with *error on failure (what was made is destroyed).
HierState* makeHierState(const HierLayout& layout, int rank, int chunks, HierPolicy policy, const RailApi* api,
                         const std::function<int(RailComm*)>& makeRail, const concclUniqueId& nodeId,
                         const concclConfig_t* nodeConfig, std::string* error);

}  // namespace conccl::nccl

#endif  // CONCCL_NCCL_HIER_EXEC_H_
