// Unique ids and communicator init (ncclGetUniqueId, ncclCommInitRank, ncclCommInitRankConfig,
// ncclCommInitRankScalable, and the inits deferred to ncclGroupEnd): where each communicator finds out which of its
// ranks share a host and takes its path, conccl when they all do, the real NCCL otherwise (docs/nccl-shim.md,
// "Forwarding rules"; the rule is decideLocality() in routing.h, the meeting is rendezvous.h).
//
// With the shim on, ncclGetUniqueId starts a rendezvous root in the calling process and returns its id. Every
// rank's init meets the others there; when all have arrived the root decides once, makes the id the communicator
// is then built from (conccl's own, or the real NCCL's from the real ncclGetUniqueId), and sends it with the table
// of hosts to every rank. So every rank takes the same path, and only the root ever asks the real NCCL for an id.
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "nccl/liveness_link.h"
#include "nccl/nccl_abi.h"
#include "nccl/rendezvous.h"
#include "nccl/shim_comm.h"
#include "nccl/shim_hierarchical.h"
#include "nccl/type_map.h"

namespace conccl::nccl {
namespace {

bool realAvailable() { return shim().real->available(); }

const char* envLookup(const char* name) { return std::getenv(name); }

// The root's answer: a path letter, the 128-byte id to init with, the reason (for every rank's log line).
constexpr char kAnswerConccl = 'C';
constexpr char kAnswerNccl = 'N';
constexpr size_t kAnswerIdBytes = NCCL_UNIQUE_ID_BYTES;

int timeoutMs() {
  // conccl's own bound for a peer that does not arrive (CONCCL_TIMEOUT_MS, default 300 s), so that a rendezvous
  // and the conccl init after it give up alike.
  if (const char* v = std::getenv("CONCCL_TIMEOUT_MS"); v != nullptr) {
    long ms = std::strtol(v, nullptr, 10);
    if (ms > 0 && ms <= 0x7fffffff) return static_cast<int>(ms);
  }
  return 300000;
}

// Runs on the root's thread when every rank has arrived.
bool rootAnswer(const std::vector<uint64_t>& hosts, std::string* answer, std::string* error) {
  Decision d = decideLocality(hosts, realAvailable());
  if (d.path == Path::kFail) {
    *error = d.reason;
    return false;
  }
  char id[kAnswerIdBytes] = {};
  std::string why;
  if (d.path == Path::kNccl) {
    // Ranks on several hosts: the hierarchical path when it applies (equal ranks per host), else the flat NCCL.
    if (shimHierarchicalAnswer(hosts, answer, &why, error)) return true;
    if (!error->empty()) return false;
  }
  if (d.path == Path::kConccl) {
    concclUniqueId cid;
    if (!localConcclId(&cid, error)) return false;
    static_assert(sizeof(cid.internal) <= kAnswerIdBytes);
    std::memcpy(id, cid.internal, sizeof(cid.internal));
  } else {
    auto fn = realFn<decltype(&::ncclGetUniqueId)>("ncclGetUniqueId");
    ncclUniqueId nid;
    ncclResult_t r = fn ? fn(&nid) : ncclInvalidUsage;
    if (r != ncclSuccess) {
      *error = std::string("the real ncclGetUniqueId failed: ") + ncclResultString(r);
      return false;
    }
    std::memcpy(id, nid.internal, kAnswerIdBytes);
  }
  answer->assign(1, d.path == Path::kConccl ? kAnswerConccl : kAnswerNccl);
  answer->append(id, kAnswerIdBytes);
  answer->append(d.reason);
  if (!why.empty()) answer->append("; " + why);
  return true;
}

ncclResult_t rendezvousResult(RendezvousStatus s) {
  switch (s) {
    case RendezvousStatus::kOk:
      return ncclSuccess;
    case RendezvousStatus::kTimeout:
      return ncclRemoteError;  // as conccl's own timeout through the shim (concclTimeout -> ncclRemoteError)
    case RendezvousStatus::kBadUsage:
    case RendezvousStatus::kAnswerFailed:
      return ncclInvalidUsage;
    case RendezvousStatus::kRefused:
      return ncclInvalidArgument;  // the id is not this rendezvous's (altered, or stale)
    case RendezvousStatus::kSocketError:
      return ncclSystemError;
  }
  return ncclInternalError;
}

// A communicator's path and handle as its init left them.
struct InitOutcome {
  ncclResult_t result = ncclSuccess;
  Path path = Path::kFail;
  concclComm_t conccl = nullptr;
  ncclComm_t real = nullptr;
  std::vector<uint64_t> hosts;
  HierState* hier = nullptr;  // path kNccl across hosts, hierarchical (shim_hierarchical.h)
  std::string reason;
  std::string error;  // result != ncclSuccess / ncclInProgress
};

// Meets the other ranks at the root, then inits on the path the root chose. Blocks (bounded by the id's timeout,
// then by conccl's or NCCL's own init). config: the caller's, passed to the real NCCL only.
InitOutcome initFromRendezvous(const RendezvousId& rid, int nranks, int rank, ncclConfig_t* config,
                               const std::string& call) {
  InitOutcome o;
  RendezvousResult met;
  std::string error;
  RendezvousStatus s = rendezvous(rid, rank, nranks, thisHost().id, &met, &error);
  if (s != RendezvousStatus::kOk) {
    o.result = rendezvousResult(s);
    o.error = call + ": rank " + std::to_string(rank) + " of " + std::to_string(nranks) + ": " + error;
    return o;
  }
  // The connection to the root: a liveness link for a watched answer, else closed now.
  std::shared_ptr<LivenessLink> link;
  if (met.link >= 0) {
    if (isHierarchicalAnswer(met.answer)) {
      link = std::make_shared<LivenessLink>(met.link);
    } else {
      ::close(met.link);
    }
    met.link = -1;
  }
  if (met.answer.size() < 1 + kAnswerIdBytes ||
      (met.answer[0] != kAnswerConccl && met.answer[0] != kAnswerNccl && met.answer[0] != kAnswerHierarchical)) {
    o.result = ncclInternalError;
    o.error = call + ": the rendezvous root's answer is malformed (a shim of another version made the id?)";
    return o;
  }
  o.hosts = std::move(met.hosts);
  if (met.answer[0] == kAnswerHierarchical) {
    HierInit h = initHierarchical(met.answer, o.hosts, nranks, rank, config, call);
    if (h.hier != nullptr) {
      watchLiveness(h.hier, std::move(link), /*owner=*/true, {});
    } else if (link != nullptr) {
      link->bye();  // this rank's init failed: it leaves the watch; it did not die (the others hear "ended")
    }
    o.path = Path::kNccl;
    o.result = h.result;
    o.error = h.error;
    o.real = h.flat;
    o.hier = h.hier;
    o.reason = h.reason + ", rendezvous " + rendezvousAddress(rid);
    return o;
  }
  o.reason = met.answer.substr(1 + kAnswerIdBytes) + ", rendezvous " + rendezvousAddress(rid);
  if (met.answer[0] == kAnswerConccl) {
    concclUniqueId id;
    std::memcpy(id.internal, met.answer.data() + 1, sizeof(id.internal));
    concclResult_t r = concclCommInitRank(&o.conccl, nranks, id, rank);
    if (r != concclSuccess) {
      o.result = static_cast<ncclResult_t>(toNcclResult(r));
      o.error = call + " on conccl: " + concclGetErrorString(r) + ": " + concclGetLastError(nullptr);
      return o;
    }
    o.path = Path::kConccl;
    return o;
  }
  ncclUniqueId id;
  std::memcpy(id.internal, met.answer.data() + 1, kAnswerIdBytes);
  auto fn = realFn<decltype(&::ncclCommInitRankConfig)>("ncclCommInitRankConfig");
  if (fn == nullptr) {
    o.result = ncclInvalidUsage;
    o.error = call + ": " + o.reason + ", but the real NCCL lacks ncclCommInitRankConfig";
    return o;
  }
  o.result = fn(&o.real, nranks, id, rank, config);
  o.path = Path::kNccl;
  if (o.result != ncclSuccess && o.result != ncclInProgress) {
    auto lastError = realFn<decltype(&::ncclGetLastError)>("ncclGetLastError");
    o.error = call + " on the real NCCL (" + o.reason + "): " + ncclResultString(o.result) + ": " +
              (lastError ? lastError(nullptr) : "");
  }
  return o;
}

// NCCL lets one thread create several ranks of a communicator between ncclGroupStart and ncclGroupEnd (nccl-tests
// with several GPUs per process does). The rendezvous and conccl's init block for the peers, so inside a group the
// shim hands out the wrapper at once and runs the inits at the outermost ncclGroupEnd, one thread per rank (the
// handle is usable after ncclGroupEnd, as with NCCL). An init the rendezvous sends to the real NCCL then runs on
// that thread too, outside any NCCL group, which NCCL allows.
struct PendingInit {
  ncclComm_t wrapper;
  int nranks;
  ncclUniqueId id;
  IdKind kind;
  int rank;
  int device;
  bool hasConfig;
  ncclConfig_t config;
  std::string call;
};
thread_local std::vector<PendingInit> tlsPendingInits;

ncclResult_t initRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t* config,
                      const char* call) {
  if (comm == nullptr) return fail(nullptr, ncclInvalidArgument, std::string(call) + ": comm is NULL");
  const IdKind kind = classifyId(commId.internal, NCCL_UNIQUE_ID_BYTES);
  if (kind == IdKind::kNccl) {
    Decision d = decideInitRank(shim().env, false, realAvailable());
    if (d.path == Path::kFail) return fail(nullptr, ncclInvalidUsage, std::string(call) + ": " + d.reason);
    auto fn = realFn<decltype(&::ncclCommInitRankConfig)>("ncclCommInitRankConfig");
    if (fn == nullptr) return fail(nullptr, ncclInvalidUsage, std::string(call) + ": real NCCL lacks it");
    ncclComm_t real = nullptr;
    ncclResult_t r = fn(&real, nranks, commId, rank, config);
    if (r != ncclSuccess && r != ncclInProgress) return r;
    *comm = wrapComm(Path::kNccl, nullptr, real, call, d.reason, rank, nranks);
    return r;
  }
  // A marked id is followed by every rank, whatever its own switches say (ranks on two libraries would wait for
  // each other forever). conccl ignores NCCL's tuning fields; a non-blocking config is honoured by completing init
  // before returning, which NCCL's contract allows.
  if (groupDepth() > 0) {
    int device = -1;
    if (cudaGetDevice(&device) != cudaSuccess) {
      return fail(nullptr, ncclUnhandledCudaError, std::string(call) + ": cudaGetDevice failed");
    }
    auto* w = new ncclComm;
    w->path = Path::kConccl;  // w->conccl stays NULL until ncclGroupEnd (which may also move it to NCCL)
    PendingInit p{w, nranks, commId, kind, rank, device, config != nullptr, {}, call};
    if (config != nullptr) p.config = *config;
    tlsPendingInits.push_back(p);
    *comm = w;
    return ncclSuccess;
  }
  if (kind == IdKind::kConcclJob) {
    Decision d = decideInitRank(shim().env, true, realAvailable());
    concclUniqueId id;
    untagConcclId(commId.internal, NCCL_UNIQUE_ID_BYTES);
    std::memcpy(id.internal, commId.internal, sizeof(id.internal));
    concclComm_t c = nullptr;
    concclResult_t r = concclCommInitRank(&c, nranks, id, rank);
    if (r != concclSuccess) return fromConccl(nullptr, r, call);
    *comm = wrapComm(Path::kConccl, c, nullptr, call, d.reason, rank, nranks);
    return ncclSuccess;
  }
  std::optional<RendezvousId> rid = decodeRendezvousId(commId.internal);
  if (!rid) return fail(nullptr, ncclInvalidArgument, std::string(call) + ": a rendezvous id of another version");
  InitOutcome o = initFromRendezvous(*rid, nranks, rank, config, call);
  if (o.result != ncclSuccess && o.result != ncclInProgress) return fail(nullptr, o.result, o.error);
  if (o.hier != nullptr) {
    auto* w = new ncclComm;
    w->path = o.path;
    w->real = o.real;
    w->hier = o.hier;  // before the log line, which then says "hierarchical"
    w->hosts = std::move(o.hosts);
    logComm(w, call, o.reason, rank, nranks);
    *comm = w;
    return o.result;
  }
  *comm = wrapComm(o.path, o.conccl, o.real, call, o.reason, rank, nranks);
  (*comm)->hosts = std::move(o.hosts);
  return o.result;
}

}  // namespace

