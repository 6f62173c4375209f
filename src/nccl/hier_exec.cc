// The hierarchical engine (hier_exec.h): the plan of sched/hierarchical.h, this rank's share of it as NCCL-shaped
// steps (hier_steps.h), each step enqueued on the caller's stream in order:
//   intra steps  -> conccl's C API on the node's communicator (copy engines; reduce CTAs for the reductions),
//   rail steps   -> the real NCCL on the rail's communicator (NCCL's kernels),
//   local copies -> cudaMemcpy2DAsync / cudaMemcpyAsync (one per row pattern).
// Scratch: one device buffer per communicator, grown on demand. Pipelining (chunks > 1): AllReduce, Broadcast, Reduce,
// AllGather and ReduceScatter in pieces whose rail phases run on a second stream beside the node phases of the other
// pieces (runPipelined); the other calls run each phase over the whole buffer (docs/hierarchical.md).
#include "nccl/hier_exec.h"

#include <cuda_runtime_api.h>

#include <optional>
#include <string>

#include "nccl/cuda_device_guard.h"
#include "nccl/nccl_abi.h"
#include "nccl/premul_ops.h"
#include "nccl/type_map.h"

namespace conccl::nccl {
namespace {

using sched::GroupKind;
using sched::HierBuffer;

void info(const HierState* h, const std::string& m) {
  if (h->policy.info) h->policy.info(m);
}
void warn(const HierState* h, const std::string& m) {
  if (h->policy.warn) h->policy.warn(m);
}

HierError ncclError(int code, const std::string& message) {
  return HierError{code, concclFromNcclResult(code), message};
}
HierError concclError(concclResult_t code, const std::string& message) {
  return HierError{toNcclResult(code), code, message};
}
HierError cudaFailure(const std::string& message) { return HierError{kUnhandledCudaError, concclUnhandledCudaError, message}; }

bool reduces(GroupKind k) {
  return k == GroupKind::kAllReduce || k == GroupKind::kReduceScatter || k == GroupKind::kReduce;
}

// Makes the scratch at least `bytes` (the caller checked the bound) and orders this call after the last one that used
// it. False with *why when an allocation or an event call failed: the call then fails (this rank cannot go flat on
// its own: its peers, whose allocations succeeded, run the phases).
bool acquireScratch(HierState* h, size_t bytes, cudaStream_t stream, bool capturing, std::string* why) {
  CudaDeviceGuard guard(h->device);
  if (bytes > h->scratchBytes) {
    // cudaMalloc is refused while this thread captures a graph in the global or thread-local mode: allocate outside
    // the capture (the memory is not part of the graph; it lives until the communicator is destroyed).
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    cudaThreadExchangeStreamCaptureMode(&mode);
    size_t grow = h->scratchBytes * 2 > bytes ? h->scratchBytes * 2 : bytes;
    if (grow > h->policy.scratchMaxBytes) grow = bytes;
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, grow);
    cudaThreadExchangeStreamCaptureMode(&mode);
    if (e != cudaSuccess) {
      cudaGetLastError();  // not sticky
      *why = "cudaMalloc of " + std::to_string(grow) + " bytes of scratch failed";
      return false;
    }
    if (h->scratch != nullptr) h->retired.push_back(h->scratch);  // a call in flight may still use it
    h->scratch = p;
    h->scratchBytes = grow;
  }
  if (h->lastUse == nullptr && cudaEventCreateWithFlags(&h->lastUse, cudaEventDisableTiming) != cudaSuccess) {
    *why = "cudaEventCreate failed";
    return false;
  }
  // Inside a capture the graph's own order applies (an event recorded outside it cannot be waited on there).
  if (!capturing && h->used && h->lastStream != stream && cudaStreamWaitEvent(stream, h->lastUse, 0) != cudaSuccess) {
    *why = "cudaStreamWaitEvent failed";
    return false;
  }
  return true;
}

struct Runner {
  HierState* h;
  const HierArgs& a;
  size_t es;
  concclDataType_t ctype;
  concclRedOp_t cop;

  char* at(const sched::Region& r) const {
    char* base = r.buffer == HierBuffer::kSend   ? const_cast<char*>(static_cast<const char*>(a.sendbuff))
                 : r.buffer == HierBuffer::kRecv ? static_cast<char*>(a.recvbuff)
                                                 : static_cast<char*>(h->scratch);
    return base == nullptr ? nullptr : base + r.offset * es;
  }

