// Setup of a drop-in communicator across hosts on the hierarchical path (shim_hierarchical.h): the root's answer with
// the drop-in's switches, each rank's three inits (flat, rail and node communicators, the rail and the flat one with
// the caller's NCCL config), destroy and the asynchronous error. The engine and the answer's format are shared with
// the C API (hier_exec.h, hier_answer.h).
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

ncclUniqueId asNcclId(const RailId& id) {
  ncclUniqueId out;
  static_assert(sizeof(out.internal) == sizeof(id.internal));
  std::memcpy(out.internal, id.internal, sizeof(out.internal));
  return out;
}

// Where the SMs go (no per-call figure can be measured here): the intra phases use copy engines and, for the
// reductions, conccl's reduce CTAs (CONCCL_REDUCE_CTAS); the rail phases are NCCL kernels on NCCL's own CTAs, one per
// channel (NCCL chooses the count from the topology; NCCL_MIN_NCHANNELS / NCCL_MAX_NCHANNELS and the config's
// maxCTAs, default 32, bound it).
constexpr const char* kSmUse =
    "SMs per call: conccl's reduce CTAs in the intra phases (copy engines otherwise), NCCL's channels' CTAs on the rail";

}  // namespace

bool shimHierarchicalAnswer(const std::vector<uint64_t>& hosts, std::string* answer, std::string* why,
                            std::string* error) {
  if (!shim().env.hierarchical) {
    *why = "hierarchical path off (CONCCL_NCCL_HIERARCHICAL=0)";
    return false;
  }
  return makeHierarchicalAnswer(hosts, shim().env.hierChunks, *shimRailApi(), answer, why, error);
}

HierInit initHierarchical(const std::string& answer, const std::vector<uint64_t>& hosts, int nranks, int rank,
                          ncclConfig_t* config, const std::string& call) {
  HierInit out;
  auto fail = [&](ncclResult_t r, const std::string& what) {
    out.result = r;
    out.error = call + " (hierarchical): " + what;
    return out;
  };
  HierAnswer a = parseHierarchicalAnswer(answer, hosts, nranks, rank);
  if (!a.error.empty()) return fail(ncclInternalError, a.error);
  out.reason = a.reason;
  const HierLayout& l = a.layout;
  const int node = l.node[static_cast<size_t>(rank)], local = l.local[static_cast<size_t>(rank)];

  auto initReal = realFn<decltype(&::ncclCommInitRankConfig)>("ncclCommInitRankConfig");
  auto destroyReal = realFn<decltype(&::ncclCommDestroy)>("ncclCommDestroy");
  if (initReal == nullptr || destroyReal == nullptr) return fail(ncclInvalidUsage, "the real NCCL lacks its init");
  ncclConfig_t c = blockingConfig(config);
  // 1. The flat communicator, as for any communicator across hosts.
  ncclResult_t r = initReal(&out.flat, nranks, asNcclId(a.flatId), rank, &c);
  if (r != ncclSuccess)
    return fail(r, std::string("the flat NCCL communicator: ") + ncclResultString(r) + ": " + realLastError());
  // 2. The rail (the ranks with this local index, ranked by node), 3. the node (conccl, ranked by local index).
  const ncclUniqueId railId = asNcclId(a.railIds[static_cast<size_t>(local)]);
  auto makeRail = [&](RailComm* rail) {
    ncclComm_t made = nullptr;
    const ncclResult_t rr = initReal(&made, l.nodes, railId, node, &c);
    *rail = made;
    return static_cast<int>(rr);
  };
  std::string error;
  out.hier = makeHierState(l, rank, a.chunks, shimHierPolicy(), shimRailApi(), makeRail,
                           a.nodeIds[static_cast<size_t>(node)], nullptr, &error);
  if (out.hier == nullptr) {
    destroyReal(out.flat);
    out.flat = nullptr;
    return fail(ncclSystemError, error);
  }
  logInfo("rank " + std::to_string(rank) + " of " + std::to_string(nranks) + ": " + out.reason + "; node " +
          std::to_string(node) + " local " + std::to_string(local) + "; " + kSmUse);
  return out;
}

HierState* hierarchicalFromSplit(ncclComm_t child, const HierLayout& l, int rank,
                                 const std::vector<concclUniqueId>& nodeIds, int chunks, const ncclConfig_t* config,
                                 std::string* error) {
  auto split = realFn<decltype(&::ncclCommSplit)>("ncclCommSplit");
  if (split == nullptr) {
    *error = "the real NCCL lacks ncclCommSplit";
    return nullptr;
  }
  if (rank < 0 || static_cast<size_t>(rank) >= l.node.size() || nodeIds.size() != static_cast<size_t>(l.nodes)) {
    *error = "inconsistent layout";
    return nullptr;
  }
  const int node = l.node[static_cast<size_t>(rank)], local = l.local[static_cast<size_t>(rank)];
  ncclConfig_t c = blockingConfig(config);
  auto makeRail = [&](RailComm* rail) {
    ncclComm_t made = nullptr;
    const ncclResult_t r = split(child, local, node, &made, &c);
    *rail = made;
    return static_cast<int>(r);
  };
  return makeHierState(l, rank, chunks, shimHierPolicy(), shimRailApi(), makeRail,
                       nodeIds[static_cast<size_t>(node)], nullptr, error);
}

ncclResult_t releaseShimHier(HierState* state, bool abort) {
  const HierError e = destroyHierState(state, abort);
  return e.failed() ? fail(nullptr, static_cast<ncclResult_t>(e.ncclCode), e.message) : ncclSuccess;
}

ncclResult_t hierAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  auto fn = realFn<decltype(&::ncclCommGetAsyncError)>("ncclCommGetAsyncError");
  if (fn == nullptr) return fail(comm, ncclInvalidUsage, "ncclCommGetAsyncError: the real NCCL lacks it");
  HierState* h = comm->hier;
  int e = 0;
  HierError q = railAsyncError(h, &e);
  if (q.failed()) return fail(comm, static_cast<ncclResult_t>(q.ncclCode), q.message);
  if (e != ncclSuccess && e != ncclInProgress) {
    *asyncError = static_cast<ncclResult_t>(e);
    return ncclSuccess;
  }
  ncclResult_t r = fn(comm->real, asyncError);
  if (r != ncclSuccess || *asyncError != ncclSuccess) return r;
  q = intraAsyncError(h, &e);
  if (q.failed()) return fail(comm, static_cast<ncclResult_t>(q.ncclCode), q.message);
  *asyncError = static_cast<ncclResult_t>(e);
  return ncclSuccess;
}

}  // namespace conccl::nccl