const HostIdentity& thisHost() {
  static const HostIdentity identity = [] {
    HostIdentity h = currentHostIdentity(envLookup);
    char hex[24];
    std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(h.id));
    logInfo(std::string("host identity ") + hex + " (" + h.source + ")");
    return h;
  }();
  return identity;
}

ncclResult_t runPendingInits() {
  std::vector<PendingInit> inits;
  inits.swap(tlsPendingInits);
  if (inits.empty()) return ncclSuccess;
  std::vector<InitOutcome> outcomes(inits.size());
  auto run = [&](size_t i) {
    PendingInit& p = inits[i];
    InitOutcome& o = outcomes[i];
    const std::string call = p.call + " (at ncclGroupEnd)";
    if (cudaSetDevice(p.device) != cudaSuccess) {
      o.result = ncclUnhandledCudaError;
      o.error = call + ": cudaSetDevice(" + std::to_string(p.device) + ") failed";
      return;
    }
    if (p.kind == IdKind::kRendezvous) {
      std::optional<RendezvousId> rid = decodeRendezvousId(p.id.internal);
      if (!rid) {
        o.result = ncclInvalidArgument;
        o.error = call + ": a rendezvous id of another version";
        return;
      }
      o = initFromRendezvous(*rid, p.nranks, p.rank, p.hasConfig ? &p.config : nullptr, call);
      return;
    }
    // An id marked for the whole job (made when no rendezvous root could start).
    concclUniqueId id;
    untagConcclId(p.id.internal, NCCL_UNIQUE_ID_BYTES);
    std::memcpy(id.internal, p.id.internal, sizeof(id.internal));
    concclResult_t r = concclCommInitRank(&o.conccl, p.nranks, id, p.rank);
    if (r != concclSuccess) {
      o.result = static_cast<ncclResult_t>(toNcclResult(r));
      o.error = call + " on conccl: " + concclGetErrorString(r) + ": " + concclGetLastError(nullptr);
      return;
    }
    o.path = Path::kConccl;
    o.reason = decideInitRank(shim().env, true, realAvailable()).reason;
  };
  if (inits.size() == 1) {
    run(0);
  } else {
    std::vector<std::thread> threads;
    for (size_t i = 0; i < inits.size(); ++i) threads.emplace_back(run, i);
    for (auto& t : threads) t.join();
  }
  ncclResult_t first = ncclSuccess;
  for (size_t i = 0; i < inits.size(); ++i) {
    InitOutcome& o = outcomes[i];
    ncclComm_t w = inits[i].wrapper;
    ncclResult_t r = o.result;
    if (r == ncclSuccess || r == ncclInProgress) {
      w->path = o.path;
      w->conccl = o.conccl;
      w->real = o.real;
      w->hier = o.hier;
      w->hosts = std::move(o.hosts);
      logComm(w, inits[i].call + " (at ncclGroupEnd)", o.reason, inits[i].rank, inits[i].nranks);
    } else {
      if (o.path == Path::kNccl) w->path = Path::kNccl;  // the real NCCL's own error, its handle is NULL
      r = fail(w, r, o.error.empty() ? inits[i].call + " failed" : o.error);
    }
    if (first == ncclSuccess) first = r;
  }
  return first;
}

}  // namespace conccl::nccl