  concclResult_t intra(const HierStep& s, cudaStream_t st) const {
    const void* in = at(s.in);
    void* out = at(s.out);
    concclComm_t c = h->intra;
    switch (s.kind) {
      case GroupKind::kAllReduce:
        return concclAllReduce(in, out, s.count, ctype, cop, c, st);
      case GroupKind::kReduceScatter:
        return concclReduceScatter(in, out, s.count, ctype, cop, c, st);
      case GroupKind::kAllGather:
        return concclAllGather(in, out, s.count, ctype, c, st);
      case GroupKind::kBroadcast:
        return concclBroadcast(in, out, s.count, ctype, s.root, c, st);
      case GroupKind::kReduce:
        return concclReduce(in, out, s.count, ctype, cop, s.root, c, st);
      case GroupKind::kGather:
        return concclGather(in, out, s.count, ctype, s.root, c, st);
      case GroupKind::kScatter:
        return concclScatter(in, out, s.count, ctype, s.root, c, st);
      case GroupKind::kAllToAll:
        return concclAllToAll(in, out, s.count, ctype, c, st);
      case GroupKind::kSendRecv:
        return s.send ? concclSend(in, s.count, ctype, s.peer, c, st) : concclRecv(out, s.count, ctype, s.peer, c, st);
      case GroupKind::kCopy:
        break;
    }
    return concclInternalError;
  }

  int rail(const HierStep& s, cudaStream_t st) const {
    const void* in = at(s.in);
    void* out = at(s.out);
    const RailApi& n = *h->api;
    RailComm c = h->rail;
    const int op = a.op < 0 ? 0 : a.op;
    // An entry point the loaded NCCL lacks (ncclGather, ncclScatter and ncclAlltoAll came with 2.28).
    auto call = [](auto fn, auto... args) { return fn != nullptr ? fn(args...) : kInvalidUsage; };
    switch (s.kind) {
      case GroupKind::kAllReduce:
        return call(n.allReduce, in, out, s.count, a.type, op, c, st);
      case GroupKind::kReduceScatter:
        return call(n.reduceScatter, in, out, s.count, a.type, op, c, st);
      case GroupKind::kAllGather:
        return call(n.allGather, in, out, s.count, a.type, c, st);
      case GroupKind::kBroadcast:
        return call(n.broadcast, in, out, s.count, a.type, s.root, c, st);
      case GroupKind::kReduce:
        return call(n.reduce, in, out, s.count, a.type, op, s.root, c, st);
      case GroupKind::kGather:
        return call(n.gather, in, out, s.count, a.type, s.root, c, st);
      case GroupKind::kScatter:
        return call(n.scatter, in, out, s.count, a.type, s.root, c, st);
      case GroupKind::kAllToAll:
        return call(n.allToAll, in, out, s.count, a.type, c, st);
      case GroupKind::kSendRecv:
        return s.send ? call(n.send, in, s.count, a.type, s.peer, c, st) : call(n.recv, out, s.count, a.type, s.peer, c, st);
      case GroupKind::kCopy:
        break;
    }
    return kInternalError;
  }

