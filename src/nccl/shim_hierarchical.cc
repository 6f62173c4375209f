// Collectives of a communicator across hosts on the hierarchical path (shim_hierarchical.h): the plan of
// sched/hierarchical.h, this rank's share of it as NCCL-shaped steps (hier_steps.h), each step enqueued on the
// caller's stream in order:
//   intra steps  -> conccl's C API on the node's communicator (copy engines; reduce CTAs for the reductions),
//   rail steps   -> the real NCCL on the rail's communicator (NCCL's kernels),
//   local copies -> cudaMemcpy2DAsync / cudaMemcpyAsync (one per row pattern).
// The stream orders the phases; nothing waits on the host. Scratch: one device buffer per communicator, grown on
// demand (HierState). A call that cannot run this way returns false before anything is enqueued and goes to the flat
// communicator; once the first step is enqueued a failure is returned as the call's error (the peers' steps may be
// in flight: as for NCCL, the communicator should then be aborted).
// Pipelining (CONCCL_NCCL_HIER_CHUNKS > 1): AllReduce, Broadcast, Reduce, AllGather and ReduceScatter in pieces
// whose rail phases run on a second stream beside the node phases of the other pieces (runPipelined); the other
// calls run each phase over the whole buffer (docs/hierarchical.md).
#include "nccl/shim_hierarchical.h"

#include <cuda_runtime_api.h>

#include <cstring>
#include <string>

#include "nccl/premul_ops.h"
#include "nccl/shim_comm.h"
#include "nccl/type_map.h"

namespace conccl::nccl {
namespace {

using sched::GroupKind;
using sched::HierBuffer;

Coll collOf(GroupKind k) {
  switch (k) {
    case GroupKind::kAllReduce:
      return Coll::kAllReduce;
    case GroupKind::kReduceScatter:
      return Coll::kReduceScatter;
    case GroupKind::kAllGather:
      return Coll::kAllGather;
    case GroupKind::kBroadcast:
      return Coll::kBroadcast;
    case GroupKind::kReduce:
      return Coll::kReduce;
    case GroupKind::kGather:
      return Coll::kGather;
    case GroupKind::kScatter:
      return Coll::kScatter;
    case GroupKind::kAllToAll:
      return Coll::kAllToAll;
    case GroupKind::kSendRecv:
    case GroupKind::kCopy:
      return Coll::kSendRecv;
  }
  return Coll::kSendRecv;
}

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
    // the capture (the memory is not part of the graph; it lives until ncclCommDestroy).
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    cudaThreadExchangeStreamCaptureMode(&mode);
    size_t grow = h->scratchBytes * 2 > bytes ? h->scratchBytes * 2 : bytes;
    if (grow > shim().env.scratchMaxBytes) grow = bytes;
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

  ncclResult_t rail(const HierStep& s, cudaStream_t st) const {
    const void* in = at(s.in);
    void* out = at(s.out);
    ncclComm_t c = h->rail;
    const auto op = static_cast<ncclRedOp_t>(a.op < 0 ? 0 : a.op);
    switch (s.kind) {
      case GroupKind::kAllReduce: {
        auto fn = realFn<decltype(&::ncclAllReduce)>("ncclAllReduce");
        return fn ? fn(in, out, s.count, a.type, op, c, st) : ncclInvalidUsage;
      }
      case GroupKind::kReduceScatter: {
        auto fn = realFn<decltype(&::ncclReduceScatter)>("ncclReduceScatter");
        return fn ? fn(in, out, s.count, a.type, op, c, st) : ncclInvalidUsage;
      }
      case GroupKind::kAllGather: {
        auto fn = realFn<decltype(&::ncclAllGather)>("ncclAllGather");
        return fn ? fn(in, out, s.count, a.type, c, st) : ncclInvalidUsage;
      }
      case GroupKind::kBroadcast: {
        auto fn = realFn<decltype(&::ncclBroadcast)>("ncclBroadcast");
        return fn ? fn(in, out, s.count, a.type, s.root, c, st) : ncclInvalidUsage;
      }
      case GroupKind::kReduce: {
        auto fn = realFn<decltype(&::ncclReduce)>("ncclReduce");
        return fn ? fn(in, out, s.count, a.type, op, s.root, c, st) : ncclInvalidUsage;
      }
      case GroupKind::kGather: {
        auto fn = realFn<decltype(&::ncclGather)>("ncclGather");
        return fn ? fn(in, out, s.count, a.type, s.root, c, st) : ncclInvalidUsage;
      }
      case GroupKind::kScatter: {
        auto fn = realFn<decltype(&::ncclScatter)>("ncclScatter");
        return fn ? fn(in, out, s.count, a.type, s.root, c, st) : ncclInvalidUsage;
      }
      case GroupKind::kAllToAll: {
        auto fn = realFn<decltype(&::ncclAlltoAll)>("ncclAlltoAll");
        return fn ? fn(in, out, s.count, a.type, c, st) : ncclInvalidUsage;
      }
      case GroupKind::kSendRecv: {
        if (s.send) {
          auto fn = realFn<decltype(&::ncclSend)>("ncclSend");
          return fn ? fn(in, s.count, a.type, s.peer, c, st) : ncclInvalidUsage;
        }
        auto fn = realFn<decltype(&::ncclRecv)>("ncclRecv");
        return fn ? fn(out, s.count, a.type, s.peer, c, st) : ncclInvalidUsage;
      }
      case GroupKind::kCopy:
        break;
    }
    return ncclInternalError;
  }