using namespace conccl::nccl;

CONCCL_NCCL_EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId) {
  if (fromRealNccl(__builtin_return_address(0))) CONCCL_NCCL_FORWARD(nullptr, ncclGetUniqueId, uniqueId);
  if (uniqueId == nullptr) return fail(nullptr, ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
  if (!shim().env.enabled) {
    if (!realAvailable()) return fail(nullptr, ncclInvalidUsage, "ncclGetUniqueId: the shim is off and no real NCCL");
    CONCCL_NCCL_FORWARD(nullptr, ncclGetUniqueId, uniqueId);
  }
  // Each communicator decides at its init, from where its ranks are: start the meeting point for them.
  std::vector<NetInterface> ifs = listInterfaces();
  InterfaceChoice c = pickInterface(ifs, envLookup);
  std::string error = c.error;
  if (c.index >= 0) {
    auto root = RendezvousRoot::start(ifs[static_cast<size_t>(c.index)].ipv4, std::chrono::milliseconds(timeoutMs()),
                                      rootAnswer, &error, isHierarchicalAnswer);
    if (root != nullptr) {
      encodeRendezvousId(root->id(), uniqueId->internal);
      logInfo("ncclGetUniqueId -> rendezvous at " + rendezvousAddress(root->id()) + " on " +
              ifs[static_cast<size_t>(c.index)].name + " (" + c.why + "); each communicator made from it runs on "
              "conccl if all its ranks share a host, on NCCL otherwise");
      thisHost();
      keepRendezvousRoot(std::move(root), [](const std::string& m) { logInfo(m); });
      return ncclSuccess;
    }
  }
  // No rendezvous possible: the job-wide decision from the launchers' variables, as before per-communicator locality.
  logWarn("ncclGetUniqueId: no rendezvous root (" + error + "); deciding for the whole job from the launcher's "
          "variables instead");
  std::string why;
  LaunchScope scope = launchScopeFromEnv(envLookup, &why);
  Decision d = decideUniqueId(shim().env, scope, realAvailable());
  if (d.path == Path::kFail) return fail(nullptr, ncclInvalidUsage, "ncclGetUniqueId: " + d.reason);
  if (d.path == Path::kNccl) {
    logInfo("ncclGetUniqueId -> NCCL (" + d.reason + (why.empty() ? "" : ": " + why) + ")");
    CONCCL_NCCL_FORWARD(nullptr, ncclGetUniqueId, uniqueId);
  }
  concclUniqueId id;
  if (std::string e; !localConcclId(&id, &e)) return fail(nullptr, ncclSystemError, "ncclGetUniqueId: " + e);
  std::memcpy(uniqueId->internal, id.internal, sizeof(id.internal));
  if (!tagConcclId(uniqueId->internal, NCCL_UNIQUE_ID_BYTES)) {
    return fail(nullptr, ncclInternalError, "ncclGetUniqueId: conccl's id has no room for the shim's mark");
  }
  logInfo("ncclGetUniqueId -> conccl (" + d.reason + ")");
  return ncclSuccess;
}

CONCCL_NCCL_EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                                       ncclConfig_t* config) {
  return initRank(comm, nranks, commId, rank, config, "ncclCommInitRankConfig");
}