  cudaError_t local(const HierStep& s, cudaStream_t st) const {
    const size_t width = s.count * es;
    if (s.rows == 1) return cudaMemcpyAsync(at(s.out), at(s.in), width, cudaMemcpyDeviceToDevice, st);
    // One 2D copy per row pattern: the reorders are N or G rows of one block each (hier_steps.cc).
    return cudaMemcpy2DAsync(at(s.out), s.dstPitch * es, at(s.in), s.srcPitch * es, width, s.rows,
                             cudaMemcpyDeviceToDevice, st);
  }
};

// Enqueues one step on `st`; false with *error set when it fails.
bool runStep(const Runner& run, const HierStep& s, cudaStream_t st, HierError* error) {
  const std::string where = std::string(run.a.call) + " (hierarchical, phase " + std::to_string(s.phase) + ", " +
                            sched::groupKindName(s.kind) + " " + hierCommName(s.comm) + ")";
  if (s.comm == HierComm::kIntra) {
    concclResult_t r = run.intra(s, st);
    if (r == concclSuccess) return true;
    *error = concclError(r, where + ": " + concclGetErrorString(r) + ": " + concclGetLastError(run.h->intra));
    return false;
  }
  if (s.comm == HierComm::kRail) {
    const int r = run.rail(s, st);
    if (r == kSuccess) return true;
    *error = ncclError(r, where + ": the real NCCL: " + ncclResultString(r));
    return false;
  }
  cudaError_t e = run.local(s, st);
  if (e == cudaSuccess) return true;
  *error = cudaFailure(where + ": " + cudaGetErrorString(e));
  return false;
}

// The rail stream and `events` events, made on first use. False when CUDA refuses (the call then fails: its peers run
// it pipelined, so this rank cannot run it otherwise).
bool pipelineResources(HierState* h, size_t events) {
  CudaDeviceGuard guard(h->device);
  if (h->railStream == nullptr && cudaStreamCreateWithFlags(&h->railStream, cudaStreamNonBlocking) != cudaSuccess) {
    h->railStream = nullptr;
    cudaGetLastError();
    return false;
  }
  while (h->chunkEvents.size() < events) {
    cudaEvent_t e = nullptr;
    if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    h->chunkEvents.push_back(e);
  }
  return true;
}

// Events a pipelined call of P phases in k chunks needs: one per (chunk, phase) boundary, a fork and a join.
size_t pipelineEvents(const HierChunks& hc) {
  return hc.programs.size() * static_cast<size_t>(hc.programs.front().phases) + 2;
}

// A pipelined call: phase by phase, chunk by chunk; a phase's steps go on the rail stream when they are rail steps,
// on the caller's stream otherwise; where chunk i moves from one stream to the other, the second waits for an event
// after chunk i's previous phase on the first. So the rail phase of one chunk runs beside the node phases of the
// others. The rail stream first waits for the caller's stream (nothing it runs may overtake the caller's earlier
// work), and the caller's stream ends waiting for the rail stream. Every rank issues its conccl calls and its NCCL
// calls in the same order (phase-major), as in the unpipelined call.
bool runPipelined(const Runner& run, const HierChunks& hc, HierError* error) {
  HierState* h = run.h;
  const cudaStream_t user = run.a.stream, rail = h->railStream;
  auto cuda = [&](cudaError_t e, const char* what) {
    if (e == cudaSuccess) return true;
    *error = cudaFailure(std::string(run.a.call) + " (hierarchical, pipelined): " + what + ": " +
                         cudaGetErrorString(e));
    return false;
  };
  const size_t k = hc.programs.size();
  const int phases = hc.programs.front().phases;
  // The stream of each phase, from this rank's steps (a phase is rail for every chunk or for none).
  std::vector<bool> onRail(static_cast<size_t>(phases), false);
  for (const HierStep& s : hc.programs.front().steps) {
    if (s.comm == HierComm::kRail) onRail[static_cast<size_t>(s.phase)] = true;
  }
  auto stream = [&](int ph) { return onRail[static_cast<size_t>(ph)] ? rail : user; };
  auto event = [&](size_t chunk, int ph) { return h->chunkEvents[chunk * static_cast<size_t>(phases) + ph]; };
  cudaEvent_t fork = h->chunkEvents[k * static_cast<size_t>(phases)];
  cudaEvent_t join = h->chunkEvents[k * static_cast<size_t>(phases) + 1];
  if (!cuda(cudaEventRecord(fork, user), "cudaEventRecord") || !cuda(cudaStreamWaitEvent(rail, fork, 0), "wait")) {
    return false;
  }
  for (int ph = 0; ph < phases; ++ph) {
    for (size_t i = 0; i < k; ++i) {
      if (ph > 0 && stream(ph) != stream(ph - 1) &&
          !cuda(cudaStreamWaitEvent(stream(ph), event(i, ph - 1), 0), "cudaStreamWaitEvent")) {
        return false;
      }
      for (const HierStep& s : hc.programs[i].steps) {
        if (s.phase == ph && !runStep(run, s, stream(ph), error)) return false;
      }
      if (ph + 1 < phases && stream(ph + 1) != stream(ph) &&
          !cuda(cudaEventRecord(event(i, ph), stream(ph)), "cudaEventRecord")) {
        return false;
      }
    }
  }
  return cuda(cudaEventRecord(join, rail), "cudaEventRecord") && cuda(cudaStreamWaitEvent(user, join, 0), "wait");
}

// The call goes to the flat communicator: says why, once per collective kind and communicator.
HierOutcome flat(HierState* h, const HierArgs& a, const std::string& why) {
  const uint32_t bit = 1u << static_cast<int>(a.coll);
  if ((h->loggedFlat & bit) == 0) {
    h->loggedFlat |= bit;
    info(h, std::string(a.call) + ": flat NCCL (" + why + "; said once per collective and communicator)");
  }
  return HierOutcome{};
}

// The plan of a call of this shape on this rank (HierCallPlan), made on first use. Called with h->mutex held.
std::shared_ptr<const HierCallPlan> planFor(HierState* h, const HierArgs& a) {
  const HierCallKey key{static_cast<int>(a.coll), a.count, a.root, a.type, a.op};
  if (auto it = h->plans.find(key); it != h->plans.end()) return it->second;
  auto cp = std::make_shared<HierCallPlan>();
  const HierLayout& l = h->layout;
  sched::HierarchicalCall call;
  call.collective = a.coll;
  call.nodes = l.nodes;
  call.perNode = l.perNode;
  call.count = a.count;
  const bool blocks = a.coll == sched::HierCollective::kAllGather || a.coll == sched::HierCollective::kReduceScatter ||
                      a.coll == sched::HierCollective::kGather || a.coll == sched::HierCollective::kScatter;
  if (!l.nodeMajor && blocks) call.blockOf = l.commRank;  // block of plan rank p: its place in the caller's order
  call.root = l.planRank[static_cast<size_t>(a.root)];
  const sched::HierarchicalPlan plan = sched::planHierarchical(call);
  const int me = l.planRank[static_cast<size_t>(h->rank)];
  cp->program = hierProgram(plan, me, l.perNode);
  const size_t es = ncclTypeBytes(a.type);
  if (!cp->program.error.empty()) {
    cp->flatWhy = cp->program.error;  // e.g. pieces the ranks per node do not divide
  } else if (!toConcclType(a.type) || (a.op >= 0 && !toConcclOp(a.op))) {
    cp->flatWhy = "a type or op conccl lacks";
  } else if (cp->program.scratchCount * es > h->policy.scratchMaxBytes) {
    cp->flatWhy = "needs " + std::to_string(cp->program.scratchCount * es) +
                  " bytes of scratch, above CONCCL_NCCL_SCRATCH_MAX_BYTES";
  }
  // Every node phase of the plan (every rank's, so that all decide alike) must be one conccl runs exactly.
  if (h->policy.intraRefusal) {
    for (const sched::Phase& ph : plan.phases) {
      if (ph.where != sched::Where::kNode || !cp->flatWhy.empty()) continue;
      for (const sched::GroupOp& op : ph.ops) {
        std::string why = h->policy.intraRefusal(op.kind, a.type, reduces(op.kind) ? a.op : -1);
        if (!why.empty()) {
          cp->flatWhy = "intra phase on conccl: " + why;
          break;
        }
      }
    }
  }
  for (const sched::Phase& p : plan.phases) cp->phaseNames += (cp->phaseNames.empty() ? "" : " -> ") + p.name;
  // Pipelined in chunks when asked (AllReduce, Broadcast, Reduce, AllGather, ReduceScatter; chunks of at least
  // 256 KiB of the call's count argument), in the scratch the whole call needs.
  if (cp->flatWhy.empty() && h->chunks > 1) {
    cp->chunks = hierChunkPrograms(call, me, h->chunks, (size_t{256} << 10) / es);
    if (!cp->chunks.error.empty() || cp->chunks.programs.size() < 2 ||
        cp->chunks.scratchCount > cp->program.scratchCount) {
      cp->chunks = HierChunks{};
    }
  }
  if (h->plans.size() >= HierState::kMaxCachedPlans) h->plans.clear();
  h->plans.emplace(key, cp);
  return cp;
}

HierOutcome failed(HierError e) {
  HierOutcome o;
  o.ran = true;
  o.error = std::move(e);
  return o;
}

// A Send or Recv (hierRun): on the node's conccl communicator when the peer shares this node. Called with h->mutex
// held.
HierOutcome sendRecv(HierState* h, const HierArgs& a) {
  const HierLayout& l = h->layout;
  if (a.peer < 0 || a.peer >= static_cast<int>(l.node.size())) return HierOutcome{};  // the flat NCCL reports it
  if (l.node[static_cast<size_t>(a.peer)] != h->node) return flat(h, a, "send/recv to another node");
  const std::optional<concclDataType_t> type = toConcclType(a.type);
  if (!type) return flat(h, a, "a type conccl lacks");
  const int peer = l.local[static_cast<size_t>(a.peer)];
  const concclResult_t r = a.send ? concclSend(a.sendbuff, a.count, *type, peer, h->intra, a.stream)
                                  : concclRecv(a.recvbuff, a.count, *type, peer, h->intra, a.stream);
  if (r != concclSuccess) {
    return failed(concclError(r, std::string(a.call) + " (to a peer of this node, on conccl): " +
                                     concclGetErrorString(r) + ": " + concclGetLastError(h->intra)));
  }
  const uint32_t bit = 1u << static_cast<int>(a.coll);
  if ((h->loggedPhases & bit) == 0) {
    h->loggedPhases |= bit;
    info(h, std::string(a.call) + ": to peers of this node on conccl, to other nodes on NCCL (said once per "
                                  "communicator)");
  }
  HierOutcome done;
  done.ran = true;
  return done;
}

}  // namespace