  cudaError_t local(const HierStep& s, cudaStream_t st) const {
    const size_t width = s.count * es;
    if (s.rows == 1) return cudaMemcpyAsync(at(s.out), at(s.in), width, cudaMemcpyDeviceToDevice, st);
    // One 2D copy per row pattern: the reorders are N or G rows of one block each (hier_steps.cc).
    return cudaMemcpy2DAsync(at(s.out), s.dstPitch * es, at(s.in), s.srcPitch * es, width, s.rows,
                             cudaMemcpyDeviceToDevice, st);
  }
};

// Enqueues one step on `st`; false with *result set (the failure recorded on comm) when it fails.
bool runStep(ncclComm_t comm, const Runner& run, const HierStep& s, cudaStream_t st, ncclResult_t* result) {
  const std::string where = std::string(run.a.call) + " (hierarchical, phase " + std::to_string(s.phase) + ", " +
                            sched::groupKindName(s.kind) + " " + hierCommName(s.comm) + ")";
  if (s.comm == HierComm::kIntra) {
    concclResult_t r = run.intra(s, st);
    if (r == concclSuccess) return true;
    *result = fail(comm, static_cast<ncclResult_t>(toNcclResult(r)),
                   where + ": " + concclGetErrorString(r) + ": " + concclGetLastError(run.h->intra));
    return false;
  }
  if (s.comm == HierComm::kRail) {
    ncclResult_t r = run.rail(s, st);
    if (r == ncclSuccess) return true;
    *result = fail(comm, r, where + ": the real NCCL: " + ncclResultString(r));
    return false;
  }
  cudaError_t e = run.local(s, st);
  if (e == cudaSuccess) return true;
  *result = fail(comm, ncclUnhandledCudaError, where + ": " + cudaGetErrorString(e));
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
bool runPipelined(ncclComm_t comm, const Runner& run, const HierChunks& hc, ncclResult_t* result) {
  HierState* h = run.h;
  const cudaStream_t user = run.a.stream, rail = h->railStream;
  auto cuda = [&](cudaError_t e, const char* what) {
    if (e == cudaSuccess) return true;
    *result = fail(comm, ncclUnhandledCudaError,
                   std::string(run.a.call) + " (hierarchical, pipelined): " + what + ": " + cudaGetErrorString(e));
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
        if (s.phase == ph && !runStep(comm, run, s, stream(ph), result)) return false;
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
bool flat(HierState* h, const HierArgs& a, const std::string& why) {
  const uint32_t bit = 1u << static_cast<int>(a.coll);
  if ((h->loggedFlat & bit) == 0) {
    h->loggedFlat |= bit;
    logInfo(std::string(a.call) + ": flat NCCL (" + why + "; said once per collective and communicator)");
  }
  return false;
}

// The plan of a call of this shape on this rank (HierCallPlan), made on first use. Called with h->mutex held.
std::shared_ptr<const HierCallPlan> planFor(HierState* h, const HierArgs& a) {
  const HierCallKey key{static_cast<int>(a.coll), a.count, a.root, static_cast<int>(a.type), a.op};
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
  const size_t es = ncclTypeBytes(static_cast<int>(a.type));
  if (!cp->program.error.empty()) {
    cp->flatWhy = cp->program.error;  // e.g. pieces the ranks per node do not divide
  } else if (!toConcclType(static_cast<int>(a.type)) || (a.op >= 0 && !toConcclOp(a.op))) {
    cp->flatWhy = "a type or op conccl lacks";
  } else if (cp->program.scratchCount * es > shim().env.scratchMaxBytes) {
    cp->flatWhy = "needs " + std::to_string(cp->program.scratchCount * es) +
                  " bytes of scratch, above CONCCL_NCCL_SCRATCH_MAX_BYTES";
  }
  // Every node phase of the plan (every rank's, so that all decide alike) must be one conccl runs exactly (type, op,
  // CONCCL_NCCL_COLLS).
  for (const sched::Phase& ph : plan.phases) {
    if (ph.where != sched::Where::kNode || !cp->flatWhy.empty()) continue;
    for (const sched::GroupOp& op : ph.ops) {
      Decision d =
          routeCall(shim().env, Path::kConccl, collOf(op.kind), static_cast<int>(a.type), reduces(op.kind) ? a.op : -1);
      if (d.path != Path::kConccl) {
        cp->flatWhy = "intra phase on conccl: " + d.reason;
        break;
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

}  // namespace

bool hierarchicalCall(ncclComm_t comm, const HierArgs& a, ncclResult_t* result) {
  if (comm == nullptr || !isShimComm(comm) || comm->hier == nullptr || comm->real == nullptr) return false;
  HierState* h = comm->hier;
  if (a.count == 0 || h->aborted) return false;
  // A root outside the communicator: the flat NCCL reports it.
  if (a.root < 0 || a.root >= static_cast<int>(h->layout.planRank.size())) return false;
  std::lock_guard<std::mutex> lock(h->mutex);
  if (h->railError != ncclSuccess) {
    *result = fail(comm, h->railError,
                   std::string(a.call) + ": the communicator's rail (NCCL, across nodes) failed earlier (" +
                       ncclResultString(h->railError) + "): the communicator is out of service, abort it");
    return true;
  }
  // Inside a group the calls of both libraries are deferred to their own group ends, which would break the order
  // of the phases: grouped calls (and every send/recv, which NCCL programs pair inside groups) use the flat
  // communicator.
  if (groupDepth() > 0) return flat(h, a, "inside ncclGroupStart/End");
  if (a.coll == sched::HierCollective::kSendRecv) return flat(h, a, "send/recv");
  if (a.op >= static_cast<int>(ncclNumOps)) return flat(h, a, "a PreMulSum op");  // made on the flat communicator
  if (!h->layout.nodeMajor && needsNodeMajor(a.coll)) return flat(h, a, "ranks not node-major");
  const std::shared_ptr<const HierCallPlan> cp = planFor(h, a);
  if (!cp->flatWhy.empty()) return flat(h, a, cp->flatWhy);
  const size_t es = ncclTypeBytes(static_cast<int>(a.type));
  const concclDataType_t ctype = *toConcclType(static_cast<int>(a.type));
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
      *result = fail(comm, ncclSystemError, std::string(a.call) + " (hierarchical): " + why);
      return true;
    }
  }
  Runner run{h, a, es, ctype, cop};
  if (cp->chunks.programs.size() > 1) {
    if (!pipelineResources(h, pipelineEvents(cp->chunks))) {
      *result = fail(comm, ncclUnhandledCudaError,
                     std::string(a.call) + " (hierarchical): no stream or events for the pipelined phases");
      return true;
    }
    if (!runPipelined(comm, run, cp->chunks, result)) return true;
    if ((h->loggedPipelined & (1u << static_cast<int>(a.coll))) == 0) {
      h->loggedPipelined |= 1u << static_cast<int>(a.coll);
      logInfo(std::string(a.call) + ": pipelined in " + std::to_string(cp->chunks.programs.size()) +
              " chunks, rail phases on a second stream");
    }
  } else {
    for (const HierStep& s : cp->program.steps) {
      if (!runStep(comm, run, s, a.stream, result)) return true;
    }
  }
  if (scratchBytes > 0 && !capturing) {
    h->used = true;
    h->lastStream = a.stream;
    if (cudaEventRecord(h->lastUse, a.stream) != cudaSuccess) {
      *result = fail(comm, ncclUnhandledCudaError, std::string(a.call) + " (hierarchical): cudaEventRecord failed");
      return true;
    }
  }
  const uint32_t bit = 1u << static_cast<int>(a.coll);
  if ((h->loggedPhases & bit) == 0) {
    h->loggedPhases |= bit;
    logInfo(std::string(a.call) + ": hierarchical, " + std::to_string(cp->program.steps.size()) +
            " steps on this rank: " + cp->phaseNames + " (said once per collective and communicator)");
  }
  *result = ncclSuccess;
  return true;
}

}  // namespace conccl::nccl
