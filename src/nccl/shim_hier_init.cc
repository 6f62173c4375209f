// Setup of a communicator across hosts on the hierarchical path (shim_hierarchical.h): the rendezvous root's answer
// (every id the ranks need, made once at the root so that every rank receives the same ones), and each rank's three
// inits. The ids travel in the communicator's own rendezvous reply (rendezvous.h), which carries at most 64 KiB:
// (nodes + perNode + 1) ids of 128 bytes, about 500 ids, e.g. 64 nodes x 8 GPUs takes 73; a larger job falls back
// to the flat path (logged).
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "nccl/shim_comm.h"
#include "nccl/shim_hierarchical.h"
#include "nccl/type_map.h"

namespace conccl::nccl {
namespace {

constexpr size_t kIdBytes = NCCL_UNIQUE_ID_BYTES;
static_assert(sizeof(concclUniqueId::internal) == kIdBytes, "conccl and NCCL ids have one size here");
constexpr size_t kMaxAnswerBytes = 60000;  // below the rendezvous reply's 64 KiB, leaving room for the reason

void putU32(std::string* s, uint32_t v) { s->append(reinterpret_cast<const char*>(&v), sizeof(v)); }
uint32_t getU32(const std::string& s, size_t at) {
  uint32_t v = 0;
  std::memcpy(&v, s.data() + at, sizeof(v));
  return v;
}

bool realNcclId(char* out, std::string* error) {
  auto fn = realFn<decltype(&::ncclGetUniqueId)>("ncclGetUniqueId");
  ncclUniqueId id;
  ncclResult_t r = fn ? fn(&id) : ncclInvalidUsage;
  if (r != ncclSuccess) {
    *error = std::string("the real ncclGetUniqueId failed: ") + ncclResultString(r);
    return false;
  }
  std::memcpy(out, id.internal, kIdBytes);
  return true;
}

// A blocking copy of the caller's config (or NCCL's defaults): the three inits complete before ncclCommInitRank
// returns, which NCCL's contract for a non-blocking config allows (the shim does the same for conccl).
ncclConfig_t blockingConfig(const ncclConfig_t* config) {
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
  if (config != nullptr) c = *config;
  c.blocking = 1;
  return c;
}

std::string realLastError() {
  auto fn = realFn<decltype(&::ncclGetLastError)>("ncclGetLastError");
  return fn ? fn(nullptr) : "";
}

}  // namespace

bool makeHierarchicalAnswer(const std::vector<uint64_t>& hosts, std::string* answer, std::string* why,
                            std::string* error) {
  if (!shim().env.hierarchical) {
    *why = "hierarchical path off (CONCCL_NCCL_HIERARCHICAL=0)";
    return false;
  }
  HierLayout l = hierLayout(hosts);
  if (!l.error.empty()) {
    *why = "not hierarchical: " + l.error;
    return false;
  }
  if (!hierarchicalLayout(l)) {
    *why = "not hierarchical: " + std::to_string(l.nodes) + " nodes x " + std::to_string(l.perNode) + " ranks";
    return false;
  }
  const size_t ids = 1 + static_cast<size_t>(l.nodes) + static_cast<size_t>(l.perNode);
  if (1 + ids * kIdBytes + 12 > kMaxAnswerBytes) {
    *why = "not hierarchical: " + std::to_string(ids) + " ids do not fit the rendezvous reply";
    return false;
  }
  std::string a(1, kAnswerHierarchical);
  char id[kIdBytes] = {};
  if (!realNcclId(id, error)) return false;
  a.append(id, kIdBytes);
  putU32(&a, static_cast<uint32_t>(l.nodes));
  putU32(&a, static_cast<uint32_t>(l.perNode));
  putU32(&a, static_cast<uint32_t>(shim().env.hierChunks));  // the root's, so that every rank pipelines alike
  for (int k = 0; k < l.nodes; ++k) {
    concclUniqueId cid;
    if (concclGetUniqueId(&cid) != concclSuccess) {
      *error = std::string("concclGetUniqueId: ") + concclGetLastError(nullptr);
      return false;
    }
    a.append(cid.internal, kIdBytes);
  }
  for (int g = 0; g < l.perNode; ++g) {
    if (!realNcclId(id, error)) return false;
    a.append(id, kIdBytes);
  }
  a.append("hierarchical: " + std::to_string(l.nodes) + " nodes x " + std::to_string(l.perNode) +
           " ranks, intra on conccl, rails on NCCL" + (l.nodeMajor ? "" : " (ranks not node-major)"));
  *answer = std::move(a);
  return true;
}

HierInit initHierarchical(const std::string& answer, const std::vector<uint64_t>& hosts, int nranks, int rank,
                          ncclConfig_t* config, const std::string& call) {
  HierInit out;
  auto fail = [&](ncclResult_t r, const std::string& what) {
    out.result = r;
    out.error = call + " (hierarchical): " + what;
    return out;
  };
  const size_t head = 1 + kIdBytes + 12;
  if (answer.size() < head || answer[0] != kAnswerHierarchical) return fail(ncclInternalError, "malformed answer");
  const int nodes = static_cast<int>(getU32(answer, 1 + kIdBytes));
  const int perNode = static_cast<int>(getU32(answer, 1 + kIdBytes + 4));
  const int chunks = static_cast<int>(getU32(answer, 1 + kIdBytes + 8));
  HierLayout l = hierLayout(hosts);
  if (!l.error.empty() || l.nodes != nodes || l.perNode != perNode || static_cast<int>(hosts.size()) != nranks ||
      rank < 0 || rank >= nranks) {
    return fail(ncclInternalError, "the root's layout differs from this rank's");
  }
  const size_t idsEnd = head + (static_cast<size_t>(nodes) + static_cast<size_t>(perNode)) * kIdBytes;
  if (answer.size() < idsEnd) return fail(ncclInternalError, "the answer is cut short");
  out.reason = answer.substr(idsEnd);
  const int node = l.node[static_cast<size_t>(rank)], local = l.local[static_cast<size_t>(rank)];

  auto initReal = realFn<decltype(&::ncclCommInitRankConfig)>("ncclCommInitRankConfig");
  auto destroyReal = realFn<decltype(&::ncclCommDestroy)>("ncclCommDestroy");
  if (initReal == nullptr || destroyReal == nullptr) return fail(ncclInvalidUsage, "the real NCCL lacks its init");
  ncclConfig_t c = blockingConfig(config);
  // 1. The flat communicator, as for any communicator across hosts.
  ncclUniqueId flatId;
  std::memcpy(flatId.internal, answer.data() + 1, kIdBytes);
  ncclResult_t r = initReal(&out.flat, nranks, flatId, rank, &c);
  if (r != ncclSuccess)
    return fail(r, std::string("the flat NCCL communicator: ") + ncclResultString(r) + ": " + realLastError());
  // 2. The rail: the ranks with this local index, ranked by node.
  auto* h = new HierState;
  h->layout = l;
  h->rank = rank;
  h->node = node;
  h->local = local;
  h->chunks = chunks < 1 ? 1 : chunks;
  cudaGetDevice(&h->device);
  ncclUniqueId railId;
  std::memcpy(railId.internal, answer.data() + head + (static_cast<size_t>(nodes) + local) * kIdBytes, kIdBytes);
  r = initReal(&h->rail, nodes, railId, node, &c);
  if (r != ncclSuccess) {
    const std::string e = realLastError();
    destroyReal(out.flat);
    out.flat = nullptr;
    delete h;
    return fail(
        r, "the rail NCCL communicator (local index " + std::to_string(local) + "): " + ncclResultString(r) + ": " + e);
  }
  // 3. The node: conccl, ranked by local index.
  concclUniqueId nodeId;
  std::memcpy(nodeId.internal, answer.data() + head + static_cast<size_t>(node) * kIdBytes, kIdBytes);
  concclResult_t cr = concclCommInitRank(&h->intra, perNode, nodeId, local);
  if (cr != concclSuccess) {
    const std::string e = concclGetLastError(nullptr);
    destroyReal(h->rail);
    destroyReal(out.flat);
    out.flat = nullptr;
    delete h;
    return fail(static_cast<ncclResult_t>(toNcclResult(cr)), "the intra-node communicator on conccl (node " +
                                                                 std::to_string(node) +
                                                                 "): " + concclGetErrorString(cr) + ": " + e);
  }
  out.hier = h;
  // Where the SMs go (no per-call figure can be measured here): the intra phases use copy engines and, for the
  // reductions, conccl's reduce CTAs (CONCCL_REDUCE_CTAS); the rail phases are NCCL kernels on NCCL's own CTAs, one
  // per channel (NCCL chooses the count from the topology; NCCL_MIN_NCHANNELS / NCCL_MAX_NCHANNELS and the config's
  // maxCTAs, default 32, bound it).
  logInfo("rank " + std::to_string(rank) + " of " + std::to_string(nranks) + ": " + out.reason + "; node " +
          std::to_string(node) + " local " + std::to_string(local) +
          "; SMs per call: conccl's reduce CTAs in the "
          "intra phases (copy engines otherwise), NCCL's channels' CTAs on the rail");
  return out;
}

HierState* hierarchicalFromSplit(ncclComm_t child, const HierLayout& l, int rank,
                                 const std::vector<concclUniqueId>& nodeIds, int chunks, const ncclConfig_t* config,
                                 std::string* error) {
  auto split = realFn<decltype(&::ncclCommSplit)>("ncclCommSplit");
  auto destroyReal = realFn<decltype(&::ncclCommDestroy)>("ncclCommDestroy");
  if (split == nullptr || destroyReal == nullptr) {
    *error = "the real NCCL lacks ncclCommSplit";
    return nullptr;
  }
  if (rank < 0 || static_cast<size_t>(rank) >= l.node.size() || nodeIds.size() != static_cast<size_t>(l.nodes)) {
    *error = "inconsistent layout";
    return nullptr;
  }
  auto* h = new HierState;
  h->layout = l;
  h->rank = rank;
  h->node = l.node[static_cast<size_t>(rank)];
  h->local = l.local[static_cast<size_t>(rank)];
  h->chunks = chunks < 1 ? 1 : chunks;
  cudaGetDevice(&h->device);
  ncclConfig_t c = blockingConfig(config);
  ncclResult_t r = split(child, h->local, h->node, &h->rail, &c);
  if (r != ncclSuccess || h->rail == nullptr) {
    *error = std::string("the rail split: ") + ncclResultString(r) + ": " + realLastError();
    delete h;
    return nullptr;
  }
  concclResult_t cr = concclCommInitRank(&h->intra, l.perNode, nodeIds[static_cast<size_t>(h->node)], h->local);
  if (cr != concclSuccess) {
    *error = "the intra-node communicator on conccl (node " + std::to_string(h->node) +
             "): " + concclGetErrorString(cr) + ": " + concclGetLastError(nullptr);
    destroyReal(h->rail);
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

ncclResult_t hierAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  auto fn = realFn<decltype(&::ncclCommGetAsyncError)>("ncclCommGetAsyncError");
  if (fn == nullptr) return fail(comm, ncclInvalidUsage, "ncclCommGetAsyncError: the real NCCL lacks it");
  HierState* h = comm->hier;
  {
    // The rail first: a peer node that dies shows there, and its abort is what lets this rank's stream go on.
    std::lock_guard<std::mutex> lock(h->mutex);
    if (h->railError != ncclSuccess) {
      *asyncError = h->railError;
      return ncclSuccess;
    }
    // A rank whose process ended, heard from the rendezvous root at once (the rail would hear of it only when one of
    // its transfers to that node fails: 1.2-1.3 s on 3 simulated nodes, 2026-12-03).
    if (std::string why; livenessFailed(h, &why)) {
      logWarn("rank " + std::to_string(h->rank) + " (node " + std::to_string(h->node) + "): " + why +
              "; failing the communicator (ncclRemoteError)");
      abortFailedRail(h, ncclRemoteError);
      *asyncError = ncclRemoteError;
      return ncclSuccess;
    }
    ncclResult_t r = fn(h->rail, asyncError);
    if (r != ncclSuccess) return r;
    if (*asyncError != ncclSuccess && *asyncError != ncclInProgress) {
      abortFailedRail(h, *asyncError);
      return ncclSuccess;
    }
  }
  ncclResult_t r = fn(comm->real, asyncError);
  if (r != ncclSuccess || *asyncError != ncclSuccess) return r;
  concclResult_t e = concclSuccess;
  concclResult_t cr = concclCommGetAsyncError(h->intra, &e);
  if (cr != concclSuccess) return fromConccl(comm, cr, "ncclCommGetAsyncError (intra)");
  *asyncError = static_cast<ncclResult_t>(toNcclResult(e));
  return ncclSuccess;
}

void abortFailedRail(HierState* h, ncclResult_t error) {
  // The rail's kernels wait for a peer that will never answer, and every phase queued behind them on this rank's
  // stream (conccl's intra-node phases) waits with them: the caller's synchronize, and conccl's own abort (which lets
  // the rank's launched work drain first), would then wait for the timeout. NCCL's abort ends those kernels. The
  // rail is used only under h->mutex (hierarchicalCall), which the caller holds.
  auto abortFn = realFn<decltype(&::ncclCommAbort)>("ncclCommAbort");
  const ncclResult_t r = abortFn ? abortFn(h->rail) : ncclInvalidUsage;
  logWarn(std::string("the rail communicator (NCCL, local index ") + std::to_string(h->local) + ") failed: " +
          ncclResultString(error) + "; aborted it (" + ncclResultString(r) +
          ") so that the phases queued behind it drain; the communicator is out of service: abort it");
  h->rail = nullptr;
  h->railError = error;
}

ncclResult_t destroyHierState(HierState* state, bool abort) {
  if (state == nullptr) return ncclSuccess;
  // The watch ends for every rank (a job that ends is never reported as ranks dying); a child's shared link stays.
  if (state->link != nullptr && state->ownsLink) state->link->bye();
  ncclResult_t first = ncclSuccess;
  auto keep = [&first](ncclResult_t r) {
    if (first == ncclSuccess) first = r;
  };
  // An abort ends the rail's kernels first: conccl's abort lets this rank's launched work drain, and the intra-node
  // phases queued behind a rail phase that waits for a dead node would otherwise hold it until the timeout.
  auto releaseRail = [&] {
    if (state->rail == nullptr) return;
    auto fn = realFn<decltype(&::ncclCommDestroy)>(abort ? "ncclCommAbort" : "ncclCommDestroy");
    keep(fn ? fn(state->rail) : ncclInvalidUsage);
    state->rail = nullptr;
  };
  if (abort) releaseRail();
  if (state->intra != nullptr) {
    concclResult_t r = abort ? concclCommAbort(state->intra) : concclCommDestroy(state->intra);
    if (r != concclSuccess) keep(fromConccl(nullptr, r, abort ? "ncclCommAbort (intra)" : "ncclCommDestroy (intra)"));
  }
  if (!abort) releaseRail();
  // After an abort the device queue may be broken: cudaFree would wait for it. The scratch is then dropped.
  if (!abort && first == ncclSuccess && !state->aborted) {
    CudaDeviceGuard guard(state->device);
    if (state->scratch != nullptr) cudaFree(state->scratch);
    for (void* p : state->retired) cudaFree(p);
    if (state->lastUse != nullptr) cudaEventDestroy(state->lastUse);
    for (cudaEvent_t e : state->chunkEvents) cudaEventDestroy(e);
    if (state->railStream != nullptr) cudaStreamDestroy(state->railStream);
  }
  delete state;
  return first;
}

}  // namespace conccl::nccl