HierOutcome hierRun(HierState* h, const HierArgs& a) {
  if (h == nullptr || h->aborted) return HierOutcome{};
  const bool p2p = a.coll == sched::HierCollective::kSendRecv;
  // Count 0, and a root outside the communicator: the flat communicator runs or reports it (a send / receive of 0
  // elements stays with its pair's library, below).
  if (!p2p && (a.count == 0 || a.root < 0 || a.root >= static_cast<int>(h->layout.planRank.size()))) {
    return HierOutcome{};
  }
  std::lock_guard<std::mutex> lock(h->mutex);
  if (h->railError != kSuccess) {
    return failed(ncclError(h->railError, std::string(a.call) +
                                              ": the communicator's rail (NCCL, across nodes) failed earlier (" +
                                              ncclResultString(h->railError) +
                                              "): the communicator is out of service, abort it"));
  }
  if (p2p) return sendRecv(h, a);
  // Inside a group the calls of both libraries are deferred to their own group ends, which would break the order
  // of the phases: grouped collectives use the flat communicator.
  if (a.inGroup) return flat(h, a, "inside a group");
  if (a.op >= kNumOps) return flat(h, a, "a PreMulSum op");  // made on the flat communicator
  if (!h->layout.nodeMajor && needsNodeMajor(a.coll)) return flat(h, a, "ranks not node-major");
  const std::shared_ptr<const HierCallPlan> cp = planFor(h, a);
  if (!cp->flatWhy.empty()) return flat(h, a, cp->flatWhy);
  const size_t es = ncclTypeBytes(a.type);
  const concclDataType_t ctype = *toConcclType(a.type);
  const concclRedOp_t cop = a.op >= 0 ? *toConcclOp(a.op) : concclSum;
  // Every decision above is the same on every rank (same call, same layout, same switches); what follows may fail on
  // one rank only, so it fails the call rather than send it to the flat communicator.
  const size_t scratchBytes = cp->program.scratchCount * es;
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(a.stream, &capture) != cudaSuccess) {
    cudaGetLastError();
    capture = cudaStreamCaptureStatusNone;
  }
  const bool capturing = capture != cudaStreamCaptureStatusNone;
  if (scratchBytes > 0) {
    std::string why;
    if (!acquireScratch(h, scratchBytes, a.stream, capturing, &why)) {
      return failed(HierError{kSystemError, concclSystemError, std::string(a.call) + " (hierarchical): " + why});
    }
  }
  Runner run{h, a, es, ctype, cop};
  HierError error;
  if (cp->chunks.programs.size() > 1) {
    if (!pipelineResources(h, pipelineEvents(cp->chunks))) {
      return failed(cudaFailure(std::string(a.call) + " (hierarchical): no stream or events for the pipelined phases"));
    }
    if (!runPipelined(run, cp->chunks, &error)) return failed(std::move(error));
    if ((h->loggedPipelined & (1u << static_cast<int>(a.coll))) == 0) {
      h->loggedPipelined |= 1u << static_cast<int>(a.coll);
      info(h, std::string(a.call) + ": pipelined in " + std::to_string(cp->chunks.programs.size()) +
                  " chunks, rail phases on a second stream");
    }
  } else {
    for (const HierStep& s : cp->program.steps) {
      if (!runStep(run, s, a.stream, &error)) return failed(std::move(error));
    }
  }
  if (scratchBytes > 0 && !capturing) {
    h->used = true;
    h->lastStream = a.stream;
    if (cudaEventRecord(h->lastUse, a.stream) != cudaSuccess) {
      return failed(cudaFailure(std::string(a.call) + " (hierarchical): cudaEventRecord failed"));
    }
  }
  const uint32_t bit = 1u << static_cast<int>(a.coll);
  if ((h->loggedPhases & bit) == 0) {
    h->loggedPhases |= bit;
    info(h, std::string(a.call) + ": hierarchical, " + std::to_string(cp->program.steps.size()) +
                " steps on this rank: " + cp->phaseNames + " (said once per collective and communicator)");
  }
  HierOutcome done;
  done.ran = true;
  return done;
}