CONCCL_NCCL_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  return initRank(comm, nranks, commId, rank, nullptr, "ncclCommInitRank");
}

CONCCL_NCCL_EXPORT ncclResult_t ncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId,
                                                         ncclUniqueId* commIds, ncclConfig_t* config) {
  if (newcomm == nullptr || commIds == nullptr || nId < 1) {
    return fail(nullptr, ncclInvalidArgument, "ncclCommInitRankScalable: bad arguments");
  }
  // The shim's ids need one meeting point: the first id's. With several rendezvous ids (PyTorch above
  // TORCH_NCCL_RANKS_PER_ROOT ranks), the others are not used (their roots end at their timeout) and a communicator
  // across hosts is made by the real ncclCommInitRankConfig with the one id the first root made.
  const IdKind kind = classifyId(commIds[0].internal, NCCL_UNIQUE_ID_BYTES);
  if (kind == IdKind::kRendezvous) {
    return initRank(newcomm, nranks, commIds[0], myrank, config, "ncclCommInitRankScalable");
  }
  if (kind == IdKind::kConcclJob) {
    if (nId != 1) return fail(nullptr, ncclInvalidUsage, "ncclCommInitRankScalable: several conccl ids");
    return initRank(newcomm, nranks, commIds[0], myrank, config, "ncclCommInitRankScalable");
  }
  ncclComm_t real = nullptr;
  auto fn = realFn<decltype(&::ncclCommInitRankScalable)>("ncclCommInitRankScalable");
  if (fn == nullptr) return fail(nullptr, ncclInvalidUsage, "ncclCommInitRankScalable: no real NCCL");
  ncclResult_t r = fn(&real, nranks, myrank, nId, commIds, config);
  if (r != ncclSuccess && r != ncclInProgress) return r;
  *newcomm = wrapComm(Path::kNccl, nullptr, real, "ncclCommInitRankScalable", "NCCL unique ids", myrank, nranks);
  return r;
}