HierState* makeHierState(const HierLayout& l, int rank, int chunks, HierPolicy policy, const RailApi* api,
                         const std::function<int(RailComm*)>& makeRail, const concclUniqueId& nodeId,
                         const concclConfig_t* nodeConfig, std::string* error) {
  if (rank < 0 || static_cast<size_t>(rank) >= l.node.size()) {
    *error = "inconsistent layout";
    return nullptr;
  }
  auto* h = new HierState;
  h->layout = l;
  h->rank = rank;
  h->node = l.node[static_cast<size_t>(rank)];
  h->local = l.local[static_cast<size_t>(rank)];
  h->chunks = chunks < 1 ? 1 : chunks;
  h->policy = std::move(policy);
  h->api = api;
  cudaGetDevice(&h->device);
  const int r = makeRail(&h->rail);
  if (r != kSuccess || h->rail == nullptr) {
    const char* last = api->getLastError != nullptr ? api->getLastError(nullptr) : "";
    *error = "the rail NCCL communicator (local index " + std::to_string(h->local) + "): " + ncclResultString(r) +
             (last != nullptr && *last != '\0' ? std::string(": ") + last : std::string());
    delete h;
    return nullptr;
  }
  concclResult_t cr = concclCommInitRankConfig(&h->intra, l.perNode, nodeId, h->local, nodeConfig);
  if (cr != concclSuccess) {
    *error = "the intra-node communicator on conccl (node " + std::to_string(h->node) +
             "): " + concclGetErrorString(cr) + ": " + concclGetLastError(nullptr);
    api->commDestroy(h->rail);
    delete h;
    return nullptr;
  }
  return h;
}

void watchLiveness(HierState* h, std::shared_ptr<LivenessLink> link, bool owner, std::vector<int> linkRanks) {
  std::lock_guard<std::mutex> lock(h->mutex);
  h->link = std::move(link);
  h->ownsLink = owner && h->link != nullptr;
  h->linkRanks = std::move(linkRanks);
}

int linkRankOf(const HierState* h, int r) {
  return h->linkRanks.empty() ? r : h->linkRanks[static_cast<size_t>(r)];
}

namespace {

// Whether the liveness link reports one of h's ranks (or the root) gone; *why says which. Called under h->mutex.
bool livenessFailed(HierState* h, std::string* why) {
  if (h->link == nullptr) return false;
  const int dead = h->link->poll();
  if (dead == LivenessLink::kAlive) return false;
  if (dead == LivenessLink::kRootLost) {
    *why = h->link->describe(dead);
    return true;
  }
  const int n = static_cast<int>(h->layout.node.size());
  for (int r = 0; r < n; ++r) {
    if (linkRankOf(h, r) != dead) continue;
    *why = "rank " + std::to_string(r) + " (node " + std::to_string(h->layout.node[static_cast<size_t>(r)]) +
           ") of this communicator: " + h->link->describe(dead);
    return true;
  }
  return false;  // a rank of the parent that is not in this split child
}

}  // namespace

HierError railAsyncError(HierState* h, int* asyncError) {
  *asyncError = kSuccess;
  // The rail first: a peer node that dies shows there, and its abort is what lets this rank's stream go on.
  std::lock_guard<std::mutex> lock(h->mutex);
  if (h->railError != kSuccess) {
    *asyncError = h->railError;
    return HierError{};
  }
  // A rank whose process ended, heard from the rendezvous root at once (the rail would hear of it only when one of
  // its transfers to that node fails: 1.2-1.3 s on 3 simulated nodes, 2026-12-03).
  if (std::string why; livenessFailed(h, &why)) {
    warn(h, "rank " + std::to_string(h->rank) + " (node " + std::to_string(h->node) + "): " + why +
                "; failing the communicator (ncclRemoteError)");
    abortFailedRail(h, kRemoteError);
    *asyncError = kRemoteError;
    return HierError{};
  }
  if (h->rail == nullptr || h->api->commGetAsyncError == nullptr) return HierError{};
  const int r = h->api->commGetAsyncError(h->rail, asyncError);
  if (r != kSuccess) return ncclError(r, "ncclCommGetAsyncError (rail) failed");
  if (*asyncError != kSuccess && *asyncError != kInProgress) abortFailedRail(h, *asyncError);
  return HierError{};
}

HierError intraAsyncError(HierState* h, int* asyncError) {
  concclResult_t e = concclSuccess;
  concclResult_t cr = concclCommGetAsyncError(h->intra, &e);
  if (cr != concclSuccess) {
    return concclError(cr, std::string("concclCommGetAsyncError (intra): ") + concclGetLastError(h->intra));
  }
  *asyncError = toNcclResult(e);
  return HierError{};
}

void abortFailedRail(HierState* h, int error) {
  // The rail's kernels wait for a peer that will never answer, and every phase queued behind them on this rank's
  // stream (conccl's intra-node phases) waits with them: the caller's synchronize, and conccl's own abort (which lets
  // the rank's launched work drain first), would then wait for the timeout. NCCL's abort ends those kernels. The
  // rail is used only under h->mutex (hierRun), which the caller holds.
  const int r = h->rail != nullptr ? h->api->commAbort(h->rail) : kSuccess;
  warn(h, std::string("the rail communicator (NCCL, local index ") + std::to_string(h->local) + ") failed: " +
              ncclResultString(error) + "; aborted it (" + ncclResultString(r) +
              ") so that the phases queued behind it drain; the communicator is out of service: abort it");
  h->rail = nullptr;
  h->railError = error;
}

HierError destroyHierState(HierState* h, bool abort) {
  if (h == nullptr) return HierError{};
  // The watch ends for every rank (a job that ends is never reported as ranks dying); a child's shared link stays.
  if (h->link != nullptr && h->ownsLink) h->link->bye();
  HierError first;
  // An abort ends the rail's kernels first: conccl's abort lets this rank's launched work drain, and the intra-node
  // phases queued behind a rail phase that waits for a dead node would otherwise hold it until the timeout.
  auto releaseRail = [&] {
    if (h->rail == nullptr) return;
    const int r = abort ? h->api->commAbort(h->rail) : h->api->commDestroy(h->rail);
    if (r != kSuccess && !first.failed()) {
      first = ncclError(r, std::string(abort ? "ncclCommAbort" : "ncclCommDestroy") + " (rail): " +
                               ncclResultString(r));
    }
    h->rail = nullptr;
  };
  if (abort) releaseRail();
  if (h->intra != nullptr) {
    concclResult_t r = abort ? concclCommAbort(h->intra) : concclCommDestroy(h->intra);
    if (r != concclSuccess && !first.failed()) {
      first = concclError(r, std::string(abort ? "concclCommAbort" : "concclCommDestroy") + " (intra): " +
                                 concclGetLastError(nullptr));
    }
  }
  if (!abort) releaseRail();
  // After an abort the device queue may be broken: cudaFree would wait for it. The scratch is then dropped.
  if (!abort && !first.failed() && !h->aborted) {
    CudaDeviceGuard guard(h->device);
    if (h->scratch != nullptr) cudaFree(h->scratch);
    for (void* p : h->retired) cudaFree(p);
    if (h->lastUse != nullptr) cudaEventDestroy(h->lastUse);
    for (cudaEvent_t e : h->chunkEvents) cudaEventDestroy(e);
    if (h->railStream != nullptr) cudaStreamDestroy(h->railStream);
  }
  delete h;
  return first;
}

}  // namespace conccl::nccl
